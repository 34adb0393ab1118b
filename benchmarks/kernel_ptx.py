"""Static cost of the verification kernel without a GPU: compiles its kernels for an H200 (sm_90) with Triton's
NVIDIA backend, which runs on a CPU-only machine, and counts the PTX instructions of each vocabulary loop per column
(``mul.hi`` for Philox, ``fma`` mostly for ``log``, ``ex2`` for ``exp``, ``div.rn``). A guide between GPU sessions:
PTX is not SASS (``div.rn`` alone expands to about a dozen instructions) and says nothing about memory.

    python -m benchmarks.kernel_ptx [--dtype bf16] [--block 1024] [--warps 4]
"""

import argparse
import inspect

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from flashspec_hf.kernels import rejection_sampler as rs

_INTS = {"draft_tokens_ptr": "*i64", "seed_ptr": "*i64", "num_accepted_ptr": "*i64", "win_idx_ptr": "*i32"}


def loop_counts(kernel, dtype: str, constexprs: dict, warps: int) -> dict:
    """PTX instruction counts of ``kernel``'s vocabulary loop, per column (``BLOCK / (32 · warps)`` per thread)."""
    names = list(inspect.signature(kernel.fn).parameters)
    logits = {"logits_ptr", "target_ptr", "draft_ptr"}
    signature = {n: "constexpr" if n in constexprs else f"*{dtype}" if n in logits else _INTS.get(n) or
                 ("*fp32" if n.endswith("_ptr") else "i32") for n in names}
    aligned = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names)  # as the launcher specialises them
               if signature[n].startswith("*") or "stride" in n or n in ("V", "chunk")}
    compiled = triton.compile(ASTSource(fn=kernel, signature=signature, constexprs=constexprs, attrs=aligned),
                              target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps))
    ptx = compiled.asm["ptx"].splitlines()
    columns = constexprs["BLOCK"] // (32 * warps)
    start = next(i for i, line in enumerate(ptx) if "Loop Header" in line)  # under the vocabulary loop's label
    label = (ptx[start] if ptx[start].startswith("$L") else ptx[start - 1]).split(":")[0]
    end = next(i for i, line in enumerate(ptx) if i > start and "bra" in line and line.strip().endswith(label + ";"))
    body = [line.strip() for line in ptx[start + 1:end + 1]]
    body = [line for line in body if line and not line.startswith((".", "$L", "//", "{", "}", ")"))]
    ops = ("mul.hi", "fma", "ex2", "div.rn")
    counts = {"instructions": len(body)} | {op: sum(op in line for line in body) for op in ops}
    return {op: round(n / columns, 1) for op, n in counts.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp32", "fp16"])
    p.add_argument("--block", type=int, default=1024)
    p.add_argument("--warps", type=int, default=4)
    args = p.parse_args()
    stats = dict(NSPLIT=16, BLOCK=args.block, VEC=rs._VEC)
    kernels = {
        "statistics, sampling": (rs._vocab_stats_kernel, stats | dict(GREEDY=False)),
        "statistics, greedy": (rs._vocab_stats_kernel, stats | dict(GREEDY=True)),
        "race": (rs._sample_kernel, dict(NSPLIT=16, BLOCK=args.block, GAMMA_BLOCK=8, SPLIT_BLOCK=16, RSPLIT=32, NT=8)),
    }
    print(f"PTX instructions per column of each vocabulary loop (sm_90, {args.dtype}, tile {args.block}, "
          f"{args.warps} warps)")
    for name, (kernel, constexprs) in kernels.items():
        print(f"{name:22s}", loop_counts(kernel, args.dtype, constexprs, args.warps))


if __name__ == "__main__":
    main()
