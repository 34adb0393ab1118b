"""Where a profiled call's GPU time went, per CUDA stream: read a chrome trace written by ``e2e_bench --profile``
(``NAME_profile_ENGINE_bB.json.gz``) and print, per stream, its kernels and their summed time per step, and for the
whole call the GPU's busy time (the union of all kernels' intervals) against its summed kernel time (their
difference: time two streams' kernels overlapped) and against the span from the first kernel to the last (the rest:
time no kernel ran, e.g. the GPU waiting for the host).

Per step means over the call's steps, though the trace holds the whole call (its prefills, and any eager steps and
graph captures of a first call). Kernels of a replayed CUDA graph may all be reported on the stream the graph was
launched on, whatever stream they were captured on: then the per-stream split says nothing of the side stream, while
the busy, overlap and idle figures, from the kernels' timestamps, still hold.

    python -m benchmarks.trace_streams TRACE.json.gz [...] --steps 29
"""

import argparse
import gzip
import json


def kernels(path: str) -> list[dict]:
    """The trace's device kernels (``cat`` "kernel"): each with ``ts``, ``dur`` (µs) and ``tid`` (its stream)."""
    with gzip.open(path, "rt") if path.endswith(".gz") else open(path) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    return [e for e in events if e.get("cat") == "kernel" and "dur" in e]


def busy(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of ``(start, end)`` intervals."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def summary(path: str, steps: int) -> str:
    """The per-stream and whole-call lines for one trace, ``steps`` the call's step count (per-step figures)."""
    ks = kernels(path)
    streams = {}
    for k in ks:
        streams.setdefault(k["tid"], []).append(k)
    lines = [path]
    for tid, group in sorted(streams.items(), key=lambda kv: -len(kv[1])):
        time = sum(k["dur"] for k in group)
        lines.append(f"  stream {tid}: {len(group)} kernels ({len(group) / steps:.1f} a step), "
                     f"{time / 1e3:.2f} ms ({time / steps:.1f} us a step)")
    summed = sum(k["dur"] for k in ks)
    union = busy([(k["ts"], k["ts"] + k["dur"]) for k in ks])
    span = max(k["ts"] + k["dur"] for k in ks) - min(k["ts"] for k in ks)
    lines.append(f"  all: summed {summed / steps:.1f} us a step, busy {union / steps:.1f} us a step "
                 f"(overlap {(summed - union) / steps:.1f}), span {span / steps:.1f} us a step "
                 f"(idle {(span - union) / steps:.1f})")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("traces", nargs="+")
    p.add_argument("--steps", type=int, nargs="+", required=True, help="each trace's step count (one, or one each)")
    args = p.parse_args()
    steps = args.steps * len(args.traces) if len(args.steps) == 1 else args.steps
    for path, n in zip(args.traces, steps, strict=True):
        print(summary(path, n))


if __name__ == "__main__":
    main()
