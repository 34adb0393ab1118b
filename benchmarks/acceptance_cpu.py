"""τ and α of each bundled SmolLM2 assistant on each domain's held-out prompts, fp32 on this machine's CPU
(greedy, γ = 4, 64 new tokens): python -m benchmarks.acceptance_cpu [NUM_PROMPTS]. Writes
benchmarks/results/acceptance_cpu.json, keyed ``assistant|domain`` (read by draft_release/write_model_cards.py)."""

import json
import os
import platform
import sys
import time
from pathlib import Path

import torch
import transformers

from flashspec_hf.data import chat_prompts, code_prompts, prose_prompts
from flashspec_hf.evaluation.run import acceptance
from flashspec_hf.models import BUNDLED_ASSISTANTS, distilled_assistants, load_target

num = int(sys.argv[1]) if len(sys.argv) > 1 else 24
target, tokenizer = load_target()
prompts = {
    "chat": list(chat_prompts(tokenizer, num)["prompt"]),
    "code": list(code_prompts(num)["prompt"]),
    "prose": list(prose_prompts(num)["prompt"]),
}
results = {"setup": {"prompts_per_domain": num, "torch": torch.__version__, "transformers": transformers.__version__,
                     "date": time.strftime("%Y-%m-%d"), "device": "cpu", "dtype": "float32",
                     "machine": f"{platform.machine()}, {os.cpu_count()} CPUs"}}
for name, draft in zip(BUNDLED_ASSISTANTS, distilled_assistants(target), strict=True):
    for domain, ps in prompts.items():
        key = f"{name.removeprefix('smollm2-')}|{domain}"
        results[key] = acceptance(target, tokenizer, draft, ps, 4, 64)
        print(key, results[key], flush=True)
path = Path(__file__).resolve().parent / "results" / "acceptance_cpu.json"
path.write_text(json.dumps(results, indent=1))
