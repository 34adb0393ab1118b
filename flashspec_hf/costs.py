"""Arm costs for cost-aware selection: the seconds of one step of each arm, calibrated once per set-up.

An arm's step costs one target forward over ``γ + 1`` columns plus, for a draft model, its catch-up forward (over
the columns it reads again: :attr:`~flashspec_hf.runners.StaticRunner.behind` for a static runner that keeps current,
else one) and ``γ - 1`` one-column draft forwards (prompt lookup and plain decoding draft for free; a mixed arm,
:class:`~flashspec_hf.drafts.LookupOrDraft`, pays its model's), plus, on the static backend's every
:data:`~flashspec_hf.backends.KEEP_CURRENT_EVERY`-th step (``1 / K`` of their cost on each step), one forward of
every other draft model it keeps current over ``W + γ - 1`` columns (a mixed arm's own model too; not early exits:
they read the target's cache), keeping ``γ`` logits when the step gathers side evidence
(:mod:`~flashspec_hf.evidence`). Where those run on a side stream beside the target's forward (captured steps,
:mod:`~flashspec_hf.streams`), the target's forward is timed alone and with them running beside it.
Each forward runs through the call's own runners (compiled forwards included) on columns past the committed ones and
is rewound, so nothing the call computes changes; the forwards run in interleaved rounds and each counts its fastest
(:func:`forward_seconds`). They are timed as the call's steps run them: where the backend captures its steps as CUDA
graphs, each timed forward is a replay of a graph captured from it, timed on the device; elsewhere each is launched
from the host and timed on the host clock. The table is kept on the target per set-up (backend, batch size, device,
models and their weights, arms): later calls decide from the same numbers, so with ``torch.manual_seed`` they repeat
exactly; only the first call of a set-up pays the calibration (:data:`WARM_UPS` + :data:`REPEATS` rounds).

Timed from the host, the costs of captured steps come out 7–8× their times as run and skewed between arms (H200,
SmolLM2-135M, B = 1: on 2026-12-05 a chat or code draft's step 1.43× a lookup step where it runs at 1.26×; on
2026-12-06 1.30–1.43× where it runs at 1.28×). Replayed on 24 held-out prompts a domain and 8 selector seeds, that
skew cost the default selector about 3% of its tokens/s on chat and nothing on code and prose
(``benchmarks/results/h200_2026-12-06_side_evidence``). Timed as replays (H100, 2026-12-05, each forward's rewind and
graph launch then included), a draft step came out at 0.88–0.90× its time as run: the verification and the commit,
common to every arm, are not timed.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable

import torch

from .columns import Columns
from . import backends
from .cpu_products import rerouting
from .drafts import DraftSource, LookupOrDraft, ModelDrafts
from .runners import NO_LOGITS, Runner, parameters_fingerprint
from .streams import fork

WARM_UPS = 2
"""Untimed rounds of forwards, launched from the host, before any is timed or captured: the first allocates the
static caches' layers lazily, the second recompiles where dynamo specialised on the first."""

REPEATS = 5
"""Timed rounds of forwards (:func:`forward_seconds`)."""

REPLAYS = 8
"""Back-to-back replays of a captured forward in one timed round (between two CUDA events; their mean counts)."""


def arm_costs(
    target: Runner, sources: list[DraftSource], arms: list[tuple[int, int]], columns: Columns, backend: str,
    side_stream: torch.cuda.Stream | None = None, evidence: bool = False, graphed: bool = False,
    weights: tuple | None = None,
) -> list[float]:
    """Step seconds of each arm, from the table kept on the target (calibrated now if this set-up has none).

    Args:
        target: the target's runner, after the prefill; sources: the call's draft sources; arms: ``(source, γ)``.
        columns: the call's columns (the forwards read columns past the committed ones and are rewound).
        backend: the backend's name (a set-up key: graphs change the costs).
        side_stream: where the step runs its keep-current forwards beside the target's (None: in line).
        evidence: whether the keep-current forwards keep their logits (side evidence).
        graphed: whether the backend captures its steps as CUDA graphs: the forwards are then timed as graph
            replays, captured on the device of ``columns``.
        weights: ``parameters_fingerprint([target.model, *the draft models in source order])``
            (:func:`~flashspec_hf.runners.parameters_fingerprint`), when the caller took it this call
            (:attr:`~flashspec_hf.backends.Backend.weights`); it keys the table, so anything else would share one
            between set-ups. None: taken here (0.5 ms for SmolLM2-135M and its three drafts on a 2-core CPU).

    Returns:
        seconds per step, one per arm.
    """
    drafts = {s: source.runner for s, source in enumerate(sources) if isinstance(source, ModelDrafts)}
    mixed = {s: sources.index(source.model) for s, source in enumerate(sources) if isinstance(source, LookupOrDraft)}
    if weights is None:
        weights = parameters_fingerprint([target.model, *(runner.model for runner in drafts.values())])
    key = (backend, columns.tokens.shape[0], str(columns.tokens.device), tuple(type(s).__name__ for s in sources),
           tuple(arms), weights, rerouting(), side_stream is not None, evidence, graphed, backends.KEEP_CURRENT_EVERY)
    kept = target.model.__dict__.setdefault("_flashspec_arm_costs", {})
    if key not in kept:
        kept[key] = _calibrate(target, drafts, mixed, arms, columns, side_stream, evidence, graphed)
    return kept[key]


