#!/usr/bin/env bash
# Device call 3 of 3 (see gpu_smollm2_env.sh): plain generate against flashspec with the bundled assistants.
set -uo pipefail
. benchmarks/gpu_smollm2_env.sh
timeout 300 python3 -m benchmarks.speed_smollm2 .carry/c/corpus.json.gz 2>&1 | tee "$OUT/log.txt"
