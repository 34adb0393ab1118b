"""Write model_cards/smollm2-*.md for the bundled assistants from their training records and the acceptance in
benchmarks/results/acceptance_cpu.json (flashspec_hf.evaluation.acceptance per assistant per domain):
python -m benchmarks.write_model_cards"""

import json
from pathlib import Path

from flashspec_hf.distill import model_card

root = Path(__file__).resolve().parents[1]
measured = json.loads((root / "benchmarks/results/acceptance_cpu.json").read_text())
setup = ("Held-out prompts (12 per domain: chitchat conversations 0–11, HumanEval 0–11, package descriptions), "
         "greedy, γ = 4, 64 new tokens, fp32 on CPU (2 cores), torch 2.13.0+cpu, transformers 5.24.0, 2026-11-29. "
         "Measured with `flashspec_hf.evaluation.acceptance`.")
for folder in sorted((root / "flashspec_hf/assistants").iterdir()):
    info = json.loads((folder / "training.json").read_text())
    short = folder.name.removeprefix("smollm2-")
    rows = {k.split("|")[1]: v for k, v in measured.items() if k.split("|")[0] == short}
    (root / "model_cards" / f"{folder.name}.md").write_text(model_card(info, {"setup": setup, **rows}))
    print("wrote", folder.name)
