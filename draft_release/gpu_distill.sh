#!/usr/bin/env bash
# The last device call of a SmolLM2 distillation session (call 3 of 3, see benchmarks/gpu_smollm2_env.sh): distil
# its assistants. Results under $OUT. NAME_PREFIX, DTYPE, VARIANTS, DOMAINS, DISTILL_STEPS, NEW_TOKENS, CONT_BATCH:
# see draft_release/distill_drafts.py. Qwen2.5-Coder-1.5B's session is draft_release/gpu_qwen_session.sh.
set -uo pipefail
. benchmarks/gpu_smollm2_env.sh
timeout "${LIMIT_S:-570}" python3 -m draft_release.distill_drafts .carry/c/corpus.json.gz 2>&1 | tee "$OUT/log.txt"
