#!/usr/bin/env bash
# One device call, at most 9.5 min: environment, the verification-kernel benchmark (about 2 min) and the end-to-end
# benchmark on a random-weight TinyLlama-1.1B shape, bf16, synthetic acceptance (about 6 min). Results under $OUT:
#   env.txt, kernel_bench.{csv,png,env.txt,log}, e2e_bench.{csv,png,env.txt,log}
# Run from the repository root (the package is imported from it): bash benchmarks/gpu_bench.sh
# Switches: KERNEL=0 / TINYLLAMA=0 skip a part; KERNEL_ARGS / E2E_ARGS add arguments (E2E_ARGS="--batches 1,4").
# With more than 2 min left it also runs, into e2e_smollm2.*, the real SmolLM2-135M when this machine holds the
# GGUF parts that the two earlier calls of benchmarks/gpu_smollm2_env.sh copy to /tmp/gguf (carry .carry/c; for
# its full grid make this the third call with KERNEL=0 TINYLLAMA=0), and the NF4 target (e2e_nf4.*) when
# bitsandbytes is installed.
set -uo pipefail
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
LIMIT=565  # seconds for the whole call
left() { echo $((LIMIT - SECONDS)); }

python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__,
'transformers', transformers.__version__, torch.cuda.get_device_name())" | tee "$OUT/env.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv \
  | tee -a "$OUT/env.txt"
echo "date,$(date -u '+%F %T') UTC" | tee -a "$OUT/env.txt"

if [ "${KERNEL:-1}" = 1 ]; then
  timeout 140 python3 -m benchmarks.kernel_bench --out "$OUT" --budget-s 115 ${KERNEL_ARGS:-} 2>&1 \
    | tee "$OUT/kernel_bench.log" | tail -n 5
fi

if [ "${TINYLLAMA:-1}" = 1 ]; then  # no new (engine, B) cell after --budget-s; the slowest (static) takes ~1 min
  t=$(( $(left) - 10 ))
  timeout "$t" python3 -m benchmarks.e2e_bench --out "$OUT" --budget-s $((t - 100)) ${E2E_ARGS:-} 2>&1 \
    | tee "$OUT/e2e_bench.log"
fi

if [ -f /tmp/gguf/gguf.part00 ] && [ -f /tmp/gguf/gguf.part01 ] && [ -f .carry/c/gguf.part02 ] \
    && [ "$(left)" -gt 120 ]; then
  t=$(( $(left) - 10 ))
  ( . benchmarks/gpu_smollm2_env.sh
    timeout "$t" python3 -m benchmarks.e2e_bench --target smollm2 --name e2e_smollm2 --out "$OUT" \
      --budget-s $((t - 60)) ) 2>&1 | tee "$OUT/e2e_smollm2.log"
else
  echo "e2e SmolLM2 skipped: no GGUF parts in /tmp/gguf (gpu_smollm2_env.sh) or under 2 min left" | tee -a "$OUT/env.txt"
fi

if python3 -c "import bitsandbytes" 2>/dev/null && [ "$(left)" -gt 120 ]; then
  t=$(( $(left) - 10 ))
  timeout "$t" python3 -m benchmarks.e2e_bench --nf4 --name e2e_nf4 --out "$OUT" --budget-s $((t - 100)) 2>&1 \
    | tee "$OUT/e2e_nf4.log"
else
  echo "e2e NF4 skipped: bitsandbytes not installed or under 2 min left" | tee -a "$OUT/env.txt"
fi
echo "total ${SECONDS} s" | tee -a "$OUT/env.txt"
