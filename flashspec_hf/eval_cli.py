"""``flashspec-eval`` (or ``python -m flashspec_hf.eval_cli``): flashspec against plain ``generate`` on a dataset.

Default, offline: the SmolLM2-135M-Instruct target, its three bundled distilled assistants, and the built-in chat
(chitchat-dataset) and code (HumanEval) prompts, as ``flashspec-demo``. ``--data-files`` evaluates local json /
jsonl / csv / parquet files instead (a prompt column and an optional category column). Prints a Markdown table per
category (tokens/s of both engines, speed-up, τ, α and share per arm, identical greedy outputs) and writes
``results.json``, ``prompts.csv``, ``summary.csv``, ``summary.md`` and ``plot.png`` to ``--output-dir``.
"""

from __future__ import annotations

import argparse
import sys

from .cli import add_run_args, load_models, run_selector
from .data import builtin_prompts
from .evaluation.inputs import check_output_dir, check_settings, load_prompt_files, prepare_prompts
from .evaluation.run import evaluate

BUILTIN_PROMPTS_PER_DOMAIN = 3


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="flashspec-eval", description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts-from", choices=["builtin", "files"],
                   help="builtin: chitchat + HumanEval prompts (default without --data-files); files: --data-files")
    p.add_argument("--data-files", nargs="+", metavar="FILE", help="local json / jsonl / csv / parquet files")
    p.add_argument("--format", choices=["json", "csv", "parquet"], help="of --data-files (default: from extension)")
    p.add_argument("--split", default="train", help="load_dataset split of --data-files (default train)")
    p.add_argument("--prompt-column", default="prompt", help="column with the prompts (default prompt)")
    p.add_argument("--category-column",
                   help="column with each prompt's category (default: domain, else category, else one category all)")
    add_run_args(p, num_prompts=None)
    p.add_argument("--seed", type=int, default=0, help="torch.manual_seed before the first prompt (default 0)")
    p.add_argument("--output-dir", default="flashspec-eval", help="where the files go (default ./flashspec-eval)")
    p.add_argument("--no-plot", action="store_true", help="skip plot.png (no matplotlib needed)")
    args = p.parse_args(argv)
    if args.prompts_from is None:
        args.prompts_from = "files" if args.data_files else "builtin"
    if args.prompts_from == "files" and not args.data_files:
        p.error("--prompts-from files needs --data-files FILE [FILE ...]")
    if args.prompts_from == "builtin" and args.data_files:
        p.error("--data-files goes with --prompts-from files (or leave --prompts-from out)")
    return args


def main(argv: list[str] | None = None) -> None:
    """Run the evaluation. Bad data or settings stop it before any model is loaded (exit status 1, one line)."""
    args = parse_args(argv)
    try:  # bad data or settings fail here, before any model loads or file is written
        check_settings(args.max_new_tokens, args.gamma, args.do_sample, args.temperature, args.selector,
                       plot=not args.no_plot)
        check_output_dir(args.output_dir)
        if args.num_prompts is not None and args.num_prompts < 1:
            raise ValueError(f"--num-prompts must be at least 1, got {args.num_prompts}")
        if args.prompts_from == "files":
            data = load_prompt_files(args.data_files, args.format, args.split)
            prompts = prepare_prompts(data, args.prompt_column, args.category_column, args.num_prompts)
    except (ValueError, FileNotFoundError, ImportError) as error:
        raise SystemExit(f"flashspec-eval: error: {error}") from error
    target, tokenizer, assistants = load_models(args)
    per_category = args.num_prompts
    if args.prompts_from == "builtin":
        per_category = per_category or BUILTIN_PROMPTS_PER_DOMAIN
        prompts = builtin_prompts(tokenizer, per_category)
    selector, label = run_selector(args)
    setup = {"prompts_from": args.prompts_from, "assistants_kind": args.assistants,
             "num_prompts_per_category": per_category, "selector": label}
    if args.prompts_from == "files":
        setup.update(data_files=args.data_files, prompt_column=args.prompt_column,
                     category_column=args.category_column)
    report = evaluate(
        target, tokenizer, assistants, prompts,
        max_new_tokens=args.max_new_tokens, do_sample=args.do_sample, temperature=args.temperature,
        gamma=args.gamma, selector=selector, seed=args.seed, output_dir=args.output_dir,
        plot=not args.no_plot, setup=setup,
    )
    print(report.markdown())
    print(f"wrote {', '.join(str(path) for path in report.files.values())}", file=sys.stderr)


if __name__ == "__main__":
    main()
