"""Write model_cards/smollm2-*.md for the bundled assistants from their training records (which hold the
acceptance measured on the H200 by draft_release/distill_drafts.py), the CPU acceptance in
benchmarks/results/acceptance_cpu.json (benchmarks/acceptance_cpu.py) and the runs compared in
draft_release/results/distill_h200.json: python -m draft_release.write_model_cards"""

import json
from pathlib import Path

from flashspec_hf.model_card import model_card

root = Path(__file__).resolve().parents[1]
cpu = json.loads((root / "benchmarks/results/acceptance_cpu.json").read_text())
h200 = json.loads((root / "draft_release/results/distill_h200.json").read_text())
held_out = ("the first {n} chitchat conversations with at least 3 turns, in the chat template; HumanEval 0–{last}; "
            "package descriptions")
g, c = h200["setup"], cpu["setup"]
gpu_setup = (f"Held-out prompts ({held_out.format(n=24, last=23)}), greedy, γ = 4, 64 new tokens, fp32 target on an "
             f"{g['gpu']}, torch {g['torch']}, transformers {g['transformers']}, {g['date']} "
             "(`draft_release/distill_drafts.py`, `flashspec_hf.evaluation.run.acceptance`).")
n = c["prompts_per_domain"]
cpu_setup = (f"The same measurement on CPU ({c['machine']}, fp32, {held_out.format(n=n, last=n - 1)}), "
             f"torch {c['torch']}, transformers {c['transformers']}, {c['date']} (`benchmarks/acceptance_cpu.py`).")


def notes(domain: str) -> str:
    """The H200 runs of this domain's draft: what data, depth and steps gave."""
    lines = ["## Configurations compared (H200, same held-out prompts, `draft_release/results/distill_h200.json`)", "",
             "| layers × MLP width | data | steps | τ chat | τ code | τ prose | shipped |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['layers']} × {r['mlp_width']} | {r['data']} | {r['steps']:,} | {r['tau_chat']:.2f} | "
              f"{r['tau_code']:.2f} | {r['tau_prose']:.2f} | {'yes' if r['shipped'] else ''} |"
              for r in h200["runs"] if r["draft"].endswith(f"-{domain}")]
    return "\n".join(lines)


for folder in sorted((root / "flashspec_hf/assistants").iterdir()):
    info = json.loads((folder / "training.json").read_text())
    short = folder.name.removeprefix("smollm2-")
    on_cpu = {k.split("|")[1]: v for k, v in cpu.items() if k.split("|")[0] == short}
    same = {d: (m["tau"], m["alpha"]) for d, m in on_cpu.items()} == {
        d: (m["tau"], m["alpha"]) for d, m in info["measured"].items()}  # fp32 greedy: the same decisions
    if same:
        measured = [(f"{gpu_setup} {cpu_setup} It gave the same τ and α to every digit.", on_cpu)]
    else:
        measured = [(gpu_setup, info["measured"]), (cpu_setup, on_cpu)]
    (root / "model_cards" / f"{folder.name}.md").write_text(model_card(info, measured, notes(short)))
    print("wrote", folder.name)