def _calibrate(target: Runner, drafts: dict[int, Runner], mixed: dict[int, int], arms: list[tuple[int, int]],
               columns: Columns, side_stream: torch.cuda.Stream | None, evidence: bool,
               graphed: bool) -> list[float]:
    """An arm's step: the target's forward over γ + 1 columns, its draft model's catch-up and γ - 1 further forwards
    (a mixed arm's model drafts every row), and on every ``K``-th step the forward keeping each other draft model
    current (a mixed arm's own model too: its drafts are replaced by the mixed ones; γ logits kept with
    ``evidence``): after the target's, or beside it on ``side_stream``."""
    current = [s for s, runner in drafts.items() if runner.keeps_current]
    others = {s: tuple(o for o in current if o != s) for s, _ in arms}  # the draft models an arm keeps current
    gammas = sorted({g for _, g in arms})

    def reread(runner: Runner) -> int:  # columns a draft model's catch-up feeds
        return runner.behind if runner.keeps_current else 1

    jobs = {("draft", s): (runner, 1, 1, ()) for s, runner in drafts.items()}
    jobs |= {("catch_up", s): (runner, reread(runner), 1, ()) for s, runner in drafts.items()}
    jobs |= {("target", g): (target, g + 1, g + 1, ()) for g in gammas}

    def kept(o: int, g: int) -> tuple[Runner, int, int]:  # draft model o's keep-current forward on a γ = g step
        return drafts[o], reread(drafts[o]) + g - 1, g if evidence else 0

    if side_stream is None:
        jobs |= {("current", o, g): (*kept(o, g), ()) for o in current for g in gammas}
    else:  # timed together: the target's forward with the others' forwards beside it
        jobs |= {("beside", others[s], g): (target, g + 1, g + 1, tuple(kept(o, g) for o in others[s]))
                 for s, g in arms}
    seconds = dict(zip(jobs, forward_seconds(list(jobs.values()), columns, side_stream, graphed)))

    def keeping_current(s: int, g: int) -> float:  # what the others' keep-current forwards add to a step that has them
        if side_stream is not None:
            return max(seconds["beside", others[s], g] - seconds["target", g], 0.0)
        return sum(seconds["current", o, g] for o in others[s])

    def drafting(s: int, g: int) -> float:
        model = mixed.get(s, s)
        if model not in drafts or not g:
            return 0.0
        return seconds["catch_up", model] + (g - 1) * seconds["draft", model]

    every = backends.KEEP_CURRENT_EVERY
    return [seconds["target", g] + keeping_current(s, g) / every + drafting(s, g) for s, g in arms]


