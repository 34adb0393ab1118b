"""Verification cost per speculative step: the Triton kernel (``verify_triton``), the PyTorch reference
(``verify_greedy_reference`` / ``verify_sampling_reference``), flashspec's dispatch (``verification.verify``, which
draws the seed or the noise itself) and stock transformers' own verification. Sampling: the kernel draws its
uniforms and race weights in-kernel from an int64 ``[1]`` seed; the reference is given ``torch.rand`` noise.

Times are medians in µs (``triton.testing.do_bench``, L2 flushed between runs; on CPU a perf_counter median). They
include the host's launch overhead, which dominates small shapes (about 100 µs a call for the kernel's 2-4 Triton
launches on the H200 host); ``triton_graph`` and ``verify_graph`` replay the kernel (and the dispatch) from a
CUDA graph (``triton.testing.do_bench_cudagraph``), as the static loop does: device time only.
``floor_us`` is the time to read the logits once at the measured device-to-device copy bandwidth: target
``[B, γ+1, V]`` (+ draft ``[B, γ, V]`` when sampling) in the given dtype; ``ratio_to_floor = us / floor_us``.

Stock providers, as transformers' assisted decoding does them (batch 1 only: for B > 1 they loop over rows,
``note = per-row loop``): greedy ``argmax`` of the fp32 target logits, matches by cumsum of mismatches, then the
slice by the match count (a host sync); sampling ``transformers.generation.utils._speculative_sampling`` on fp32
logits (the target's ``.to(float32)`` is timed, as stock does it in the step; the draft scores are already fp32 in
stock, so their copy is made outside the timing).

    python -m benchmarks.kernel_bench --out DIR            # CUDA, full grid (about 2 minutes on an H200)
    TRITON_INTERPRET=1 python -m benchmarks.kernel_bench --quick --out DIR   # CPU smoke test
Writes DIR/kernel_bench.csv, kernel_bench.png, kernel_bench.env.txt; on CUDA also kernel_profile.csv: the device
time of each of ``verify_triton``'s launches (statistics pass, race, finalize) at the grid's largest shape per mode and
dtype (``torch.profiler``, 20 calls), to say where the time above the floor goes.
"""

import argparse
import csv
import inspect
import statistics
import time
from pathlib import Path

import torch
import transformers
import triton
from transformers.generation.utils import _speculative_sampling

from flashspec_hf.kernels.philox import draw_seed
from flashspec_hf.kernels.reference import draw_noise, verify_greedy_reference, verify_sampling_reference
from flashspec_hf.kernels.rejection_sampler import verify_triton
from flashspec_hf.verification import verify

COLUMNS = ["mode", "batch", "gamma", "vocab", "dtype", "provider", "us", "floor_us", "ratio_to_floor", "note"]
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
# _speculative_sampling's trailing arguments differ between versions (is_done_candidate in some, not in 5.24)
_SPEC_PARAMS = inspect.signature(_speculative_sampling).parameters
_SPEC_EXTRA = {"is_done_candidate": False} if "is_done_candidate" in _SPEC_PARAMS else {}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=".")
    p.add_argument("--quick", action="store_true", help="tiny grid for a CPU smoke test (TRITON_INTERPRET=1)")
    p.add_argument("--batches", default="1,8,32,64")
    p.add_argument("--gammas", default="4,8")
    p.add_argument("--vocabs", default="32000,49152,128256,262144")
    p.add_argument("--dtypes", default="bf16,fp32")
    p.add_argument("--warmup-ms", type=int, default=10)
    p.add_argument("--rep-ms", type=int, default=50)
    p.add_argument("--budget-s", type=float, default=1e9, help="skip the remaining configurations after this")
    if p.parse_args().quick:  # quick defaults; explicit arguments still win
        p.set_defaults(batches="1,2", gammas="4", vocabs="1000,4096")
    return p.parse_args()


