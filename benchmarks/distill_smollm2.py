"""Distil the chat / code / general assistants of SmolLM2-135M-Instruct on a GPU and measure them.

Run on the device by benchmarks/gpu_distill.sh (the GGUF, the gguf wheel and the corpus built by
benchmarks/build_distill_corpus.py travel in .carry). Writes to $OUT: each assistant's compact weights, a tar of
their configs and training records, and results.json (training records). Speed: benchmarks/speed_smollm2.py.
"""

import gzip
import json
import os
import shutil
import sys
import tarfile
import time
from pathlib import Path

import torch
import transformers

import flashspec_hf  # noqa: F401
from flashspec_hf.distill import distill, target_continuations
from flashspec_hf.models import load_target

STEPS = int(os.environ.get("DISTILL_STEPS", 1500))
CONTINUED = int(os.environ.get("CONTINUED", 1000))  # prompts per domain continued by the target
DEVICE = os.environ.get("DEVICE", "cuda")
out = Path(os.environ["OUT"])
corpus = json.load(gzip.open(sys.argv[1], "rt"))
results = {
    "gpu": torch.cuda.get_device_name() if DEVICE == "cuda" else DEVICE,
    "torch": torch.__version__,
    "transformers": transformers.__version__,
    "date": time.strftime("%Y-%m-%d"),
    "steps": STEPS,
}


def save():
    (out / "results.json").write_text(json.dumps(results, indent=1))


target, tokenizer = load_target(dtype=torch.bfloat16, device=DEVICE)
t0 = time.time()
generated = {
    d: target_continuations(target, tokenizer, corpus[d]["prompts"][:CONTINUED], batch_size=128, temperature=None)
    for d in ("chat", "code")
}
results["continuations_seconds"] = round(time.time() - t0, 1)
texts = {d: corpus[d]["texts"] + generated[d] for d in ("chat", "code")}
texts["general"] = texts["chat"][::2] + texts["code"][::2]
data = {"chat": "chitchat-dataset conversations [1000, 3000) + 1,000 greedy target continuations",
        "code": "2,000 Python files of site-packages + 1,000 greedy target continuations",
        "general": "half of the chat and half of the code corpus"}
for name in ("chat", "code", "general"):
    folder = Path(f"/tmp/drafts/smollm2-{name}")
    distill(target, tokenizer, texts[name], folder, num_layers=2, intermediate_size=768, vocab_size=8192,
            steps=STEPS, batch_size=32, seq_len=256, lr=1e-3, top_k=64, progress=False,
            card={"name": f"smollm2-{name}", "domain": name, "data": data[name], "base_model": "SmolLM2-135M-Instruct"})
    shutil.copy(folder / "compact" / "model.safetensors", out / f"smollm2-{name}.safetensors")
    results.setdefault("training", {})[name] = json.loads((folder / "training.json").read_text())
    save()
with tarfile.open(out / "meta.tar", "w") as tar:
    for name in ("chat", "code", "general"):
        tar.add(f"/tmp/drafts/smollm2-{name}/compact/config.json", f"smollm2-{name}/config.json")
        tar.add(f"/tmp/drafts/smollm2-{name}/training.json", f"smollm2-{name}/training.json")
        tar.add(f"/tmp/drafts/smollm2-{name}/compact/vocab.safetensors", f"smollm2-{name}/vocab.safetensors")

print(json.dumps({k: v for k, v in results.items() if k != "training"}, indent=1))
