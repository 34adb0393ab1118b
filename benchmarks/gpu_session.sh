#!/usr/bin/env bash
# One device call: environment, the GPU tests, and the verification-kernel timing. Results under $OUT.
set -uo pipefail
export PYTHONUNBUFFERED=1
python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__, torch.cuda.get_device_name())" | tee "$OUT/env.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee -a "$OUT/env.txt"
python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py 2>&1 | tee "$OUT/test_gpu.log"
python3 -m benchmarks.kernel_quick 2>&1 | tee "$OUT/kernel_quick.csv"
