"""Per-arm step seconds of the demo's default on the held-out prose prompts (CPU), setup seconds per call, and plain
generate's seconds per token (prefill included). Run from the repository root."""
import json, statistics, sys, time
from collections import defaultdict
import torch
from flashspec_hf import demo
from flashspec_hf.cli import load_models, run_selector
from flashspec_hf.evaluation.inputs import load_prompt_files, prepare_prompts
args = demo.parse_args(["--prompts", "benchmarks/results/demo_cpu_2026-12-01/heldout_prompts.jsonl", "--raw-prompts", "--num-prompts", "4"] + sys.argv[1:])
prompts = prepare_prompts(load_prompt_files(args.prompts), num_prompts=args.num_prompts)
target, tok, assistants = load_models(args)
sel, label = run_selector(args)
kw = dict(max_new_tokens=48, do_sample=False, num_assistant_tokens=4)
w = tok(prompts[0]["prompt"], return_tensors="pt")
target.generate(**w, max_new_tokens=4, do_sample=False)
target.generate(**w, max_new_tokens=4, do_sample=False, assistant_models=assistants, flashspec=True, selector=sel)
per_arm = defaultdict(list); setup = []; plain = []; other = []
for row in prompts:
    if row["domain"] != "docs prose": continue
    x = tok(row["prompt"], return_tensors="pt")
    t = time.perf_counter(); o = target.generate(**x, **kw); plain.append((time.perf_counter() - t) / (o.shape[1] - x["input_ids"].shape[1]))
    t = time.perf_counter(); o = target.generate(**x, **kw, assistant_models=assistants, flashspec=True, selector=sel); total = time.perf_counter() - t
    s = target.flashspec_stats
    for a, sec, acc in zip(s.step_arms, s.step_seconds, s.step_accepted): per_arm[s.arm_names[a]].append((sec, acc[0]))
    setup.append(s.setup_seconds); other.append(total - s.setup_seconds - sum(s.step_seconds))
print("plain s/token", [round(p * 1e3, 1) for p in plain])
print("setup ms", [round(p * 1e3, 1) for p in setup], "outside steps+setup ms", [round(p * 1e3, 1) for p in other])
for name, v in per_arm.items():
    secs = [a for a, _ in v]; acc = [b for _, b in v]
    print(f"{name:18s} steps {len(v):3d} median {1e3*statistics.median(secs):6.1f} ms  mean {1e3*statistics.mean(secs):6.1f}  max {1e3*max(secs):6.1f}  mean accepted {statistics.mean(acc):.2f}")
