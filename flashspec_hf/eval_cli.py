"""``flashspec-eval`` (or ``python -m flashspec_hf.eval_cli``): flashspec against plain ``generate`` on a dataset.

Default, offline: the SmolLM2-135M-Instruct target, its three bundled distilled assistants, and the built-in chat
(chitchat-dataset) and code (HumanEval) prompts, as ``flashspec-demo``. ``--data-files`` evaluates local json /
jsonl / csv / parquet files instead (a prompt column and an optional category column). Prints a Markdown table per
category (tokens/s of both engines, speed-up, τ, α and share per arm, identical greedy outputs) and writes
``results.json``, ``prompts.csv``, ``summary.csv``, ``summary.md`` and ``plot.png`` to ``--output-dir``. Plain-text
prompts from files go in the tokenizer's chat template unless ``--raw-prompts``. Bad options, files or settings
stop it before any model loads, with one line on stderr (exit status 2).
"""

from __future__ import annotations

import argparse
import sys

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
from .evaluation.inputs import check_output_dir, check_settings, load_prompt_files, prepare_prompts
from .evaluation.run import evaluate

PROG = "flashspec-eval"

BUILTIN_PROMPTS_PER_DOMAIN = 3


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts-from", choices=["builtin", "files"],
                   help="builtin: chitchat + HumanEval prompts (default without --data-files); files: --data-files")
    p.add_argument("--data-files", nargs="+", metavar="FILE", help="local json / jsonl / csv / parquet files")
    add_file_args(p, "--data-files")
    p.add_argument("--split", default="train", help="load_dataset split of --data-files (default train)")
    add_run_args(p, num_prompts=None)
    p.add_argument("--seed", type=int, default=0, help="torch.manual_seed before the first prompt (default 0)")
    p.add_argument("--output-dir", default="flashspec-eval", help="where the files go (default ./flashspec-eval)")
    p.add_argument("--no-plot", action="store_true", help="skip plot.png (no matplotlib needed)")
    args = p.parse_args(argv)
    check_run_args(p, args, "--data-files")
    if args.prompts_from is None:
        args.prompts_from = "files" if args.data_files else "builtin"
    if args.prompts_from == "files" and not args.data_files:
        p.error("--prompts-from files needs --data-files FILE [FILE ...]")
    if args.prompts_from == "builtin" and args.data_files:
        p.error("--data-files goes with --prompts-from files (or leave --prompts-from out)")
    if args.prompts_from == "builtin" and args.split != "train":
        p.error("--split picks a split of --data-files: give the files, or leave --split out")
    return args


def main(argv: list[str] | None = None) -> None:
    """Run the evaluation. Bad options, data or settings stop it before any model loads or file is written (one
    line, exit status 2)."""
    args = parse_args(argv)
    per_category = args.num_prompts or (BUILTIN_PROMPTS_PER_DOMAIN if args.prompts_from == "builtin" else None)
    with user_errors(PROG):
        check_settings(args.max_new_tokens, args.gamma, args.do_sample, args.temperature, args.selector,
                       plot=not args.no_plot)
        check_output_dir(args.output_dir)
        if args.prompts_from == "files":
            data = load_prompt_files(args.data_files, args.format, args.split)
            prompts = prepare_prompts(data, args.prompt_column, args.category_column, args.num_prompts)
        else:
            check_builtin_num_prompts(per_category)
    with user_errors(PROG):
        target, tokenizer, assistants = load_models(args)
    selector, label = run_selector(args)
    setup = {"prompts_from": args.prompts_from, "assistants_kind": args.assistants,
             "num_prompts_per_category": per_category, "selector": label}
    if args.prompts_from == "files":
        prompts, setup["prompt_format"] = with_chat_template(prompts, tokenizer, args.raw_prompts,
                                                             ", ".join(args.data_files))
        setup.update(data_files=args.data_files, prompt_column=args.prompt_column,
                     category_column=args.category_column)
    else:
        prompts = builtin_prompts(tokenizer, per_category)
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
