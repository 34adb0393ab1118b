"""The two backends of the one speculative step (:mod:`flashspec_hf.decoding`): how columns and caches are laid
out, and how steps are launched.

- :class:`DynamicBackend` (the CPU's, and CUDA calls that need a feature the static one lacks): reads each step's
  report at once (one device-to-host copy per step), commits the batch's largest accepted count plus one column
  (no hole at batch 1) and crops every ``DynamicCache`` back to the committed columns. Host-side features that need
  each step's counts run here: prefix-dependent processors and stopping criteria (rows grouped by length), the
  streamer, recorded scores, full-information selection.
- :class:`StaticBackend` (``cache_implementation="static"``; CUDA's default when the call needs nothing it lacks): the
  dense layout (each row commits its accepted drafts and one token, and the next step overwrites its rejected columns,
  so attention spans the prompt and the generated tokens, not every draft ever made); every offset lives on the device,
  one per row, and the draft models that do not draft are fed the step's columns on every :data:`KEEP_CURRENT_EVERY`-th
  step (an early-exit draft reads the target's cache), catching up in forwards of fixed width, so a step has fixed
  shapes and addresses. On CUDA (every model on the call's GPU) the whole step of each arm, drafting,
  verification and commit included, is captured once as a CUDA graph and replayed: a step is one launch, the forwards
  inside it (target and draft models on CUDA) compiled by inductor, and the host seconds of the eager first steps and
  captures (where compilation happens) are reported apart (:attr:`StaticBackend.warmup_seconds`). Each runner's compiled
  prefill is captured too, once per shape (up to :data:`MAX_CAPTURED_PREFILL_TOKENS`). The state a step touches
  (columns, sequences, caches, limits) is kept on the target between calls of the same set-up, so later calls replay
  the graphs the first one captured. Reports are read ``MAX_IN_FLIGHT`` steps late, so a step enqueues without any
  synchronisation; near the length limit earlier (:func:`~flashspec_hf.reports.may_end`), so a call whose last rows
  stop at ``max_new_tokens`` queues no step past its last. Finished rows emit nothing, so the steps queued after the
  last row stopped at an EOS the host had not read yet cost time but change no output.
"""

from __future__ import annotations

import functools
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable

import torch
from transformers import PreTrainedModel

from .buffers import Buffers
from .columns import Columns
from .reports import Report
from .runners import (
    Capture, DynamicRunner, EarlyExitRunner, Runner, StaticRunner, has_standard_static_layers, on_one_gpu,
    parameters_fingerprint,
)
from .selection import Selector
from .target_parts import is_early_exit_of

MAX_IN_FLIGHT = 3
"""Steps the static backend lets the host queue ahead of the GPU before it waits for the oldest (at most: fewer near
the length limit, :func:`~flashspec_hf.reports.may_end`)."""

CAPACITY_STEP = 128
"""Static capacities are rounded up to a multiple of this on CUDA, so calls share kept sessions and graphs."""

KEPT_SESSIONS = 4
"""Static sessions (state, caches, step and prefill graphs) kept per target model, least recently used dropped
first."""

KEEP_CURRENT_EVERY = 3
"""Steps between the static backend's keep-current forwards (1: every step). The draft models that do not draft a
step are fed its columns only on every ``K``-th step of a call; in between they fall behind by at most ``K - 1`` steps
of ``γ + 1`` columns, and a draft model catches up by reading again the last ``2 + (K - 1)(γ_max + 1)`` committed
columns (:attr:`StaticBackend.behind`) in one forward, whose width does not depend on how far behind it is, so the
step keeps fixed shapes. Side evidence comes from those forwards, so from every ``K``-th step only. On an H100
(SmolLM2-135M's shape, its three bundled drafts, B = 1, 2026-12-07: ``benchmarks/results/h100_2026-12-07c_split``)
3 against 1 saved 0.015–0.065 ms a step (the forwards already ran beside the target's on a side stream); replayed on
the CPU, the sparser evidence cost the selector about 1.3 points on chat and gained 2 on code."""

