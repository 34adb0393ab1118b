"""Which selector setting the CPU demo should use: ``flashspec_hf.evaluate`` on the built-in prompts (12 chat, then
12 code, 64 tokens, greedy, γ = 4, the three bundled assistants + prompt lookup, fp32) with a fresh selector per
prompt or one selector for the whole run. Writes benchmarks/results/selector_cpu.{json,csv}:
python -m benchmarks.selector_cpu"""

import csv
import json
from pathlib import Path

from flashspec_hf import SELECTORS
from flashspec_hf.data import builtin_prompts
from flashspec_hf.drafts import PromptLookup
from flashspec_hf.evaluation.run import evaluate
from flashspec_hf.models import distilled_assistants, load_target

RUNS = {  # label -> what generate gets: a name is a fresh selector per prompt, an instance lives along the run
    "cost_aware_thompson, fresh per prompt": lambda: "cost_aware_thompson",
    "cost_aware_thompson, one for the run": SELECTORS["cost_aware_thompson"],
    "cost_aware_discounted_thompson, one for the run": SELECTORS["cost_aware_discounted_thompson"],
    "cost_aware_ucb1, one for the run": SELECTORS["cost_aware_ucb1"],
}
target, tokenizer = load_target()
assistants = distilled_assistants(target) + [PromptLookup()]
prompts = builtin_prompts(tokenizer, 12)
results, rows = {}, []
for label, make in RUNS.items():
    report = evaluate(target, tokenizer, assistants, prompts, max_new_tokens=64, selector=make(), progress=False,
                      setup={"selector": label})
    results[label] = report.to_dict()["summary"]
    setup = report.setup
    for r in report.summary:
        rows.append({"selector": label, "category": r["domain"], "speedup": round(r["speedup"], 3),
                     "plain_tok_s": round(r["plain_tok_s"], 2), "flashspec_tok_s": round(r["flashspec_tok_s"], 2),
                     "tau": round(r["tau"], 3), "identical": f"{r['identical']}/{r['prompts']}"})
        print(rows[-1], flush=True)
root = Path(__file__).parent / "results"
keep = ("torch", "transformers", "date", "machine", "dtype", "max_new_tokens", "num_assistant_tokens")
(root / "selector_cpu.json").write_text(json.dumps({"setup": {k: setup[k] for k in keep}, "runs": results}, indent=1))
with (root / "selector_cpu.csv").open("w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
