#!/usr/bin/env bash
# The last of three device calls (benchmarks/gpu_smollm2_env.sh says what the first two copy): the GPU tests, then
# the domain-shift stream on the real SmolLM2-135M target, bf16, static loop with CUDA graphs. Results under $OUT.
set -uo pipefail
. benchmarks/gpu_smollm2_env.sh
python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py 2>&1 | tail -n 5 | tee "$OUT/test_gpu.log"
timeout 420 python3 -m benchmarks.domain_shift --device cuda --dtype bfloat16 --static --corpus .carry/c/corpus.json.gz \
  --segments 6 --per-segment 4 --max-new-tokens 64 --out "$OUT" --name domain_shift_h200 2>&1 | grep -v "it/s" | tail -n 20
