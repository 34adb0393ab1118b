"""benchmarks.trace_streams: a profiled call's GPU time per CUDA graph replay, on a synthetic trace."""

import gzip
import json

from benchmarks.trace_streams import replay_summary, replays


def _node(cat, ts, dur, corr, name="k"):
    return {"cat": cat, "name": name, "ts": ts, "dur": dur, "args": {"correlation": corr, "stream": 7}}


def test_replays_group_nodes_by_their_graph_launch(tmp_path):
    """Nodes go to the launch whose correlation id they carry (not to a kernel launched on its own), and busy, span,
    gaps and the idle before a replay come from their timestamps."""
    events = [
        {"cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": 0, "dur": 50, "args": {"correlation": 1}},
        {"cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 60, "dur": 5, "args": {"correlation": 2}},
        {"cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": 70, "dur": 40, "args": {"correlation": 3}},
        _node("kernel", 100, 10, 1), _node("gpu_memcpy", 111, 1, 1), _node("kernel", 114, 6, 1),
        _node("kernel", 125, 3, 2),  # launched on its own: in no replay
        _node("kernel", 130, 10, 3), _node("gpu_memset", 140, 2, 3), _node("kernel", 145, 5, 3),
    ]
    path = tmp_path / "trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)
    first, second = replays(str(path))
    assert first == dict(nodes=3, kernels=2, copies=1, memsets=0, busy=17, span=20, gaps=3, before=None, launch=50)
    assert second == dict(nodes=3, kernels=2, copies=0, memsets=1, busy=17, span=20, gaps=3, before=10, launch=40)
    assert replay_summary(str(path)).splitlines()[2].split()[:2] == ["3", "2"]  # one kind: 3 nodes, 2 replays
