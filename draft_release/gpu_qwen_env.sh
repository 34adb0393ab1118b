# Sourced by draft_release/gpu_qwen_session.sh (distill, bench) on a warm machine whose earlier calls copied the
# GGUF's pieces .carry/gguf/NN to /tmp/gguf (python -m draft_release.carry_gguf qwen2.5-coder-1.5b cuts them and
# prints those calls): joins them once, installs the carried wheels (.carry/q/whl: gguf; .carry/bnb: bitsandbytes
# when carried) and points flashspec at the GGUF. The preset checks the joined file's size and SHA-256 before
# converting it (once per warm machine, to /tmp/fscache).
export PYTHONUNBUFFERED=1
gguf=/tmp/gguf/Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf
if [ ! -f "$gguf" ]; then
  mkdir -p /tmp/gguf && cp .carry/gguf/* /tmp/gguf/ 2>/dev/null
  cat /tmp/gguf/[0-9][0-9] > "$gguf.partial" && mv "$gguf.partial" "$gguf"  # the pieces stay: a missed one can
  # still be copied and the join redone (rm the GGUF) if the preset's size and hash check refuses it
fi
python3 -m pip install -q --no-index --no-deps --upgrade --target /tmp/site .carry/q/whl/*.whl \
  $(ls .carry/bnb/*.whl 2>/dev/null) && export PYTHONPATH=/tmp/site:$PWD
export FLASHSPEC_QWEN_GGUF_DIR=/tmp/gguf FLASHSPEC_CACHE=/tmp/fscache
