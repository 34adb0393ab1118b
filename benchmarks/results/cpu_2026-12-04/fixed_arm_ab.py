"""In one process, alternating FLASHSPEC_FEW_ROW_PRODUCTS=1 / 0 per call: flashspec with a fixed arm (the code draft,
prompt lookup, the plain arm) on the held-out prompts, against stock generate; seconds summed per setting."""
import os, statistics, sys, time, collections
import torch
from flashspec_hf import demo
from flashspec_hf.cli import load_models
from flashspec_hf.evaluation.inputs import load_prompt_files, prepare_prompts
from flashspec_hf.selection import FixedArm
args = demo.parse_args(["--prompts", "benchmarks/results/demo_cpu_2026-12-01/heldout_prompts.jsonl", "--raw-prompts", "--num-prompts", "4"])
prompts = prepare_prompts(load_prompt_files(args.prompts), num_prompts=args.num_prompts)
target, tok, assistants = load_models(args)
arms = {"smollm2-code": 1, "prompt_lookup": 3, "plain": 4}
kw = dict(max_new_tokens=48, do_sample=False)
def run(x, arm):
    sel = FixedArm(arm); sel.cost_aware = True
    return target.generate(**x, **kw, assistant_models=assistants, flashspec=True, selector=sel)
x0 = tok(prompts[0]["prompt"], return_tensors="pt")
for v in ("1", "0"):
    os.environ["FLASHSPEC_FEW_ROW_PRODUCTS"] = v
    for a in arms.values(): run(x0, a)
    target.generate(**x0, **kw)
secs = collections.defaultdict(float)
for rnd in range(3):
    for row in prompts:
        x = tok(row["prompt"], return_tensors="pt")
        for v in (("1", "0") if rnd % 2 == 0 else ("0", "1")):
            os.environ["FLASHSPEC_FEW_ROW_PRODUCTS"] = v
            for name, a in arms.items():
                s = time.perf_counter(); run(x, a); secs[row["domain"], name, v] += time.perf_counter() - s
        s = time.perf_counter(); target.generate(**x, **kw); secs[row["domain"], "stock", "-"] += time.perf_counter() - s
for dom in sorted({d for d, _, _ in secs}):
    st = secs[dom, "stock", "-"]
    print(dom, "stock", round(st, 2), "s;", "; ".join(f"{n}: on {st / secs[dom, n, '1']:.3f}x off {st / secs[dom, n, '0']:.3f}x" for n in arms))
