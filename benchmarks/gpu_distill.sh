#!/usr/bin/env bash
# Second of two device calls (the first copies .carry/a/gguf.part00 to /tmp/gguf): join the GGUF, install the
# gguf wheel, distil and measure the SmolLM2 assistants. Results under $OUT.
set -uo pipefail
export PYTHONUNBUFFERED=1
cat /tmp/gguf/gguf.part00 .carry/b/gguf.part01 > /tmp/gguf/SmolLM2-135M-Instruct.Q4_1.gguf
python3 -m pip install -q --no-index --no-deps --target /tmp/site .carry/b/whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
export FLASHSPEC_SMOLLM2_GGUF_DIR=/tmp/gguf FLASHSPEC_CACHE=/tmp/fscache
timeout 560 python3 -m benchmarks.distill_smollm2 .carry/b/corpus.json.gz 2>&1 | tee "$OUT/log.txt"