EAGER_USES = 1
"""Steps an arm runs eagerly in a static session before its step is captured (compilation happens there); the same
for a prefill's shape."""

MAX_CAPTURED_PREFILL_TOKENS = 8192
"""Prefills feeding more tokens (batch × columns) are launched from the host, not captured: their kernels outlast
the launches, and a captured prefill keeps its activations in the session's memory pool."""


class Backend(ABC):
    """Layout, runners and step launching of one call.

    Args:
        batch_size: ``B``; vocab_size: the target's ``V``; gammas: the arms' distinct γ; device: where the call's
            tokens live.
    """

    in_flight: int
    """Reports the host may leave unread after a step (0: each step's report is read before the next step)."""

    warmup_seconds: float = 0.0
    """Host seconds of this call's steps that ran eagerly before their capture and of the steps' captures
    (compilation happens there; a prefill's count in the set-up); 0 without CUDA graphs."""

    side_stream: torch.cuda.Stream | None = None
    """Where a step's keep-current forwards run beside its target forward, and its side evidence's scoring beside its
    commit (:mod:`~flashspec_hf.streams`; None: in line)."""

    graphed: bool = False
    """Whether steps are captured as CUDA graphs and replayed."""

    evidence: bool = False
    """Whether the steps gather side evidence (:mod:`~flashspec_hf.evidence`: the static backend's greedy calls of a
    selector that takes it)."""

    weights: tuple | None = None
    """:func:`~flashspec_hf.runners.parameters_fingerprint` of the call's models (the target, then its draft models),
    set by :meth:`columns` where the backend takes it (the static backend's session; read it after that); None: not
    taken."""

    def __init__(self, batch_size: int, vocab_size: int, gammas: list[int], device: torch.device):
        self.batch_size, self.vocab_size, self.gammas, self.device = batch_size, vocab_size, gammas, device
        self.buffers = Buffers(device)

    def capacity(self, prompt_length: int, max_new_tokens: int) -> int:
        """Columns a call can need: a lead column, the prompt, at most ``max_new_tokens`` steps of ``γ + 1`` and one
        step's drafts."""
        return 1 + prompt_length + (max_new_tokens + 1) * (max(self.gammas) + 1)

    @abstractmethod
    def columns(self, input_ids, attention_mask, capacity: int, max_new_tokens: int) -> Columns:
        """The call's columns, holding the prompt."""

    @abstractmethod
    def target_runner(self, model: PreTrainedModel, columns: Columns, window: range | None = None) -> Runner:
        """The target's runner, with the prompt fed up to its pending column, or through it with that column's logits
        held for the first step (the dynamic backend; :meth:`~flashspec_hf.runners.Runner.verify_forward`), and its
        greedy tokens at the prompt ``window``'s columns kept (:attr:`~flashspec_hf.runners.Runner.prompt_argmax`)."""

    @abstractmethod
    def draft_runner(self, model: PreTrainedModel, columns: Columns, source: int,
                     window: range | None = None) -> Runner:
        """The runner of draft source ``source`` (a model), fed as far as the backend keeps draft models (with a
        ``window``, at least past it, keeping its greedy tokens there)."""

    def step(self, arm: int, run_step: Callable):
        """Launch one step of ``arm``: ``run_step(arm, keep_current)`` enqueues it (and the static backend's commit),
        ``keep_current`` telling whether the draft models that do not draft it are fed its columns (always here:
        only static runners keep current)."""
        return run_step(arm, True)

    def warming_arm(self, selector: Selector) -> int | None:
        """One of the arms ``selector`` may choose (:meth:`~flashspec_hf.selection.Selector.candidates`) that the
        next step must draft with, whatever the selector would pick, to finish warming up (None: it picks)."""
        return None

    @abstractmethod
    def commit(self, columns: Columns, output: torch.Tensor, num_accepted: torch.Tensor, report: Report | None) -> None:
        """Append the verified step to ``columns`` (``output`` int64 ``[B, γ + 1]``, ``num_accepted`` int64
        ``[B]``) and bring every runner back to the committed columns, after the step's report was read (``report``
        is that step's when :attr:`in_flight` is 0). The static backend commits inside the step instead."""


