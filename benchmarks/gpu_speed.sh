#!/usr/bin/env bash
# Last of three device calls (the first two copy .carry/a/gguf.part00 and .carry/b/gguf.part01 to /tmp/gguf):
# join the GGUF, install the gguf wheel, time plain generate against flashspec with the bundled assistants.
set -uo pipefail
export PYTHONUNBUFFERED=1
cat /tmp/gguf/gguf.part00 /tmp/gguf/gguf.part01 .carry/c/gguf.part02 > /tmp/gguf/SmolLM2-135M-Instruct.Q4_1.gguf
python3 -m pip install -q --no-index --no-deps --upgrade --target /tmp/site .carry/c/whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
export FLASHSPEC_SMOLLM2_GGUF_DIR=/tmp/gguf FLASHSPEC_CACHE=/tmp/fscache
timeout 300 python3 -m benchmarks.speed_smollm2 .carry/c/corpus.json.gz 2>&1 | tee "$OUT/log.txt"
