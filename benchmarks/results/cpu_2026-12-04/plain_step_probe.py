"""A flashspec call forced onto the plain arm (48 steps) against stock generate (1 and 48 tokens), 5 alternating rounds,
on the first held-out prompt; FLASHSPEC_FEW_ROW_PRODUCTS=1 or 0 picks the products. Run from the repository root."""
import sys, time, statistics
import torch
from flashspec_hf import demo
from flashspec_hf.cli import load_models, run_selector
from flashspec_hf.evaluation.inputs import load_prompt_files, prepare_prompts
from flashspec_hf.selection import FixedArm
args = demo.parse_args(["--prompts", "benchmarks/results/demo_cpu_2026-12-01/heldout_prompts.jsonl", "--raw-prompts", "--num-prompts", "4"])
prompts = prepare_prompts(load_prompt_files(args.prompts), num_prompts=args.num_prompts)
target, tok, assistants = load_models(args)
x = tok(prompts[0]["prompt"], return_tensors="pt")
plain_arm = FixedArm(4); plain_arm.cost_aware = True
def fl(n, sel): return target.generate(**x, max_new_tokens=n, do_sample=False, assistant_models=assistants, flashspec=True, selector=sel)
for _ in range(2): fl(8, plain_arm); target.generate(**x, max_new_tokens=8, do_sample=False)
res = {k: [] for k in ("stock1", "stock48", "fl48", "fl_setup", "fl_steps", "fl_step_med")}
for _ in range(5):
    t = time.perf_counter(); target.generate(**x, max_new_tokens=1, do_sample=False); res["stock1"].append(time.perf_counter() - t)
    t = time.perf_counter(); target.generate(**x, max_new_tokens=48, do_sample=False, min_new_tokens=48); res["stock48"].append(time.perf_counter() - t)
    t = time.perf_counter(); fl(48, plain_arm); res["fl48"].append(time.perf_counter() - t)
    s = target.flashspec_stats; res["fl_setup"].append(s.setup_seconds); res["fl_steps"].append(sum(s.step_seconds)); res["fl_step_med"].append(statistics.median(s.step_seconds))
print(s.arm_names, set(s.step_arms), len(s.step_seconds))
for k, v in res.items(): print(k, round(1e3 * statistics.median(v), 1), "ms")