class DynamicBackend(Backend):
    """Dynamic caches, cropped to the committed columns every step; the step's report is read at once.

    Raises:
        NotImplementedError: at batch > 1, a model with sliding-window or linear-attention layers (holes).
    """

    in_flight = 0

    def __init__(self, batch_size: int, vocab_size: int, gammas: list[int], device: torch.device):
        super().__init__(batch_size, vocab_size, gammas, device)
        self.runners: list[DynamicRunner] = []

    def columns(self, input_ids, attention_mask, capacity, max_new_tokens) -> Columns:
        return Columns(input_ids, attention_mask, capacity, max_new_tokens, self.buffers)

    def target_runner(self, model: PreTrainedModel, columns: Columns, window: range | None = None) -> Runner:
        runner = self._runner(model)
        runner.prefill(columns, columns.host_length, window, hold=True)  # the pending column's logits are held
        return runner

    def draft_runner(self, model: PreTrainedModel, columns: Columns, source: int,
                     window: range | None = None) -> Runner:
        runner = self._runner(model)  # catches up when it first drafts
        if window is not None:  # fed up to the window's end now, to guess there
            runner.prefill(columns, window.stop, window)
        return runner

    def _runner(self, model: PreTrainedModel) -> DynamicRunner:
        runner = DynamicRunner(model, self.vocab_size)
        if self.batch_size > 1:
            runner.check_holes_allowed()
        self.runners.append(runner)
        return runner

    def commit(self, columns, output, num_accepted, report) -> None:
        most = max(report.accepted)
        columns.commit(output, num_accepted, most + 1, holes=min(report.accepted) < most)
        for runner in self.runners:
            runner.rewind(columns.host_length - 1)  # the new pending column is unseen


class StaticSession:
    """What a static call's steps touch, kept on the target between calls of one set-up: state buffers, runners, the
    captured step of each arm and the captured prefills."""

    def __init__(self, device: torch.device, weights: tuple):
        self.weights = weights  # parameters_fingerprint of the models it was built for
        self.buffers = Buffers(device, keep=True)
        self.runners: dict[str, StaticRunner] = {}  # "target" or "draft <source index>" -> runner
        self.graphs: dict[tuple, tuple] = {}  # (arm, keeps current) -> (CUDA graph, the step's outputs)
        self.prefills: dict[tuple, tuple] = {}  # (runner key, fed, W) -> (CUDA graph, logits)
        self.uses = Counter()  # (arm, keeps current), or a prefill's key -> launches
        self.pool = torch.cuda.graph_pool_handle() if device.type == "cuda" else None
        self.side = torch.cuda.Stream(device) if device.type == "cuda" else None  # :mod:`~flashspec_hf.streams`
        # captures run here: torch.cuda.graph's default stream is made once per process, on the device current at
        # its first capture, and would record none of another device's kernels
        self.capture = torch.cuda.Stream(device) if device.type == "cuda" else None


