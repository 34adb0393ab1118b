"""Launch-parameter sweep of the verification kernel on CUDA: tile width, warps and programs per SM (which set the
vocabulary splits of both passes), for the shapes the speed issue names. Prints and writes CSV (µs median of CUDA
graph replays, as the static loop runs the kernel: no host launch overhead; ``ratio_to_floor`` against reading the
logits once at the device's copy bandwidth). The defaults in :mod:`flashspec_hf.kernels.rejection_sampler` are the
best rows of its first run (2026-12-02, H200), which timed plain launches (``triton.testing.do_bench``) whose
~100 µs of host overhead hid the device time below ~100 µs.

    python -m benchmarks.kernel_tune --out DIR
"""

import argparse
import csv
import itertools
from pathlib import Path

import torch

from flashspec_hf.kernels.philox import draw_seed
from flashspec_hf.kernels.rejection_sampler import _default_splits, verify_triton

from .kernel_bench import DTYPES, bench_us, copy_bandwidth

COLUMNS = ["mode", "batch", "vocab", "dtype", "block", "warps", "programs_per_sm", "us", "floor_us", "ratio_to_floor"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=".")
    p.add_argument("--cases", default="1:32000,64:32000,1:262144,64:262144", help="batch:vocab pairs")
    args = p.parse_args()
    device = torch.device("cuda")
    timing = argparse.Namespace(warmup_ms=10, rep_ms=40)
    bandwidth = copy_bandwidth(device, timing)  # bytes/µs
    gamma = 4
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "kernel_tune.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS)
        writer.writeheader()
        print(",".join(COLUMNS), flush=True)
        for case, dname, mode in itertools.product(args.cases.split(","), ("bf16", "fp32"), ("greedy", "sampling")):
            batch, vocab = map(int, case.split(":"))
            target = torch.randn(batch, gamma + 1, vocab, device=device).to(DTYPES[dname])  # [B, γ+1, V]
            draft = torch.randn(batch, gamma, vocab, device=device).to(DTYPES[dname])  # [B, γ, V]
            tokens = torch.randint(0, vocab, (batch, gamma), device=device)  # [B, γ]
            seed = draw_seed(device)  # [1]
            read = target.numel() + (draft.numel() if mode == "sampling" else 0)
            floor_us = read * target.element_size() / bandwidth
            for block, warps, pps in itertools.product((1024, 2048, 4096), (4, 8), (2, 4, 8, 16)):
                kw = dict(block_size=block, num_warps=warps,  # the splits verify_triton's defaults would pick
                          num_splits=_default_splits(batch * (gamma + 1), vocab, block, pps, device),
                          sample_splits=_default_splits(batch, vocab, block, pps, device))
                fn = (lambda: verify_triton(target, tokens, **kw)) if mode == "greedy" else (
                    lambda: verify_triton(target, tokens, draft, seed, **kw))
                us = bench_us(fn, device, timing, graph=True)
                row = dict(mode=mode, batch=batch, vocab=vocab, dtype=dname, block=block, warps=warps,
                           programs_per_sm=pps, us=round(us, 1), floor_us=round(floor_us, 1),
                           ratio_to_floor=round(us / floor_us, 2))
                writer.writerow(row)
                print(",".join(str(row[c]) for c in COLUMNS), flush=True)


if __name__ == "__main__":
    main()
