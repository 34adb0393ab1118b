# Sourced by the last of three device calls (the first two copy .carry/a/gguf.part00 and .carry/b/gguf.part01 to
# /tmp/gguf; the GGUF travels in three parts because a call carries 64 MiB with the tree): joins the GGUF, installs
# the gguf wheel and points flashspec at them.
export PYTHONUNBUFFERED=1
gguf=/tmp/gguf/SmolLM2-135M-Instruct.Q4_1.gguf  # already there when its pieces came another way (gpu_pipeline.sh)
[ -f "$gguf" ] || { cat /tmp/gguf/gguf.part00 /tmp/gguf/gguf.part01 .carry/c/gguf.part02 > "$gguf.partial" \
  && mv "$gguf.partial" "$gguf"; }
python3 -m pip install -q --no-index --no-deps --upgrade --target /tmp/site .carry/c/whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
export FLASHSPEC_SMOLLM2_GGUF_DIR=/tmp/gguf FLASHSPEC_CACHE=/tmp/fscache
