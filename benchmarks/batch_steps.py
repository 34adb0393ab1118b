"""How many steps a batch takes with each arm held fixed: the batch runs until its slowest row has its tokens, so
the step count is the largest of the rows' own counts, not ``N / τ``. Real target (a preset, fp32, CPU is enough:
counts do not depend on speed), the e2e benchmark's real prompts (``benchmarks.e2e_bench``: the corpus's held-out
chat, code and prose prompts in that order, cut to the last ``--prompt-len`` tokens, left-padded), greedy, EOS off.
Prints and writes OUT/batch_steps.csv: per arm, the batch's steps, the mean and median of the rows' own steps, τ.

    python -m benchmarks.batch_steps --corpus .carry/c/corpus.json.gz --batch 32 --out /tmp/steps
"""

import argparse
import csv
import gzip
import json
import statistics
from pathlib import Path

import torch

from flashspec_hf import FixedArm, PromptLookup
from flashspec_hf.models import distilled_assistants, load_target

from . import selector_from_spec
from .e2e_bench import PRESETS


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--corpus", required=True, help="draft_release/build_distill_corpus.py's corpus (held-out prompts)")
    p.add_argument("--target", default="smollm2-135m", choices=sorted(PRESETS))
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--prompt-len", type=int, default=64)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--arms", default="", help="comma-separated arm names (default: every arm, then `default`)")
    return p.parse_args()


def row_steps(model, enc, pool, selector, max_new_tokens) -> list[int]:
    """The rows' own step counts (sorted): how many steps each row generated in, read from the call's statistics
    (``step_accepted`` lists the rows still generating at each step)."""
    model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False, assistant_models=pool, flashspec=True,
                   selector=selector, num_assistant_tokens=4)
    active = [len(step) for step in model.flashspec_stats.step_accepted] + [0]  # rows generating at each step
    return [s + 1 for s in range(len(active) - 1) for _ in range(active[s] - active[s + 1])]


def main():
    args = parse_args()
    torch.manual_seed(0)
    model, tokenizer = load_target(args.target, dtype=torch.float32, device="cpu")
    model.generation_config.eos_token_id = None
    pool = [*distilled_assistants(model, PRESETS[args.target].bundled), PromptLookup()]
    held_out = json.load(gzip.open(args.corpus, "rt"))["eval"]
    texts = [t for domain in ("chat", "code", "prose") for t in held_out[domain]]
    tokenizer.truncation_side = "left"
    enc = tokenizer([texts[i % len(texts)] for i in range(args.batch)], return_tensors="pt", padding=True,
                    truncation=True, max_length=args.prompt_len)
    model.generate(**enc, max_new_tokens=1, do_sample=False, assistant_models=pool, flashspec=True)
    names = model.flashspec_stats.arm_names  # the pool's arms (no plain arm: not a cost-aware selector)
    wanted = args.arms.split(",") if args.arms else [*names, "default"]
    rows = []
    for name in wanted:
        selector = selector_from_spec() if name == "default" else FixedArm(names.index(name))
        steps = row_steps(model, enc, pool, selector, args.max_new_tokens)
        rows.append(dict(arm=name, batch=args.batch, batch_steps=max(steps), row_steps_mean=statistics.mean(steps),
                         row_steps_median=statistics.median(steps), tau=round(model.flashspec_stats.tau, 3)))
        print(rows[-1], flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "batch_steps.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


if __name__ == "__main__":
    main()