def forward_seconds(jobs: list[tuple[Runner, int, int, tuple]], columns: Columns,
                    side_stream: torch.cuda.Stream | None = None, graphed: bool = False) -> list[float]:
    """Seconds of each job's forwards, a job being ``(runner, width, keep, beside)``: the runner's forward over
    ``width`` columns from where it stands, keeping ``keep`` logits (0: none), with the ``(runner, width, keep)``
    forwards of ``beside`` (keep-current forwards) on ``side_stream`` (:func:`~flashspec_hf.streams.fork`; in line
    without one), then every runner rewound to where it stood.

    The jobs run in rounds, one of each per round, each round starting one job later than the last (no job always
    follows the same one): :data:`WARM_UPS` untimed rounds launched from the host, then :data:`REPEATS` timed ones,
    and each job's time is its fastest. Another process can only slow a forward down, and a slow moment of the
    machine then costs one round of every job rather than every round of one, so the ratios between arms do not
    follow the moment the table was calibrated in. A timed round launches the job from the host and times it on the
    host clock, synchronised (:func:`_host_seconds`), and rewinds it untimed. With ``graphed`` (static runners,
    captured on the device of ``columns``), after the warm-ups each job is captured once as a CUDA graph, its rewind
    included, and its rewind alone as another (all of them in one memory pool: they replay one after another and
    their outputs are never read); a timed round replays both (:func:`_replay_seconds`) and counts the difference, the
    job's forwards as a captured step runs them, without the rewind and the graph launch, which a step pays once for
    all its forwards."""
    stood = [[_where(r) for r in _runners(job)] for job in jobs]

    def run(job: int) -> None:
        runner, width, keep, beside = jobs[job]
        join = fork(side_stream, lambda: [r.forward(columns, w, keep=k or NO_LOGITS) for r, w, k in beside])
        runner.forward(columns, width, keep=min(keep, width) or NO_LOGITS)
        join()

    def rewind(job: int) -> None:
        for r, where in zip(_runners(jobs[job]), stood[job]):
            r.rewind(where)

    def run_and_rewind(job: int) -> None:
        run(job)
        rewind(job)

    times = [[] for _ in jobs]
    replays: dict[int, tuple[Callable[[], None], Callable[[], None]]] = {}  # job -> replays: it, its rewind alone
    pool = torch.cuda.graph_pool_handle() if graphed else None
    with torch.cuda.device(columns.tokens.device) if graphed else contextlib.nullcontext():
        for round_ in range(WARM_UPS + REPEATS):
            for job in [(round_ + i) % len(jobs) for i in range(len(jobs))]:
                if round_ < WARM_UPS:
                    run_and_rewind(job)
                elif graphed:
                    if job not in replays:
                        replays[job] = (_captured(functools.partial(run_and_rewind, job), pool),
                                        _captured(functools.partial(rewind, job), pool))
                    whole, rewound = (_replay_seconds(replay) for replay in replays[job])
                    times[job].append(max(whole - rewound, 0.0))
                else:
                    times[job].append(_host_seconds(functools.partial(run, job)))
                    rewind(job)
    return [min(t) for t in times]


def _runners(job: tuple[Runner, int, int, tuple]) -> list[Runner]:
    """The runners a job feeds: its own, then those beside it."""
    return [job[0], *(r for r, *_ in job[3])]


def _where(runner: Runner) -> int | torch.Tensor:
    """A copy of where ``runner`` stands (its ``seen``: a host int, or int64 ``[B]`` on the device)."""
    return runner.seen if isinstance(runner.seen, int) else runner.seen.clone()


def _host_seconds(work: Callable[[], None]) -> float:
    """Seconds ``work`` takes, launched from the host, every GPU synchronised before and after."""
    _synchronize()
    start = time.perf_counter()
    work()
    _synchronize()
    return time.perf_counter() - start


def _captured(work: Callable[[], None], pool) -> Callable[[], None]:
    """``work`` captured once as a CUDA graph in memory ``pool`` (a ``torch.cuda.graph_pool_handle``, freed with the
    graphs) on the current device; returns its replay. ``work`` must leave every tensor it reads as it found it (a
    job's rewind), so replays can repeat."""
    graph = torch.cuda.CUDAGraph()
    # on a stream of the current device: torch.cuda.graph's default stream sits on the device of the process's first
    # capture
    with torch.cuda.graph(graph, pool=pool, stream=torch.cuda.Stream()):
        work()
    return graph.replay


def _replay_seconds(replay: Callable[[], None]) -> float:
    """Device seconds of one replay: the mean of :data:`REPLAYS` back-to-back replays between two CUDA events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(REPLAYS):
        replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1000 / REPLAYS  # elapsed_time is in ms


def _synchronize() -> None:
    """Wait for every GPU (a target may be spread over several)."""
    for device in range(torch.cuda.device_count() if torch.cuda.is_initialized() else 0):
        torch.cuda.synchronize(device)
