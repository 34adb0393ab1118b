"""Where a profiled call's GPU time went, per CUDA stream: read a chrome trace written by ``e2e_bench --profile``
(``NAME_profile_ENGINE_bB.json.gz``) and print, per stream, its kernels and their summed time per step, and for the
whole call the GPU's busy time (the union of all kernels' intervals) against its summed kernel time (their
difference: time two streams' kernels overlapped) and against the span from the first kernel to the last (the rest:
time no kernel ran, e.g. the GPU waiting for the host).

Per step means over the call's steps, though the trace holds the whole call (its prefills, and any eager steps and
graph captures of a first call). Kernels of a replayed CUDA graph may all be reported on the stream the graph was
launched on, whatever stream they were captured on: then the per-stream split says nothing of the side stream, while
the busy, overlap and idle figures, from the kernels' timestamps, still hold.

With ``--replays``, per CUDA graph replay instead (a captured step or prefill: one ``cudaGraphLaunch``, whose
kernels, copies and memsets carry that launch's correlation id), medians per kind of replay (its node count: a step
with keep-current forwards has more nodes than one without), in µs: ``busy`` (the nodes' summed durations), ``span``
(first node's start to last node's end), ``gaps`` (``span - busy``: the GPU idle between nodes inside the graph,
negative where a side stream overlaps them), ``before`` (GPU idle between the previous replay's end and this one's
start) and ``launch`` (the host's ``cudaGraphLaunch`` call). Added on 2026-12-07 to take apart prompt lookup's step
inside the default's pool (results/h100_2026-12-07d_split).

    python -m benchmarks.trace_streams TRACE.json.gz [...] --steps 29
    python -m benchmarks.trace_streams TRACE.json.gz [...] --replays
"""

import argparse
import collections
import gzip
import json
import statistics

NODES = ("kernel", "gpu_memcpy", "gpu_memset")
"""Trace categories of the GPU work a graph replay runs."""


def events(path: str) -> list[dict]:
    """The trace's events."""
    with gzip.open(path, "rt") if path.endswith(".gz") else open(path) as f:
        trace = json.load(f)
    return trace["traceEvents"] if isinstance(trace, dict) else trace


def kernels(path: str) -> list[dict]:
    """The trace's device kernels (``cat`` "kernel"): each with ``ts``, ``dur`` (µs) and ``tid`` (its stream)."""
    return [e for e in events(path) if e.get("cat") == "kernel" and "dur" in e]


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


def replays(path: str) -> list[dict]:
    """One dict per graph replay in the trace, in launch order: node counts per category and the times of the
    module docstring (µs)."""
    trace = events(path)
    launches = {e["args"]["correlation"]: e for e in trace
                if e.get("cat") == "cuda_runtime" and e["name"] == "cudaGraphLaunch"}
    nodes = collections.defaultdict(list)  # correlation -> its nodes
    for e in trace:
        if e.get("cat") in NODES and e["args"].get("correlation") in launches:
            nodes[e["args"]["correlation"]].append(e)
    out, previous_end = [], None
    for corr in sorted(nodes, key=lambda c: launches[c]["ts"]):
        part = sorted(nodes[corr], key=lambda e: e["ts"])
        start, end = part[0]["ts"], max(e["ts"] + e["dur"] for e in part)
        work = sum(e["dur"] for e in part)
        counts = collections.Counter(e["cat"] for e in part)
        out.append(dict(nodes=len(part), kernels=counts["kernel"], copies=counts["gpu_memcpy"],
                        memsets=counts["gpu_memset"], busy=work, span=end - start, gaps=end - start - work,
                        before=None if previous_end is None else start - previous_end,
                        launch=launches[corr]["dur"]))
        previous_end = end
    return out


def replay_summary(path: str) -> str:
    """The medians per kind of replay (node count), most frequent first."""
    kinds = collections.defaultdict(list)
    for r in replays(path):
        kinds[r["nodes"]].append(r)
    header = (f"  {'nodes':>6} {'n':>4} {'kernels':>8} {'copies':>7} {'memsets':>8} "
              f"{'busy':>8} {'span':>8} {'gaps':>7} {'before':>7} {'launch':>7}")
    lines = [path, header]
    for n, rs in sorted(kinds.items(), key=lambda kv: -len(kv[1])):
        med = {k: statistics.median(r[k] for r in rs if r[k] is not None) if any(r[k] is not None for r in rs)
               else float("nan") for k in ("busy", "span", "gaps", "before", "launch")}
        lines.append(f"  {n:6d} {len(rs):4d} {rs[0]['kernels']:8d} {rs[0]['copies']:7d} {rs[0]['memsets']:8d} "
                     + " ".join(f"{med[k]:{w}.1f}" for k, w in
                                (("busy", 8), ("span", 8), ("gaps", 7), ("before", 7), ("launch", 7))))
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("traces", nargs="+")
    p.add_argument("--steps", type=int, nargs="+", help="each trace's step count (one, or one each)")
    p.add_argument("--replays", action="store_true", help="per CUDA graph replay instead of per stream")
    args = p.parse_args()
    if args.replays:
        return print("\n".join(replay_summary(path) for path in args.traces))
    if not args.steps:
        p.error("--steps is required unless --replays")
    steps = args.steps * len(args.traces) if len(args.steps) == 1 else args.steps
    for path, n in zip(args.traces, steps, strict=True):
        print(summary(path, n))


if __name__ == "__main__":
    main()
