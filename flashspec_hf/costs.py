"""Arm costs for cost-aware selection: the seconds of one step of each arm, calibrated once per set-up.

An arm's step costs one target forward over ``γ + 1`` columns plus, for a draft model, ``γ`` one-column draft
forwards (prompt lookup and plain decoding draft for free; a mixed arm, :class:`~flashspec_hf.drafts.LookupOrDraft`,
pays its model's), plus, on the static backend, one ``γ + 1``-column forward of every other draft model it keeps
current (a mixed arm's own model too; not early exits: they read the target's cache). Each forward
is timed eagerly through the call's own runners (compiled forwards included; not inside a CUDA graph, so launch
overheads count more than in a captured step) on columns past the committed ones, then rewound, so nothing the call
computes changes. The table is kept on the target per set-up (backend, batch size, device, models and their weights,
arms): later calls decide from the same numbers, so with ``torch.manual_seed`` they repeat exactly; only the first call of a set-up pays the
calibration (a few forwards per model).
"""

from __future__ import annotations

import statistics
import time

import torch

from .columns import Columns
from .backends import parameters_fingerprint
from .cpu_products import rerouting
from .drafts import DraftSource, LookupOrDraft, ModelDrafts
from .runners import Runner

REPEATS = 3
"""Timed forwards per (model, width), after two untimed warm-ups (lazy initialisation, then graph capture)."""


def arm_costs(
    target: Runner, sources: list[DraftSource], arms: list[tuple[int, int]], columns: Columns, backend: str
) -> list[float]:
    """Step seconds of each arm, from the table kept on the target (calibrated now if this set-up has none).

    Args:
        target: the target's runner, after the prefill; sources: the call's draft sources; arms: ``(source, γ)``.
        columns: the call's columns (the forwards read columns past the committed ones and are rewound).
        backend: the backend's name (a set-up key: graphs change the costs).

    Returns:
        seconds per step, one per arm.
    """
    drafts = {s: source.runner for s, source in enumerate(sources) if isinstance(source, ModelDrafts)}
    mixed = {s: sources.index(source.model) for s, source in enumerate(sources) if isinstance(source, LookupOrDraft)}
    models = [target.model, *(runner.model for runner in drafts.values())]
    key = (backend, columns.tokens.shape[0], str(columns.tokens.device), tuple(type(s).__name__ for s in sources),
           tuple(arms), parameters_fingerprint(models), rerouting())
    kept = target.model.__dict__.setdefault("_flashspec_arm_costs", {})
    if key not in kept:
        kept[key] = _calibrate(target, drafts, mixed, arms, columns)
    return kept[key]


def _calibrate(target: Runner, drafts: dict[int, Runner], mixed: dict[int, int], arms: list[tuple[int, int]],
               columns: Columns) -> list[float]:
    """An arm's step: the target's forward over γ + 1 columns, γ forwards of its draft model (a mixed arm's model
    drafts every row), and the forward keeping each other draft model current (a mixed arm's own model too: its
    drafts are replaced by the mixed ones)."""
    gammas = {g for _, g in arms}
    target_seconds = {g: forward_seconds(target, columns, g + 1, keep=g + 1) for g in gammas}
    draft_seconds = {s: forward_seconds(runner, columns, 1, keep=1) for s, runner in drafts.items()}
    current_seconds = {  # (source, γ) -> a forward keeping the source current on a step it did not draft
        (s, g): forward_seconds(runner, columns, g + 1, keep=1) if runner.keeps_current else 0.0
        for s, runner in drafts.items() for g in gammas
    }
    return [
        target_seconds[g] + g * draft_seconds.get(mixed.get(s, s), 0.0)
        + sum(current_seconds[o, g] for o in drafts if o != s)
        for s, g in arms
    ]


def forward_seconds(runner: Runner, columns: Columns, width: int, keep: int) -> float:
    """Median seconds of ``runner``'s forward over ``width`` columns from where it stands, keeping ``keep`` logits
    (synchronised timing; the runner is rewound after each)."""
    seen = runner.seen if isinstance(runner.seen, int) else runner.seen.clone()
    times = []
    for repeat in range(REPEATS + 2):
        _synchronize()
        start = time.perf_counter()
        runner.forward(columns, width, keep=min(keep, width))
        _synchronize()
        runner.rewind(seen)
        if repeat >= 2:  # two warm-ups
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def _synchronize() -> None:
    """Wait for every GPU (a target may be spread over several)."""
    for device in range(torch.cuda.device_count() if torch.cuda.is_initialized() else 0):
        torch.cuda.synchronize(device)