class StaticBackend(Backend):
    """Static caches, the dense layout, device-side offsets per row, whole-step CUDA graphs (module docstring).

    Args:
        models: the target (sessions are kept on it), then the draft models.
        set_up: what a captured step depends on besides the tensors it reads (arms, processors' settings, EOS
            count, …): the session key, with the batch size and capacity.
        compile_options: ``torch.compile`` arguments for the forwards (steps and prefills) of every model on CUDA
            (target and draft models), or None for eager forwards (``generate(..., disable_compile=True)``).
        evidence: whether the steps gather side evidence (:mod:`~flashspec_hf.evidence`; greedy calls of a
            selector that takes it, as ``set_up`` records): the draft models' keep-current forwards keep γ columns'
            logits, and their compiled wide forwards ask for γ_max columns (:class:`StaticRunner`'s ``min_keep``).
    """

    in_flight = MAX_IN_FLIGHT

    def __init__(self, batch_size: int, vocab_size: int, gammas: list[int], device: torch.device,
                 models: list[PreTrainedModel], set_up: tuple, compile_options: dict | None = None,
                 evidence: bool = False):
        super().__init__(batch_size, vocab_size, gammas, device)
        self.cuda = device.type == "cuda"
        self.models, self.set_up, self.evidence = models, set_up, evidence
        self.compile_options = compile_options if self.cuda else None
        self.session: StaticSession | None = None
        self.behind = 2 + (KEEP_CURRENT_EVERY - 1) * (max(gammas) + 1)
        """Committed columns a draft model reads again when it catches up or is kept current (the last two, and the
        ``K - 1`` steps it may have missed; :data:`KEEP_CURRENT_EVERY`)."""
        self.steps = 0  # this call's steps so far

    def capacity(self, prompt_length: int, max_new_tokens: int) -> int:
        """Columns a dense call can need: the lead columns (:meth:`columns`), the prompt, ``max_new_tokens``, the
        ``γ`` a row's last step may commit past them before it freezes, the ``γ`` drafts every later step writes
        after a frozen row's length, and :attr:`behind` more for the arm costs' timed forwards (they start two columns
        behind, not :attr:`behind`); rounded up to :data:`CAPACITY_STEP` on CUDA."""
        needed = max(prompt_length, self.behind) + max_new_tokens + 2 * max(self.gammas) + self.behind
        return -(-needed // CAPACITY_STEP) * CAPACITY_STEP if self.cuda else needed

    def columns(self, input_ids, attention_mask, capacity, max_new_tokens) -> Columns:
        key = (self.batch_size, capacity, self.behind, *self.set_up)  # runners read `behind` columns again
        self.session = _kept_session(self.models[0], key, self.device, self.models)
        self.buffers, self.weights = self.session.buffers, self.session.weights
        lead = max(0, self.behind - input_ids.shape[1])  # a draft model's catch-up reads `behind` columns back
        return Columns(input_ids, attention_mask, capacity, max_new_tokens, self.buffers, track_host_length=False,
                       lead=lead, dense=True)

    def target_runner(self, model: PreTrainedModel, columns: Columns, window: range | None = None) -> Runner:
        runner = self._runner("target", model, columns)
        # the pending column is read with the drafts
        runner.prefill(columns, columns.start_length - 1, window, self._prefill_capture("target", model))
        return runner

    def draft_runner(self, model: PreTrainedModel, columns: Columns, source: int,
                     window: range | None = None) -> Runner:
        target = self.session.runners["target"]
        shares = is_early_exit_of(model, target.model)  # then it reads and writes the target's cache
        key = f"draft {source}"
        runner = self._runner(key, model, columns, target if shares else None)
        # two columns behind (an early exit: at the target's pending)
        runner.prefill(columns, columns.start_length - 2, window, self._prefill_capture(key, model))
        return runner

    def _prefill_capture(self, key: str, model: PreTrainedModel) -> Capture | None:
        """How runner ``key`` runs its compiled prefills: captured per shape, like a step (:meth:`_captured`; its
        host seconds count in the call's set-up, not in :attr:`warmup_seconds`), when ``model`` sits on the call's
        GPU and the prefill feeds at most :data:`MAX_CAPTURED_PREFILL_TOKENS`; else None (launched from the
        host)."""
        if not self._capturable(model):
            return None

        def capture(shape: tuple, run: Callable[[], torch.Tensor]) -> torch.Tensor:
            if self.batch_size * shape[0] > MAX_CAPTURED_PREFILL_TOKENS:
                return run()
            return self._captured(self.session.prefills, (key, *shape), run, warmup=False)

        return capture

    def _runner(self, key: str, model, columns: Columns, target: StaticRunner | None = None) -> StaticRunner:
        """The session's runner ``key``, new if none (an :class:`EarlyExitRunner` over ``target``'s cache when
        given); its forwards compiled when its model is on CUDA."""
        if key not in self.session.runners:
            shape = (model, self.vocab_size, self.batch_size, columns.capacity, self.device, self.options_for(model))
            min_keep = max(self.gammas) if self.evidence else 1  # the most logit columns a draft's wide forward keeps
            runner = (StaticRunner(*shape, behind=self.behind, min_keep=min_keep) if target is None
                      else EarlyExitRunner(*shape, target))
            self.session.runners[key] = runner
        return self.session.runners[key]

    def options_for(self, model: PreTrainedModel) -> dict | None:
        """``torch.compile`` arguments for ``model``'s forwards: the call's for a model on CUDA, else None (eager)."""
        return self.compile_options if model.device.type == "cuda" else None

    @functools.cached_property
    def graphed(self) -> bool:
        """Whether steps are captured: on CUDA, with every model on the call's GPU (read once, after the runners are
        made); a model on another GPU, or spread over devices, keeps the steps eager."""
        return all(self._capturable(r.model) for r in self.session.runners.values())

    def _capturable(self, model: PreTrainedModel) -> bool:
        """Whether ``model``'s forwards can be captured in this call's graphs: all of it on the call's GPU."""
        return self.cuda and on_one_gpu(model) and model.device == self.device

    @property
    def side_stream(self) -> torch.cuda.Stream | None:
        """The session's side stream when steps are captured (every model then sits on the call's GPU: a side stream
        of one device would not order another device's kernels); else None."""
        return self.session.side if self.graphed else None

    @property
    def keeps_current(self) -> bool:
        """Whether the next step feeds its columns to the draft models that do not draft it: every
        :data:`KEEP_CURRENT_EVERY`-th step of a call (so none is more than ``K - 1`` steps behind)."""
        return self.steps % KEEP_CURRENT_EVERY == KEEP_CURRENT_EVERY - 1

    def warming_arm(self, selector: Selector) -> int | None:
        """The first candidate without a captured step of the next step's kind (keeping the others current or not;
        CUDA graphs only): a session's first call runs every candidate's eager steps and captures, so a later switch
        of arm replays a graph instead of paying them in the middle of a call (48 ms steps against 2.7 ms on the
        H200, TinyLlama shape, B = 1). The arm is fixed before the step, from the session's state only, so the
        output distribution is unchanged."""
        if not self.graphed:
            return None
        kind = self.keeps_current
        return next((arm for arm in selector.candidates() if (arm, kind) not in self.session.graphs), None)

    def step(self, arm: int, run_step: Callable):
        """Eager for the first :data:`EAGER_USES` steps of each kind (arm, keeping the others current or not) of the
        session (or everywhere off CUDA), then captured once as a CUDA graph and replayed."""
        kind = self.keeps_current
        self.steps += 1
        if not self.graphed:
            return run_step(arm, kind)
        return self._captured(self.session.graphs, (arm, kind), lambda: run_step(arm, kind))

    def _captured(self, graphs: dict, key, run: Callable, warmup: bool = True):
        """``run()``'s outputs: eager for the session's first :data:`EAGER_USES` uses of ``key``, then captured once
        as a CUDA graph (kept in ``graphs``, in the session's memory pool) and replayed. With ``warmup``, host
        seconds of the eager uses and the capture go to :attr:`warmup_seconds`."""
        session = self.session
        session.uses[key] += 1
        start = time.perf_counter()
        if session.uses[key] <= EAGER_USES:
            outputs = run()
            self.warmup_seconds += warmup * (time.perf_counter() - start)
            return outputs
        if key not in graphs:  # graphs share the pool: a graph's outputs are read before another graph replays
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=session.pool, stream=session.capture):
                outputs = run()
            graphs[key] = (graph, outputs)
            self.warmup_seconds += warmup * (time.perf_counter() - start)
        graph, outputs = graphs[key]
        graph.replay()
        return outputs

    def commit(self, columns, output, num_accepted, report) -> None:
        """Nothing after the report: the step committed itself (:meth:`commit_in_step`)."""

    def commit_in_step(self, columns: Columns, output: torch.Tensor, num_accepted: torch.Tensor, gamma: int,
                       was_finished: torch.Tensor) -> None:
        """The step's own commit, captured with it: each row's accepted drafts and one token (rows finished before
        the step, ``was_finished`` bool ``[B]``, frozen), then the target rewound per row to one column behind the
        committed length (its pending column). Draft models are left where they are: each of their forwards in a
        step starts from the committed length (:meth:`StaticRunner.catch_up`, :meth:`StaticRunner.keep_current`;
        an early exit from the target's pending column)."""
        columns.commit(output, num_accepted, gamma + 1, frozen=was_finished)
        self.session.runners["target"].rewind(columns.length - 1)

    @staticmethod
    def unsupported(models: list[PreTrainedModel], capture_safe: bool, criteria: bool, streamer, recording: bool,
                    full_information: bool) -> str | None:
        """The first feature of a call that the static backend does not support (a phrase), or None."""
        problems = {
            "logits processors other than temperature, top-k, top-p, min-p, typical, epsilon and renormalisation "
            "(repetition penalty, n-gram bans, min length, top-h, eta, …)": not capture_safe,
            "stopping criteria other than EOS and length (stop strings, custom criteria)": criteria,
            "a streamer": streamer is not None,
            "return_dict_in_generate with scores or logits": recording,
            "a full-information selector (Hedge)": full_information,
            "sliding-window, linear-attention or other non-standard cache layers": not all(
                has_standard_static_layers(m) for m in models
            ),
            "attention implementations other than sdpa and eager (its 4D masks)": any(
                getattr(m.config, "_attn_implementation", None) not in (None, "sdpa", "eager") for m in models
            ),
        }
        return next((what for what, present in problems.items() if present), None)


