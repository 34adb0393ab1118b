"""Plain arm vs stock on the first held-out prose prompt (48 tokens, no EOS reached), 7 alternating rounds."""
import statistics, time
from flashspec_hf import demo
from flashspec_hf.cli import load_models
from flashspec_hf.evaluation.inputs import load_prompt_files, prepare_prompts
from flashspec_hf.selection import FixedArm
args = demo.parse_args(["--prompts", "benchmarks/results/demo_cpu_2026-12-01/heldout_prompts.jsonl", "--raw-prompts", "--num-prompts", "4"])
prompts = prepare_prompts(load_prompt_files(args.prompts), num_prompts=args.num_prompts)
target, tok, assistants = load_models(args)
x = tok(prompts[0]["prompt"], return_tensors="pt")
plain = FixedArm(4); plain.cost_aware = True
def fl(n): return target.generate(**x, max_new_tokens=n, do_sample=False, assistant_models=assistants, flashspec=True, selector=plain)
def st(n, **k): return target.generate(**x, max_new_tokens=n, do_sample=False, **k)
for _ in range(2): fl(8); st(8)
res = {k: [] for k in ("stock1", "stock48", "stock48_min", "fl48", "fl_setup", "fl_steps", "fl_step_med")}
for _ in range(7):
    t = time.perf_counter(); st(1); res["stock1"].append(time.perf_counter() - t)
    t = time.perf_counter(); o = st(48); res["stock48"].append(time.perf_counter() - t)
    t = time.perf_counter(); st(48, min_new_tokens=48); res["stock48_min"].append(time.perf_counter() - t)
    t = time.perf_counter(); f = fl(48); res["fl48"].append(time.perf_counter() - t)
    s = target.flashspec_stats; res["fl_setup"].append(s.setup_seconds); res["fl_steps"].append(sum(s.step_seconds)); res["fl_step_med"].append(statistics.median(s.step_seconds))
print("tokens", o.shape[1] - x["input_ids"].shape[1], f.shape[1] - x["input_ids"].shape[1], len(s.step_seconds))
for k, v in res.items(): print(k, round(1e3 * statistics.median(v), 1), "ms")
