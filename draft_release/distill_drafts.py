"""Distil assistants of a preset target on a GPU and measure their acceptance on held-out prompts.

Run on the device by draft_release/gpu_distill.sh (SmolLM2) or gpu_qwen_session.sh (Qwen2.5-Coder-1.5B); the GGUF,
the gguf wheel and the corpus built by draft_release/build_distill_corpus.py travel in .carry. Environment: ``TARGET`` (a preset of
``flashspec_hf.models.PRESETS``, default ``smollm2-135m``), ``NAME_PREFIX`` (the drafts are named
``<prefix>-<domain>``, default ``smollm2``), ``DTYPE`` (the target's, default ``float32``), ``VARIANTS``
(``LAYERSxWIDTH`` list, default ``2x768``), ``DOMAINS`` (default ``chat,code,general``), ``DISTILL_STEPS``,
``NEW_TOKENS`` (tokens the target adds to each training prompt), ``CONT_BATCH`` (prompts per ``generate`` call for
those continuations, default 384). The target's greedy continuations are cached in /tmp across calls of a warm
machine. Writes to $OUT: ``results.json`` (training records and τ/α per evaluation domain, greedy, γ = 4, 64 new
tokens) and one tar per assistant (its compact folder and training record).
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
from flashspec_hf.compact import load_compact
from flashspec_hf.distill import distill, target_continuations
from flashspec_hf.evaluation.run import acceptance
from flashspec_hf.models import PRESETS, load_target

TARGET = os.environ.get("TARGET", "smollm2-135m")
PREFIX = os.environ.get("NAME_PREFIX", "smollm2")
DTYPE = os.environ.get("DTYPE", "float32")
CONT_BATCH = int(os.environ.get("CONT_BATCH", 384))
STEPS = int(os.environ.get("DISTILL_STEPS", 4000))
NEW_TOKENS = int(os.environ.get("NEW_TOKENS", 96))
VARIANTS = [tuple(map(int, v.split("x"))) for v in os.environ.get("VARIANTS", "2x768").split(",")]
DOMAINS = os.environ.get("DOMAINS", "chat,code,general").split(",")
CACHE = Path(f"/tmp/fs_continuations_{TARGET}_{NEW_TOKENS}.json.gz")  # the corpus is fixed: one per target, length
DEVICE = os.environ.get("DEVICE", "cuda")  # cpu for a smoke run
RAW_TEXT = os.environ.get("RAW_TEXT", "0") == "1"  # 1: also train on the raw corpus
out = Path(os.environ["OUT"])
corpus = json.load(gzip.open(sys.argv[1], "rt"))
results_path = out / "results.json"
results = {
    "gpu": torch.cuda.get_device_name() if DEVICE == "cuda" else DEVICE, "target": TARGET, "dtype": DTYPE,
    "torch": torch.__version__, "transformers": transformers.__version__, "date": time.strftime("%Y-%m-%d"),
    "steps": STEPS, "new_tokens": NEW_TOKENS, "raw_text": RAW_TEXT, "drafts": {},
}


def save():
    results_path.write_text(json.dumps(results, indent=1))


def continuations(target, tokenizer) -> dict[str, list[str]]:
    """Greedy target continuations of the training prompts, by domain."""
    if CACHE.exists():
        return json.load(gzip.open(CACHE, "rt"))
    t0, generated = time.time(), {}
    for domain in ("chat", "code"):
        prompts = corpus[domain]["prompts"]
        generated[domain] = target_continuations(target, tokenizer, prompts, NEW_TOKENS, batch_size=CONT_BATCH)
        print(domain, len(generated[domain]), "continued", round(time.time() - t0), "s", flush=True)
    results["continuations_seconds"] = round(time.time() - t0, 1)
    with gzip.open(CACHE, "wt") as f:
        json.dump(generated, f)
    return generated


target, tokenizer = load_target(TARGET, dtype=getattr(torch, DTYPE), device=DEVICE)
generated = continuations(target, tokenizer)
texts = {d: (corpus[d]["texts"] if RAW_TEXT else []) + generated[d] for d in ("chat", "code")}
texts["general"] = texts["chat"][::2] + texts["code"][::2]
continued = f"greedy target continuations ({NEW_TOKENS} tokens) of"
data = {
    "chat": ("chitchat-dataset conversations [1000, 3000) + " if RAW_TEXT else "")
    + f"{continued} {len(generated['chat']):,} conversation openings (1, 3 or 5 turns) from conversations 1000 on",
    "code": ("2,000 Python files of site-packages + " if RAW_TEXT else "")
    + f"{continued} {len(generated['code']):,} function signatures with docstrings from site-packages",
    "general": "half of the chat and half of the code corpus",
}
for layers, width in VARIANTS:
    for domain in DOMAINS:
        name, tag = f"{PREFIX}-{domain}", f"{layers}x{width}-{domain}"
        folder = Path(f"/tmp/drafts/{tag}")
        shutil.rmtree(folder, ignore_errors=True)  # distill() refuses a folder holding another configuration
        t0 = time.time()
        distill(target, tokenizer, texts[domain], folder, num_layers=layers, intermediate_size=width, vocab_size=8192,
                steps=STEPS, batch_size=32, seq_len=256, lr=1e-3, top_k=64, progress=False,
                card={"name": name, "domain": domain, "data": data[domain], "base_model": PRESETS[TARGET].model})
        record = json.loads((folder / "training.json").read_text())
        record["wall_seconds"] = round(time.time() - t0, 1)
        draft = load_compact(folder / "compact", target, name=name)
        record["measured"] = {d: acceptance(target, tokenizer, draft, ps, 4, 64, batch_size=24)
                              for d, ps in corpus["eval"].items()}
        results["drafts"][tag] = record
        save()
        print(tag, json.dumps(record["measured"]), record["wall_seconds"], "s", flush=True)
        (folder / "compact" / "training.json").write_text(json.dumps(record, indent=1))
        with tarfile.open(out / f"{tag}.tar", "w") as tar:
            tar.add(folder / "compact", name)
