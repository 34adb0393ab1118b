"""Step reports: the host's view of the steps the loop has enqueued.

Each step's counts (accepted, emitted, finished per row; the side evidence on the other arms, when gathered) are
copied to the host without a synchronisation (a pinned non-blocking copy on CUDA) and read once the device has
produced them. Reading a report hands the step to the selector (its arm's outcome, then the side evidence), the
statistics and the sequences' host counts. A backend that needs each step's
counts before the next (:class:`~flashspec_hf.backends.DynamicBackend`) reads at once; the static one lets up to
``MAX_IN_FLIGHT`` steps run ahead, fewer near the length limit: the host reads a report early, waiting for its step,
while the steps left unread could take every unfinished row to ``max_new_tokens`` (:func:`may_end`), so a call whose
last rows stop at that length queues no step after its last (an EOS in a step not yet read still can: the host cannot
foresee it). The selector only ever learns from past steps, so exactness does not depend on when reports are read;
the lag is a function of the counts read so far, not of timing, so neither do its choices.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

import torch

from .selection import Selector
from .sequences import Sequences
from .stats import FlashSpecStats


@dataclass
class Report:
    """One step as the host reads it: the arm, the step's γ (its drafted tokens), per row the accepted draft tokens,
    the emitted tokens, whether the row was finished before the step and after it, and the step time (s)."""

    arm: int
    gamma: int
    accepted: list[int]
    emitted: list[int]
    was_finished: list[bool]
    finished: list[bool]
    seconds: float

    @property
    def active_accepted(self) -> list[int]:
        """Accepted draft tokens of the rows that were generating during the step."""
        return [n for n, f in zip(self.accepted, self.was_finished, strict=True) if not f]


class StepReports:
    """Chooses each step's arm and reads the steps' outcomes back, late or at once.

    Step time is measured without a synchronisation: CUDA events read with the counts, or host wall time on the CPU
    (where every operation has finished when it returns).

    Args:
        selector: picks each step's arm and learns from the reports.
        stats: receives every report.
        sequences: receives every report's emitted counts (its host counts).
        device: where the steps run.
        max_new_tokens: tokens each row may generate (the length limit every row shares).
    """

    def __init__(self, selector: Selector, stats: FlashSpecStats, sequences: Sequences, device: torch.device,
                 max_new_tokens: int):
        self.selector, self.stats, self.sequences = selector, stats, sequences
        self.max_new_tokens = max_new_tokens
        self.cuda = device.type == "cuda"
        self.queue = deque()  # per step in flight: (arm, γ, host copy of [4 B] or [4 B + 2 A], B, start, end)
        self.last: Report | None = None
        self.done = False  # a report read shows every row finished

    def choose(self, arm: int | None = None) -> tuple[int, object]:
        """The next step's arm (the selector's choice, or ``arm`` when the backend warms one up) and its start mark
        for :meth:`add`."""
        if self.cuda:
            start = torch.cuda.Event(enable_timing=True)
            start.record()
        else:
            start = time.perf_counter()
        return self.selector.choose(arm), start

    def add(self, arm: int, gamma: int, start, num_accepted, num_emitted, was_finished, finished,
            evidence: torch.Tensor | None = None) -> None:
        """Queue a step's report: int64 ``[B]`` accepted and emitted counts, bool ``[B]`` finished flags before and
        after the step, and the side evidence int64 ``[A, 2]`` or None (device tensors; copied to the host in one
        copy, without waiting)."""
        parts = [num_accepted, num_emitted, was_finished.long(), finished.long()]
        counts = torch.cat(parts if evidence is None else [*parts, evidence.flatten()])  # [4 B] or [4 B + 2 A]
        if not self.cuda:
            self.queue.append((arm, gamma, counts, len(num_accepted), start, time.perf_counter()))
            return
        host = torch.empty(counts.shape, dtype=counts.dtype, device="cpu", pin_memory=True)
        host.copy_(counts, non_blocking=True)
        end = torch.cuda.Event(enable_timing=True)
        end.record()
        self.queue.append((arm, gamma, host, len(num_accepted), start, end))

    def read(self, in_flight: int) -> bool:
        """Read the oldest reports until at most ``in_flight`` remain (0: all) and the steps left unread cannot end
        the call at its length (:func:`may_end`), waiting for their steps if need be; returns :attr:`done`. The lag
        depends on the counts read, never on "whatever has finished": which outcomes the selector has seen when it
        chooses must not depend on timing, or a seeded call would not repeat."""
        while len(self.queue) > in_flight or (
                self.queue and may_end(self._tokens_left(), [gamma for _, gamma, *_ in self.queue])):
            arm, gamma, host, rows, start, end = self.queue.popleft()
            if self.cuda:
                end.synchronize()  # waits when more than `in_flight` steps were queued, or near the length limit
                seconds = start.elapsed_time(end) / 1000
            else:
                seconds = end - start
            values = host.tolist()  # [4 B] counts, then [2 A] side evidence if any
            accepted, emitted, was_finished, finished = (values[i * rows: (i + 1) * rows] for i in range(4))
            report = Report(arm, gamma, accepted, emitted, list(map(bool, was_finished)), list(map(bool, finished)),
                            seconds)
            self._hand_over(report)
            if len(values) > 4 * rows and report.active_accepted:
                self.selector.update_all(values[4 * rows:: 2], values[4 * rows + 1:: 2])
        return self.done

    def _tokens_left(self) -> int:
        """The most tokens an unfinished row may still generate, as far as the reports read tell (0: all finished)."""
        finished = self.last.finished if self.last is not None else [False] * len(self.sequences.num_new_host)
        return max((self.max_new_tokens - n for n, f in zip(self.sequences.num_new_host, finished, strict=True)
                    if not f), default=0)

    def _hand_over(self, report: Report) -> None:
        self.last = report
        self.sequences.count_on_host(report.emitted)
        active = report.active_accepted
        if active:
            self.selector.update(report.arm, active, report.gamma)
            self.stats.record(report.arm, active, report.gamma, report.seconds)
        self.done = all(report.finished)


def may_end(tokens_left: int, unread_gammas: list[int]) -> bool:
    """Whether steps not yet read could have ended a call at its length: each emits at most ``γ + 1`` tokens a row, so
    together at most ``Σ (γ + 1)``; a row with ``tokens_left`` more to generate may be finished by them when that is
    at least ``tokens_left``. The static loop then reads a report before queuing another step, so that a call whose
    last rows stop at ``max_new_tokens`` runs no step past its last (it otherwise ran
    :data:`~flashspec_hf.backends.MAX_IN_FLIGHT` more, 8% of a 128-token call at τ 3.77:
    ``benchmarks/results/cpu_2026-12-07j_step_forwards``)."""
    return tokens_left <= sum(gamma + 1 for gamma in unread_gammas)
