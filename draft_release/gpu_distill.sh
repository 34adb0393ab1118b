#!/usr/bin/env bash
# Device call 3 of 3 (see benchmarks/gpu_smollm2_env.sh): distil the SmolLM2 assistants. Results under $OUT.
# VARIANTS, DOMAINS, DISTILL_STEPS, NEW_TOKENS: see draft_release/distill_smollm2.py.
set -uo pipefail
. benchmarks/gpu_smollm2_env.sh
timeout 570 python3 -m draft_release.distill_smollm2 .carry/c/corpus.json.gz 2>&1 | tee "$OUT/log.txt"
