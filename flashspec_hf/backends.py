"""The two backends of the one speculative step (:mod:`flashspec_hf.decoding`): how columns and caches are laid
out, and whether forwards are CUDA graphs.

- :class:`DynamicBackend` (the CPU's, and CUDA calls that need a feature the static one lacks): reads each step's
  report at once (one device-to-host copy per step), commits the batch's largest accepted count plus one column
  (no hole at batch 1) and crops every ``DynamicCache`` back to the committed columns. Host-side features that need
  each step's counts run here: prefix-dependent processors and stopping criteria (rows grouped by length), the
  streamer, recorded scores, full-information selection.
- :class:`StaticBackend` (``cache_implementation="static"``; CUDA's default when the call needs nothing it lacks):
  commits ``γ + 1`` columns every step (rejected drafts stay as masked holes), so column counts are known on the
  host without reading the device; no cache is ever cropped; the forwards of the steady state (target
  ``[B, γ + 1]``, drafting model ``[B, 2]`` then ``[B, 1]``) are CUDA graphs on the GPU; reports are read up to
  ``MAX_IN_FLIGHT`` steps late, so a step enqueues without any synchronisation. Finished rows emit nothing, so the
  steps queued after the last row finished cost time but change no output.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch
from transformers import PreTrainedModel

from .columns import Columns
from .reports import Report
from .runners import DynamicRunner, Runner, StaticRunner, has_standard_static_layers

MAX_IN_FLIGHT = 3
"""Steps the static backend lets the host queue ahead of the GPU before it waits for the oldest."""

CAPACITY_STEP = 1024
"""Static cache capacities are rounded up to a multiple of this, so calls share kept caches and graphs."""


class Backend(ABC):
    """Layout and runners of one call.

    Args:
        batch_size: ``B``; vocab_size: the target's ``V``; gammas: the arms' distinct γ; device: where the call's
            tokens live.
    """

    in_flight: int
    """Reports the host may leave unread after a step (0: each step's report is read before the next step)."""

    def __init__(self, batch_size: int, vocab_size: int, gammas: list[int], device: torch.device):
        self.batch_size, self.vocab_size, self.gammas, self.device = batch_size, vocab_size, gammas, device
        self.runners: list[Runner] = []

    def capacity(self, prompt_length: int, max_new_tokens: int) -> int:
        """Columns a call can need: the prompt, at most ``max_new_tokens`` steps of ``γ + 1``, one pending column."""
        return prompt_length + 1 + max_new_tokens * (max(self.gammas) + 1)

    @abstractmethod
    def target_runner(self, model: PreTrainedModel, capacity: int) -> Runner:
        """The target's runner over ``capacity`` columns."""

    @abstractmethod
    def draft_runner(self, model: PreTrainedModel, capacity: int) -> Runner:
        """A draft model's runner over ``capacity`` columns."""

    @abstractmethod
    def commit(self, columns: Columns, output: torch.Tensor, num_accepted: torch.Tensor, gamma: int, report: Report | None) -> None:
        """Append the verified step to ``columns`` (``output`` int64 ``[B, γ + 1]``, ``num_accepted`` int64
        ``[B]``) and bring every runner back to the committed columns; ``report`` is the step's own report when
        :attr:`in_flight` is 0."""


class DynamicBackend(Backend):
    """Dynamic caches, cropped to the committed columns every step; the step's report is read at once.

    Raises:
        NotImplementedError: at batch > 1, a model with sliding-window or linear-attention layers (holes).
    """

    in_flight = 0

    def target_runner(self, model: PreTrainedModel, capacity: int) -> Runner:
        return self._runner(model)

    def draft_runner(self, model: PreTrainedModel, capacity: int) -> Runner:
        return self._runner(model)

    def _runner(self, model: PreTrainedModel) -> DynamicRunner:
        runner = DynamicRunner(model, self.vocab_size)
        if self.batch_size > 1:
            runner.check_holes_allowed()
        self.runners.append(runner)
        return runner

    def commit(self, columns, output, num_accepted, gamma, report) -> None:
        most = max(report.accepted)
        columns.commit(output, num_accepted, most + 1, holes=min(report.accepted) < most)
        for runner in self.runners:
            runner.rewind(columns.length - 1)  # the new pending column is unseen


class StaticBackend(Backend):
    """Static caches, ``γ + 1`` columns per step, CUDA graphs for the steady-state shapes
    (:class:`~flashspec_hf.runners.StaticRunner`). On CUDA the caches have a :data:`CAPACITY_STEP`-rounded
    capacity and are kept on the models with their graphs; elsewhere they are allocated per call, exactly as large
    as the call needs.

    Args:
        compile_options: ``torch.compile`` arguments for the target's captured forwards (CUDA only), or None for
            the eager forward (``generate(..., disable_compile=True)``).
    """

    in_flight = MAX_IN_FLIGHT

    def __init__(self, batch_size: int, vocab_size: int, gammas: list[int], device: torch.device,
                 compile_options: dict | None = None):
        super().__init__(batch_size, vocab_size, gammas, device)
        self.compile_options = compile_options if device.type == "cuda" else None

    def capacity(self, prompt_length: int, max_new_tokens: int) -> int:
        needed = super().capacity(prompt_length, max_new_tokens)
        return -(-needed // CAPACITY_STEP) * CAPACITY_STEP if self.device.type == "cuda" else needed

    def target_runner(self, model: PreTrainedModel, capacity: int) -> Runner:
        shapes = {(g + 1, g + 1) for g in self.gammas}  # the pending token and γ drafts, all logits kept
        return self._runner(model, capacity, shapes, self.compile_options)

    def draft_runner(self, model: PreTrainedModel, capacity: int) -> Runner:
        return self._runner(model, capacity, {(2, 1), (1, 1)})  # last draft + pending; then one draft at a time

    def _runner(self, model, capacity: int, graph_shapes: set[tuple[int, int]], compile_options=None) -> StaticRunner:
        if self.device.type != "cuda":
            return StaticRunner(model, self.vocab_size, capacity, graph_shapes)
        return StaticRunner.for_model(model, self.vocab_size, capacity, graph_shapes, self.batch_size, compile_options)

    def commit(self, columns, output, num_accepted, gamma, report) -> None:
        columns.commit(output, num_accepted, gamma + 1)  # every runner has seen at most these columns

    @staticmethod
    def unsupported(models: list[PreTrainedModel], contextual: bool, criteria: bool, streamer, recording: bool,
                    full_information: bool) -> str | None:
        """The first feature of a call that the static backend does not support (a phrase), or None."""
        problems = {
            "prefix-dependent logits processors (repetition penalty, n-gram bans, min length, …)": contextual,
            "stopping criteria other than EOS and length (stop strings, custom criteria)": criteria,
            "a streamer": streamer is not None,
            "return_dict_in_generate with scores or logits": recording,
            "a full-information selector (Hedge)": full_information,
            "sliding-window, linear-attention or other non-standard cache layers": not all(
                has_standard_static_layers(m) for m in models
            ),
        }
        return next((what for what, present in problems.items() if present), None)