def _kept_session(target: PreTrainedModel, key: tuple, device: torch.device, models: list) -> StaticSession:
    """The static session kept on ``target`` for ``key``: new if none, or if the parameters of one of ``models`` (the
    target, then the call's draft models) changed since it was built (new tensors, dtype or device), since a graph
    replays the memory it captured; the least recently used dropped beyond :data:`KEPT_SESSIONS`. A change of the
    target's own parameters drops them all at once (each holds caches of the target's dtype and device). Calls
    that alternate between pools of other draft models keep their sessions (until 2026-12-07 any other set of
    models dropped them all, and with them every compiled forward: seconds a call). A kept session holds its draft
    models (its runners): a draft the user deletes stays in memory until the session is dropped
    (:func:`clear_static_sessions`)."""
    own = parameters_fingerprint([target])
    if target.__dict__.get("_flashspec_static_fingerprint") != own:
        clear_static_sessions(target)
        target.__dict__["_flashspec_static_fingerprint"] = own
    weights = own + parameters_fingerprint(models[1:])
    sessions = target.__dict__.setdefault("_flashspec_static_sessions", {})
    session = sessions.pop(key, None)
    if session is None or session.weights != weights:
        session = StaticSession(device, weights)
    sessions[key] = session  # most recently used last
    while len(sessions) > KEPT_SESSIONS:
        sessions.pop(next(iter(sessions)))
    return session


def clear_static_sessions(model: PreTrainedModel) -> None:
    """Free the static state, caches and CUDA graphs flashspec keeps on ``model`` (rebuilt when needed), and the
    draft models its sessions hold. The compiled forwards stay on each model
    (:func:`~flashspec_hf.runners.compiled_call`; a frozen one holds a copy of the model's weights)."""
    model.__dict__.pop("_flashspec_static_sessions", None)
    model.__dict__.pop("_flashspec_static_fingerprint", None)
