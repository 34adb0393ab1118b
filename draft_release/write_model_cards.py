"""Write model_cards/<draft>.md for every bundled assistant from its training record (which holds the acceptance
measured on the H200 by draft_release/distill_drafts.py) and the runs compared on the H200:
python -m draft_release.write_model_cards

- SmolLM2-135M-Instruct's drafts (``smollm2-*``): also the CPU acceptance in benchmarks/results/acceptance_cpu.json
  (benchmarks/acceptance_cpu.py); the runs compared are draft_release/results/distill_h200.json.
- Qwen2.5-Coder-1.5B-Instruct's (``qwen-coder-*``): the runs compared are draft_release/results/distill_qwen_h200.json
  (draft_release/gpu_qwen_session.sh), bf16 target.
"""

import json
from pathlib import Path

from flashspec_hf.model_card import model_card

root = Path(__file__).resolve().parents[1]
cpu = json.loads((root / "benchmarks/results/acceptance_cpu.json").read_text())
h200 = json.loads((root / "draft_release/results/distill_h200.json").read_text())
qwen = json.loads((root / "draft_release/results/distill_qwen_h200.json").read_text())
held_out = ("the first {n} chitchat conversations with at least 3 turns, in the chat template; HumanEval 0–{last}; "
            "package descriptions")


def gpu_setup(run: dict, dtype: str) -> str:
    return (f"Held-out prompts ({held_out.format(n=24, last=23)}), greedy, γ = 4, 64 new tokens, {dtype} target on "
            f"an {run['gpu']}, torch {run['torch']}, transformers {run['transformers']}, {run['date']} "
            "(`draft_release/distill_drafts.py`, `flashspec_hf.evaluation.run.acceptance`).")


c = cpu["setup"]
n = c["prompts_per_domain"]
cpu_setup = (f"The same measurement on CPU ({c['machine']}, fp32, {held_out.format(n=n, last=n - 1)}), "
             f"torch {c['torch']}, transformers {c['transformers']}, {c['date']} (`benchmarks/acceptance_cpu.py`).")


def notes(rows: list[dict], source: str) -> str:
    """The H200 runs of one domain's draft: what data, depth and steps gave."""
    lines = [f"## Configurations compared (H200, same held-out prompts, `{source}`)", "",
             "| layers × MLP width | data | steps | τ chat | τ code | τ prose | shipped |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['layers']} × {r['mlp_width']} | {r['data']} | {r['steps']:,} | {r['tau_chat']:.2f} | "
              f"{r['tau_code']:.2f} | {r['tau_prose']:.2f} | {'yes' if r['shipped'] else ''} |" for r in rows]
    return "\n".join(lines)


def qwen_rows(domain: str) -> list[dict]:
    """distill_qwen_h200.json's drafts of one domain as rows of :func:`notes`."""
    return [dict(layers=r["num_layers"], mlp_width=r["intermediate_size"], data=r["data"], steps=r["steps"],
                 shipped=qwen["shipped"].startswith(f"{tag} "), **{f"tau_{d}": m["tau"] for d, m in r["measured"].items()})
            for tag, r in qwen["drafts"].items() if r["domain"] == domain]


for folder in sorted((root / "flashspec_hf/assistants").iterdir()):
    info = json.loads((folder / "training.json").read_text())
    if folder.name.startswith("qwen-coder-"):
        measured = [(gpu_setup(qwen, "bf16"), info["measured"])]
        extra = notes(qwen_rows(info["domain"]), "draft_release/results/distill_qwen_h200.json")
    else:
        short = folder.name.removeprefix("smollm2-")
        on_cpu = {k.split("|")[1]: v for k, v in cpu.items() if k.split("|")[0] == short}
        same = {d: (m["tau"], m["alpha"]) for d, m in on_cpu.items()} == {
            d: (m["tau"], m["alpha"]) for d, m in info["measured"].items()}  # fp32 greedy: the same decisions
        setup = gpu_setup(h200["setup"], "fp32")
        measured = ([(f"{setup} {cpu_setup} It gave the same τ and α to every digit.", on_cpu)] if same
                    else [(setup, info["measured"]), (cpu_setup, on_cpu)])
        runs = [r for r in h200["runs"] if r["draft"].endswith(f"-{short}")]
        extra = notes(runs, "draft_release/results/distill_h200.json")
    (root / "model_cards" / f"{folder.name}.md").write_text(model_card(info, measured, extra))
    print("wrote", folder.name)
