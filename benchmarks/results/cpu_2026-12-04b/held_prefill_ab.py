"""In one process, alternating per call: flashspec with a fixed arm (prompt lookup, the plain arm) with the target's
prefill holding the pending column's logits (HEAD) and stopping one column short (before), against stock generate on
the held-out prompts; seconds summed per setting over three rounds. Run from the repository root."""
import collections
import time

from flashspec_hf import demo
from flashspec_hf.backends import DynamicBackend
from flashspec_hf.cli import load_models
from flashspec_hf.evaluation.inputs import load_prompt_files, prepare_prompts
from flashspec_hf.selection import FixedArm


def short_prefill(self, model, columns, window=None):  # before: the pending column read with the first step
    runner = self._runner(model)
    if columns.host_length > 1:
        runner.prefill(columns, columns.host_length - 1, window)
    return runner


settings = {"held": DynamicBackend.target_runner, "before": short_prefill}
args = demo.parse_args(["--prompts", "benchmarks/results/demo_cpu_2026-12-01/heldout_prompts.jsonl", "--raw-prompts",
                        "--num-prompts", "4"])
prompts = prepare_prompts(load_prompt_files(args.prompts), num_prompts=args.num_prompts)
target, tok, assistants = load_models(args)
arms = {"prompt_lookup": 3, "plain": 4}
kw = dict(max_new_tokens=48, do_sample=False)


def run(x, arm):
    selector = FixedArm(arm)
    selector.cost_aware = True  # the plain arm is offered to cost-aware selectors
    return target.generate(**x, **kw, assistant_models=assistants, flashspec=True, selector=selector)


x0 = tok(prompts[0]["prompt"], return_tensors="pt")
for setting in settings.values():  # warm-up (and the arm costs' timing)
    DynamicBackend.target_runner = setting
    for arm in arms.values():
        run(x0, arm)
target.generate(**x0, **kw)
seconds = collections.defaultdict(float)
for round_ in range(3):
    for row in prompts:
        x = tok(row["prompt"], return_tensors="pt")
        for name in (list(settings) if round_ % 2 == 0 else list(settings)[::-1]):
            DynamicBackend.target_runner = settings[name]
            for arm_name, arm in arms.items():
                start = time.perf_counter()
                run(x, arm)
                seconds[row["domain"], arm_name, name] += time.perf_counter() - start
        start = time.perf_counter()
        target.generate(**x, **kw)
        seconds[row["domain"], "stock", "-"] += time.perf_counter() - start
for domain in sorted({d for d, _, _ in seconds}):
    stock = seconds[domain, "stock", "-"]
    print(domain, f"stock {stock:.2f} s;", "; ".join(
        f"{arm}: held {stock / seconds[domain, arm, 'held']:.3f}x, before {stock / seconds[domain, arm, 'before']:.3f}x"
        for arm in arms))
