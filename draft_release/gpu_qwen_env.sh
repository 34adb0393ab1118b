# Sourced by the last device call of a Qwen2.5-Coder-1.5B session (draft_release/gpu_distill.sh). The earlier calls
# copied the GGUF's pieces .carry/gguf/NN to /tmp/gguf (python -m draft_release.carry_gguf qwen2.5-coder-1.5b cuts
# them and prints those calls); this one copies its own piece, joins them once, installs the carried gguf wheel and
# points flashspec at both. The preset checks the joined file's size and SHA-256 before converting it (once per
# warm machine, to /tmp/fscache).
export PYTHONUNBUFFERED=1
gguf=/tmp/gguf/Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf
mkdir -p /tmp/gguf && cp .carry/gguf/* /tmp/gguf/ 2>/dev/null
if [ ! -f "$gguf" ]; then cat /tmp/gguf/[0-9][0-9] > "$gguf.partial" && mv "$gguf.partial" "$gguf" && rm /tmp/gguf/[0-9][0-9]; fi
python3 -m pip install -q --no-index --no-deps --upgrade --target /tmp/site .carry/c/whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
export FLASHSPEC_QWEN_GGUF_DIR=/tmp/gguf FLASHSPEC_CACHE=/tmp/fscache
