#!/usr/bin/env bash
# The last device call of a distillation session: distil a preset's assistants. Results under $OUT.
# TARGET=smollm2-135m (default; call 3 of 3, see benchmarks/gpu_smollm2_env.sh) or TARGET=qwen2.5-coder-1.5b (the
# last of N calls, see draft_release/gpu_qwen_env.sh). NAME_PREFIX, DTYPE, VARIANTS, DOMAINS, DISTILL_STEPS,
# NEW_TOKENS, CONT_BATCH: see draft_release/distill_drafts.py.
set -uo pipefail
if [ "${TARGET:-smollm2-135m}" = qwen2.5-coder-1.5b ]; then
  . draft_release/gpu_qwen_env.sh
else
  . benchmarks/gpu_smollm2_env.sh
fi
timeout "${LIMIT_S:-570}" python3 -m draft_release.distill_drafts .carry/c/corpus.json.gz 2>&1 | tee "$OUT/log.txt"
