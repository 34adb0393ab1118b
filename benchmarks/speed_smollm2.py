"""Plain generate against flashspec with the bundled SmolLM2 assistants (Thompson sampling), batch 1, greedy,
on the held-out prompts of the corpus built by benchmarks/build_distill_corpus.py. Writes $OUT/speed.json.

Run on the device by benchmarks/gpu_speed.sh; locally: OUT=. DEVICE=cpu DTYPE=float32 python -m benchmarks.speed_smollm2 CORPUS
"""

import gzip
import json
import os
import sys
import time
from pathlib import Path

import torch
import transformers

import flashspec_hf  # noqa: F401
from flashspec_hf.evaluation import compare_on_prompts, summarize
from flashspec_hf.models import distilled_assistants, load_target

DEVICE = os.environ.get("DEVICE", "cuda")
DTYPE = getattr(torch, os.environ.get("DTYPE", "bfloat16"))
PER_DOMAIN = int(os.environ.get("PER_DOMAIN", 8))
corpus = json.load(gzip.open(sys.argv[1], "rt"))
target, tokenizer = load_target(dtype=DTYPE, device=DEVICE)
rows = [{"prompt": p, "domain": d} for d, ps in corpus["eval"].items() for p in ps[:PER_DOMAIN]]
per_prompt = compare_on_prompts(target, tokenizer, distilled_assistants(target), rows, progress=False,
                                max_new_tokens=64, do_sample=False, num_assistant_tokens=4, selector="thompson")
result = {
    "device": torch.cuda.get_device_name() if DEVICE == "cuda" else DEVICE,
    "dtype": str(DTYPE),
    "torch": torch.__version__,
    "transformers": transformers.__version__,
    "date": time.strftime("%Y-%m-%d"),
    "summary": summarize(per_prompt),
    "divergences": [p["divergence"] for p in per_prompt if p["divergence"]],
}
Path(os.environ["OUT"], "speed.json").write_text(json.dumps(result, indent=1))
print(json.dumps(result, indent=1))