def bench_us(fn, device, args, graph=False):
    """Median time of ``fn()`` in µs; ``graph``: replayed from a CUDA graph, as the static loop runs it (no host
    launch overhead: the device time alone)."""
    if device.type == "cuda" and graph:
        return triton.testing.do_bench_cudagraph(fn, rep=args.rep_ms, return_mode="median") * 1e3
    if device.type == "cuda":
        return triton.testing.do_bench(fn, warmup=args.warmup_ms, rep=args.rep_ms, return_mode="median") * 1e3
    fn()
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def copy_bandwidth(device, args) -> float:
    """Device-to-device copy bandwidth in bytes/µs (bytes read + written / time)."""
    src = torch.empty((1 << 30) if device.type == "cuda" else (1 << 26), dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    return 2 * src.numel() / bench_us(lambda: dst.copy_(src), device, args)


def stock_greedy(target, drafts):
    """transformers' assisted greedy verification, one row at a time (stock supports batch 1 only)."""
    for b in range(target.shape[0]):
        new_logits = target[b : b + 1].to(torch.float32)  # [1, γ+1, V]
        selected_tokens = new_logits.argmax(dim=-1)  # [1, γ+1]
        n_matches = ((~(drafts[b : b + 1] == selected_tokens[:, :-1])).cumsum(dim=-1) < 1).sum()
        valid_tokens = selected_tokens[:, : n_matches + 1]  # host sync, as in stock
    return valid_tokens


def stock_sampling(target, drafts, draft_f32):
    """transformers' _speculative_sampling, one row at a time; draft_f32 [B, γ, V] fp32 as stock's scores."""
    gamma = drafts.shape[1]
    for b in range(target.shape[0]):
        new_logits = target[b : b + 1].to(torch.float32)  # [1, γ+1, V]
        out = _speculative_sampling(drafts[b : b + 1], draft_f32[b : b + 1], gamma, new_logits, **_SPEC_EXTRA)
    return out


def providers(mode, target, tokens, draft, noise):
    """name -> (fn, note) for one configuration."""
    loop = "per-row loop" if target.shape[0] > 1 else ""
    graphed = "replayed from a CUDA graph, as in the static loop"
    if mode == "greedy":
        return {
            "triton": (lambda: verify_triton(target, tokens), ""),
            "triton_graph": (lambda: verify_triton(target, tokens), graphed),
            "torch": (lambda: verify_greedy_reference(target, tokens), ""),
            "verify": (lambda: verify(target, tokens, None), "flashspec dispatch"),
            "verify_graph": (lambda: verify(target, tokens, None), graphed),
            "stock": (lambda: stock_greedy(target, tokens), loop),
        }
    seed, *reference_noise = noise  # [1]; [B, γ], [B, V], [B, tiles]
    draft_f32 = draft.float()  # [B, γ, V]
    return {
        "triton": (lambda: verify_triton(target, tokens, draft, seed), "seed drawn outside, noise in-kernel"),
        "triton_graph": (lambda: verify_triton(target, tokens, draft, seed), graphed),
        "torch": (lambda: verify_sampling_reference(target, tokens, draft, *reference_noise), "noise drawn outside"),
        "verify": (lambda: verify(target, tokens, draft), "flashspec dispatch, draws seed (noise on torch)"),
        "verify_graph": (lambda: verify(target, tokens, draft), graphed),
        "stock": (lambda: stock_sampling(target, tokens, draft_f32), loop),
    }


def profile_launches(device, batch, gamma, vocab, path):
    """Per-launch device µs of ``verify_triton`` at one shape for each mode and dtype, from ``torch.profiler``."""
    from torch.profiler import ProfilerActivity, profile

    calls, rows = 20, []
    for mode in ("greedy", "sampling"):
        for dname, dtype in DTYPES.items():
            target = torch.randn(batch, gamma + 1, vocab, device=device).to(dtype)  # [B, γ+1, V]
            draft = torch.randn(batch, gamma, vocab, device=device).to(dtype) if mode == "sampling" else None
            tokens = torch.randint(0, vocab, (batch, gamma), device=device)  # [B, γ]
            seed = draw_seed(device)  # [1]
            verify_triton(target, tokens, draft, seed)  # compiled before profiling
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(calls):
                    verify_triton(target, tokens, draft, seed)
                torch.cuda.synchronize()
            for evt in prof.key_averages():
                if evt.device_type.name == "CUDA" and evt.count:
                    rows.append(dict(mode=mode, batch=batch, gamma=gamma, vocab=vocab, dtype=dname, kernel=evt.key,
                                     launches_per_call=evt.count / calls,
                                     device_us_per_call=round(evt.self_device_time_total / calls, 1)))
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    for row in rows:
        print(row, flush=True)


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in rows if r["us"] != "" and r["dtype"] == "bf16"]
    if not ok:
        return
    gamma = min(r["gamma"] for r in ok)
    batches = sorted({min(r["batch"] for r in ok), max(r["batch"] for r in ok)})
    fig, axes = plt.subplots(2, len(batches), figsize=(5.5 * len(batches), 8), squeeze=False)
    for i, mode in enumerate(("greedy", "sampling")):
        for j, batch in enumerate(batches):
            ax = axes[i][j]
            sel = [r for r in ok if r["mode"] == mode and r["batch"] == batch and r["gamma"] == gamma]
            for name in sorted({r["provider"] for r in sel}):
                pts = sorted((r["vocab"], r["us"]) for r in sel if r["provider"] == name)
                ax.plot(*zip(*pts), marker="o", label=name)
            floor = sorted({(r["vocab"], r["floor_us"]) for r in sel})
            if floor:
                ax.plot(*zip(*floor), "k--", label="bandwidth floor")
            ax.set(xscale="log", yscale="log", xlabel="vocabulary V", ylabel="µs (median)",
                   title=f"{mode}, B={batch}, γ={gamma}, bf16")
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    args = parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    bandwidth = copy_bandwidth(device, args)  # bytes/µs
    gpu = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    env = (f"device,{gpu}\ntorch,{torch.__version__}\ntriton,{triton.__version__}\n"
           f"transformers,{transformers.__version__}\ndate,{time.strftime('%Y-%m-%d %H:%M')}\n"
           f"copy_bandwidth_GBps,{bandwidth / 1e3:.1f}\n")
    (out / "kernel_bench.env.txt").write_text(env)
    print(env, flush=True)
    rows, start = [], time.perf_counter()
    with open(out / "kernel_bench.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS)
        writer.writeheader()
        grid = [(m, b, gm, v, d) for m in ("greedy", "sampling") for d in args.dtypes.split(",")
                for gm in map(int, args.gammas.split(",")) for b in map(int, args.batches.split(","))
                for v in map(int, args.vocabs.split(","))]
        for mode, batch, gamma, vocab, dname in grid:
            dtype = DTYPES[dname]
            target = torch.randn(batch, gamma + 1, vocab, device=device).to(dtype)  # [B, γ+1, V]
            draft = torch.randn(batch, gamma, vocab, device=device).to(dtype)  # [B, γ, V]
            tokens = torch.randint(0, vocab, (batch, gamma), device=device)  # [B, γ]
            noise = (draw_seed(device), *draw_noise(batch, gamma, vocab, device))  # [1], [B, γ], [B, V], [B, tiles]
            read = target.numel() + (draft.numel() if mode == "sampling" else 0)
            floor_us = read * target.element_size() / bandwidth
            for name, (fn, note) in providers(mode, target, tokens, draft, noise).items():
                if name.endswith("_graph") and device.type != "cuda":
                    continue
                row = dict(mode=mode, batch=batch, gamma=gamma, vocab=vocab, dtype=dname, provider=name,
                           us="", floor_us=round(floor_us, 2), ratio_to_floor="", note=note)
                if time.perf_counter() - start > args.budget_s:
                    row["note"] = "skipped: time budget"
                else:
                    try:
                        us = bench_us(fn, device, args, graph=name.endswith("_graph"))
                        row.update(us=round(us, 1), ratio_to_floor=round(us / floor_us, 2))
                    except Exception as e:  # noqa: BLE001  (recorded, the grid goes on)
                        row["note"] = f"error: {type(e).__name__}: {e}"[:300].replace("\n", " ")
                rows.append(row)
                writer.writerow(row)
                f.flush()
                print(",".join(str(row[c]) for c in COLUMNS), flush=True)
            del target, draft, noise
    plot(rows, out / "kernel_bench.png")
    if device.type == "cuda":
        profile_launches(device, max(map(int, args.batches.split(","))), min(map(int, args.gammas.split(","))),
                         max(map(int, args.vocabs.split(","))), out / "kernel_profile.csv")


if __name__ == "__main__":
    main()
