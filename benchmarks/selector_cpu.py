"""Which selector setting the CPU default should use, against every fixed arm of its pool: ``flashspec_hf.evaluate``
on the built-in prompts (N chat, then N code, greedy, γ = 4, the target's bundled drafts + prompt lookup, fp32), one
selector for the whole run (as the demo and ``flashspec-eval`` keep one), on one idle machine in one process.
Writes OUT/selector_cpu.{json,csv}:

    python -m benchmarks.selector_cpu --out benchmarks/results/selector_cpu_2026-12-02
"""

import argparse
import csv
import json
from pathlib import Path

import torch

from flashspec_hf import FixedArm

from . import selector_from_spec
from flashspec_hf.data import builtin_prompts
from flashspec_hf.drafts import PromptLookup
from flashspec_hf.evaluation.run import evaluate
from flashspec_hf.models import distilled_assistants, load_target


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--model", default=None, help="a preset (default: SmolLM2-135M-Instruct)")
    p.add_argument("--num-prompts", type=int, default=12, help="per domain")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--no-fixed", action="store_true", help="only the selectors, not every fixed arm")
    return p.parse_args()


def runs(pool: list, fixed: bool) -> dict:
    """label -> a fresh selector instance, kept along the run."""
    settings = {
        "default": selector_from_spec,
        "default conservative": lambda: selector_from_spec("default:conservative=0.05"),
    }
    if fixed:
        for i, a in enumerate(pool):
            settings[f"fixed {getattr(a, 'name', '') or a.config.name_or_path.rstrip('/').split('/')[-1]}"] = (
                lambda i=i: FixedArm(i))
    return settings


def main():
    args = parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(2)
    target, tokenizer = load_target(args.model)
    pool = distilled_assistants(target) + [PromptLookup()]
    prompts = builtin_prompts(tokenizer, args.num_prompts)
    results, rows = {}, []
    for label, make in runs(pool, not args.no_fixed).items():
        report = evaluate(target, tokenizer, pool, prompts, max_new_tokens=args.max_new_tokens, selector=make(),
                          progress=False, setup={"selector": label})
        results[label] = report.to_dict()["summary"]
        setup = report.setup
        for r in report.summary:
            rows.append({"selector": label, "category": r["domain"], "speedup": round(r["speedup"], 3),
                         "plain_tok_s": round(r["plain_tok_s"], 2), "flashspec_tok_s": round(r["flashspec_tok_s"], 2),
                         "tau": round(r["tau"], 3), "identical": f"{r['identical']}/{r['prompts']}"})
            print(rows[-1], flush=True)
    keep = ("torch", "transformers", "date", "machine", "dtype", "max_new_tokens", "num_assistant_tokens", "load")
    (out / "selector_cpu.json").write_text(json.dumps(
        {"setup": {k: setup[k] for k in keep if k in setup}, "runs": results}, indent=1))
    with (out / "selector_cpu.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


if __name__ == "__main__":
    main()
