"""Domain shift on real text: python -m benchmarks.domain_shift [--segments 6 --per-segment 4 --max-new-tokens 64]

A stream of prompts alternates segments of conversations (chitchat-dataset, held out from the drafts' training)
and code (HumanEval). The real SmolLM2-135M-Instruct target (greedy, γ = 4; CPU fp32 by default, or
``--device cuda --dtype bfloat16 --static`` for the static loop with CUDA graphs) drafts with its pool:
the distilled chat, code and general assistants and prompt lookup. Engines, run on every prompt in turn (so
machine-load drift hits all of them alike): plain ``generate``; each fixed arm; and selectors that keep their
statistics along the whole stream (one instance each). The per-segment oracle is the fixed arm with the most
tokens/s in each segment, known only in hindsight. ``--corpus FILE`` takes the held-out prompts from the corpus
of draft_release/build_distill_corpus.py instead of the datasets (for machines without ``datasets``).

Writes benchmarks/results/domain_shift.csv (one row per prompt and engine), domain_shift.json (per engine:
overall tokens/s, ratio to the oracle and to the best fixed arm; per segment: tokens/s and τ) and
domain_shift.png (tokens/s per segment; the arm chosen at each step of the stream). Units: tokens/s are
generated tokens over wall seconds of the ``generate`` call, batch 1.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import platform
import time
from pathlib import Path

import torch
import transformers

import flashspec_hf  # noqa: F401  (installs the generate flag)
from flashspec_hf import FixedArm, Hedge, PromptLookup, ThompsonSampling, UCB1
from flashspec_hf.models import distilled_assistants, load_target

OUT = Path(__file__).parent / "results"
SELECTORS = {  # fresh instances per run; each lives along the whole stream
    "thompson": lambda: ThompsonSampling(seed=0),
    "discounted_thompson": lambda: ThompsonSampling(seed=0, discount=0.97),
    "discounted_ucb": lambda: UCB1(discount=0.97, exploration=0.5),
    "cost_aware_thompson": lambda: ThompsonSampling(seed=0, cost_aware=True),
    "cost_aware_discounted_thompson": lambda: ThompsonSampling(seed=0, discount=0.99, cost_aware=True),
    "cost_aware_ucb1": lambda: UCB1(exploration=0.5, cost_aware=True),
    "hedge": lambda: Hedge(seed=0, discount=0.97),  # full information: dynamic loop only
}


def stream(tokenizer, segments: int, per_segment: int, corpus: Path | None) -> list[tuple[int, str, str]]:
    """``(segment, domain, prompt)`` in stream order: chat, code, chat, … ``per_segment`` prompts each."""
    half = (segments + 1) // 2
    if corpus is not None:
        held_out = json.load(gzip.open(corpus, "rt"))["eval"]
        chat, code = held_out["chat"][: half * per_segment], held_out["code"][: half * per_segment]
    else:
        from flashspec_hf.data import chat_prompts, code_prompts

        chat = chat_prompts(tokenizer, half * per_segment)["prompt"]
        code = code_prompts(half * per_segment)["prompt"]
    rows = []
    for s in range(segments):
        domain, pool = ("chat", chat) if s % 2 == 0 else ("code", code)
        rows += [(s, domain, p) for p in pool[(s // 2) * per_segment : (s // 2 + 1) * per_segment]]
    return rows


def timed(model, inputs, **kwargs) -> tuple[int, float]:
    """New tokens and wall seconds of one ``generate`` call (batch 1)."""
    if model.device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    out = model.generate(**inputs, do_sample=False, **kwargs)
    if model.device.type == "cuda":
        torch.cuda.synchronize()
    return out.shape[1] - inputs["input_ids"].shape[1], time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--segments", type=int, default=6)
    parser.add_argument("--per-segment", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--name", default="domain_shift", help="output file prefix")
    parser.add_argument("--corpus", type=Path, help="held-out prompts from this corpus (json.gz) instead of datasets")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--static", action="store_true", help="cache_implementation='static' (no Hedge)")
    args = parser.parse_args()
    torch.manual_seed(0)
    target, tokenizer = load_target(dtype=getattr(torch, args.dtype), device=args.device)
    pool = [*distilled_assistants(target), PromptLookup()]
    arm_names = ["chat", "code", "general", "prompt_lookup"]
    learning = {k: v for k, v in SELECTORS.items() if not (args.static and k == "hedge")}
    engines = {f"fixed_{name}": (lambda a=a: FixedArm(a)) for a, name in enumerate(arm_names)} | learning
    common = dict(max_new_tokens=args.max_new_tokens, num_assistant_tokens=4)
    if args.static:
        common["cache_implementation"] = "static"
    rows, arms_over_time = [], {name: [] for name in learning}
    prompts = stream(tokenizer, args.segments, args.per_segment, args.corpus)
    warm = tokenizer(prompts[0][2], return_tensors="pt").to(args.device)
    timed(target, warm, max_new_tokens=args.max_new_tokens)
    for make in engines.values():  # warm-up: kernels, allocator, CUDA graphs (fresh selectors afterwards)
        timed(target, warm, assistant_models=pool, flashspec=True, selector=make(), **common)
    selectors = {name: make() for name, make in engines.items()}
    for i, (segment, domain, prompt) in enumerate(prompts):
        inputs = tokenizer(prompt, return_tensors="pt").to(args.device)
        tokens, seconds = timed(target, inputs, max_new_tokens=args.max_new_tokens)
        rows.append(dict(prompt=i, segment=segment, domain=domain, engine="plain", new_tokens=tokens, seconds=seconds))
        for name, selector in selectors.items():
            tokens, seconds = timed(target, inputs, assistant_models=pool, flashspec=True, selector=selector, **common)
            stats = target.flashspec_stats
            rows.append(dict(prompt=i, segment=segment, domain=domain, engine=name, new_tokens=tokens, seconds=seconds,
                             steps=stats.steps, tau=stats.tau, arms=" ".join(map(str, stats.step_arms))))
            if name in arms_over_time:
                arms_over_time[name] += [(segment, a) for a in stats.step_arms]
        print(f"prompt {i + 1}/{len(prompts)} ({domain}) done", flush=True)
    summary = summarize(rows, list(engines), args.segments)
    args.out.mkdir(exist_ok=True)
    with open(args.out / f"{args.name}.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["prompt", "segment", "domain", "engine", "new_tokens", "seconds",
                                               "steps", "tau", "arms"])
        writer.writeheader()
        writer.writerows(rows)
    gpu = torch.cuda.get_device_name() if args.device.startswith("cuda") else "no GPU"
    summary["setup"] = {
        "machine": f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, {gpu}",
        "torch": torch.__version__, "transformers": transformers.__version__, "date": time.strftime("%Y-%m-%d"),
        "target": f"SmolLM2-135M-Instruct {args.dtype}", "arms": arm_names, "gamma": 4, "greedy": True,
        **{k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
    }
    (args.out / f"{args.name}.json").write_text(json.dumps(summary, indent=1))
    plot(summary, arms_over_time, arm_names, args.out / f"{args.name}.png")
    print(table(summary))


def summarize(rows: list[dict], engines: list[str], segments: int) -> dict:
    """Per engine and segment: tokens/s and τ; overall tokens/s against the per-segment oracle and best fixed arm."""
    def tps(rs):
        return sum(r["new_tokens"] for r in rs) / sum(r["seconds"] for r in rs)

    per = {e: [[r for r in rows if r["engine"] == e and r["segment"] == s] for s in range(segments)]
           for e in ["plain", *engines]}
    fixed = [e for e in engines if e.startswith("fixed_")]
    oracle = [max(fixed, key=lambda e: tps(per[e][s])) for s in range(segments)]
    oracle_rows = [r for s, e in enumerate(oracle) for r in per[e][s]]
    best_fixed = max(fixed, key=lambda e: tps(sum(per[e], [])))
    result = {"oracle_arms": oracle, "oracle_tok_s": tps(oracle_rows), "best_fixed": best_fixed, "engines": {}}
    for e, segs in per.items():
        overall = tps(sum(segs, []))
        result["engines"][e] = {
            "tok_s": overall,
            "vs_oracle": overall / result["oracle_tok_s"],
            "vs_best_fixed": overall / tps(sum(per[best_fixed], [])),
            "segments_tok_s": [tps(rs) for rs in segs],
            "segments_tau": [sum(r.get("tau", 1.0) * r.get("steps", 1) for r in rs) / sum(r.get("steps", 1) for r in rs)
                             for rs in segs],
        }
    return result


def table(summary: dict) -> str:
    lines = [f"per-segment oracle: {summary['oracle_arms']}, {summary['oracle_tok_s']:.1f} tok/s; "
             f"best fixed arm: {summary['best_fixed']}",
             f"{'engine':<22}{'tok/s':>8}{'/oracle':>9}{'/best fixed':>12}  tok/s per segment"]
    for e, r in summary["engines"].items():
        segs = " ".join(f"{x:5.1f}" for x in r["segments_tok_s"])
        lines.append(f"{e:<22}{r['tok_s']:>8.1f}{r['vs_oracle']:>9.3f}{r['vs_best_fixed']:>12.3f}  {segs}")
    return "\n".join(lines)


def plot(summary: dict, arms_over_time: dict, arm_names: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1 + len(arms_over_time), 1, figsize=(12, 3 + 1.6 * len(arms_over_time)))
    for e, r in summary["engines"].items():
        axes[0].plot(r["segments_tok_s"], marker="o", label=e, linestyle="--" if e.startswith("fixed_") else "-")
    axes[0].set_xlabel("segment (even: chat, odd: code)")
    axes[0].set_ylabel("tokens/s")
    axes[0].legend(fontsize=7, ncol=3)
    for ax, (name, steps) in zip(axes[1:], arms_over_time.items(), strict=True):
        ax.scatter(range(len(steps)), [a for _, a in steps], s=4, c=[s % 2 for s, _ in steps], cmap="coolwarm")
        ax.set_yticks(range(len(arm_names)), arm_names)
        ax.set_title(f"{name}: arm per step (blue: chat segment, red: code segment)", fontsize=9)
    axes[-1].set_xlabel("step along the stream")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
