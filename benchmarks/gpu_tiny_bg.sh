#!/usr/bin/env bash
# Background work for the first call of a warm session (draft_release/gpu_qwen_session.sh piece NN with
# BG=benchmarks/gpu_tiny_bg.sh): the TinyLlama-shape e2e grid, then tests/test_gpu.py and kernel_quick, run from a
# copy of the tree (later calls replace the tree), into /tmp/gs; /tmp/gs/done marks the end.
set -uo pipefail
export PYTHONUNBUFFERED=1
rm -rf /tmp/gstree && cp -r . /tmp/gstree && cd /tmp/gstree || exit 1
python3 -m benchmarks.e2e_bench --batches "${TINY_BATCHES:-1,16,64}" --engines static,fixed,default --repeats 2 \
  --budget-s 420 --out /tmp/gs --name e2e_tiny >/tmp/gs/e2e_tiny.log 2>&1
OUT=/tmp/gs bash benchmarks/gpu_session.sh >/tmp/gs/session.log 2>&1
touch /tmp/gs/done
