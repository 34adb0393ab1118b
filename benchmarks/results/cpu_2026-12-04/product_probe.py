"""Products of SmolLM2-135M's 211 linear layers at 1, 2, 5 and 8 rows: MKL's packed GEMM packed with batch hints 1, 5
and 16 against torch's linear (fastest of 7 passes). Run from the repository root: .venv/bin/python <this file>."""
import time, statistics, torch
import torch.nn.functional as F
from flashspec_hf import demo
from flashspec_hf.cli import load_models
target, tok, assistants = load_models(demo.parse_args([]))
lins = [m for n, m in target.named_modules() if isinstance(m, torch.nn.Linear)]
def bench(fn, M, n=7):
    xs = {l.in_features: torch.randn(M, l.in_features) for l in lins}
    ts = []
    for _ in range(n):
        s = time.perf_counter()
        for i, l in enumerate(lins): fn(i, l, xs[l.in_features])
        ts.append(time.perf_counter() - s)
    return round(1e3 * min(ts), 1)
with torch.no_grad():
    for hint in (1, 5, 16):
        pk = [torch.ops.mkl._mkl_reorder_linear_weight(l.weight.detach(), hint) for l in lins]
        print("hint", hint, [(M, bench(lambda i, l, x: torch.ops.mkl._mkl_linear(x, pk[i], l.weight, None, M), M)) for M in (1, 2, 5, 8)])
        del pk
    print("linear", [(M, bench(lambda i, l, x: F.linear(x, l.weight), M)) for M in (1, 2, 5, 8)])
