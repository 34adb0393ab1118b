"""The speculative loop: one step function, written once, run by either backend (:mod:`flashspec_hf.backends`).

A step, for a batch of ``B`` rows with ragged acceptance (vocabulary in :mod:`flashspec_hf`):

1. draft: the step's arm (chosen before, from past steps only) drafts ``[B, γ]`` tokens into the columns (on the
   dynamic backend, prompt lookup drafts none where no row has a match: the step's γ is then 0);
2. target forward over the pending column and the drafts: logits ``[B, γ + 1, V]``;
3. generate's processors, position by position (:mod:`flashspec_hf.processing`): target scores;
4. verify (:mod:`flashspec_hf.verification`): accepted tokens, then one recovered or bonus token per row;
5. cut: EOS, ``max_new_tokens`` and stopping criteria end rows *inside* the block (:mod:`flashspec_hf.stopping`);
6. commit: the emitted tokens join the sequences, the verified block joins the columns (the backend decides how);
7. report: the step's counts go to the host for the selector and the statistics (:mod:`flashspec_hf.reports`).

Nothing in a captured (static) step waits for the device; the backend decides when reports are read (at once, or a
few steps late).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.profiler import record_function
from transformers import GenerationConfig, PreTrainedModel
from transformers.generation.logits_process import LogitsProcessorList
from transformers.generation.stopping_criteria import StoppingCriteriaList
from transformers.generation.utils import GenerateDecoderOnlyOutput

from .backends import Backend, DynamicBackend, StaticBackend
from .columns import Columns
from .costs import arm_costs
from .cpu_products import MAX_ROWS, few_row_products
from .drafts import (DraftContext, DraftSource, LookupOrDraft, ModelDrafts, PlainDecoding, PromptLookup,
                     prompt_agreement, prompt_window)
from .evidence import SideEvidence, score_arms
from .kernels.reference import PLACEHOLDER_TOKEN_ID
from .outputs import Recorder
from .processing import LogitsProcessing
from .reports import StepReports
from .runners import Runner
from .selection import Selector, make_selector
from .sequences import Groups, Sequences
from .stats import FlashSpecStats
from .stopping import Stopping, eos_ids, max_new_tokens, other_criteria
from .streams import fork
from .verification import verify

_step_guard = contextlib.nullcontext  # wraps each step's enqueueing; the GPU test makes it forbid synchronisation


@dataclass
class Step:
    """What one step left on the device: verified tokens int64 ``[B, γ + 1]``, accepted and emitted counts int64
    ``[B]``, finished flags bool ``[B]`` before and after it, the generated counts before it (full-information
    selection only) and the side evidence, int64 ``[A, 2]`` (:class:`~flashspec_hf.evidence.SideEvidence`), or
    None."""

    arm: int
    gamma: int
    output: torch.Tensor
    num_accepted: torch.Tensor
    num_emitted: torch.Tensor
    was_finished: torch.Tensor
    finished: torch.Tensor
    num_new_before: torch.Tensor | None
    evidence: torch.Tensor | None


@dataclass
class Run:
    """The state of one call that every step reads and updates."""

    target: Runner
    sources: list[DraftSource]
    arms: list[tuple[int, int]]
    ctx: DraftContext
    processing: LogitsProcessing
    stopping: Stopping
    reports: StepReports
    recorder: Recorder
    finished: torch.Tensor  # bool [B], updated in place
    groups: Groups  # rows by tokens generated (kept current only when processors or criteria need them)
    commit_in_step: Callable | None  # the static backend's commit, part of the step (None: after the report)
    evidence: SideEvidence | None  # gathers the side evidence of each step (None: the selector gets none)

    @property
    def columns(self) -> Columns:
        return self.ctx.columns

    @property
    def side_stream(self) -> torch.cuda.Stream | None:
        """Where the keep-current forwards, the scoring and a mixed arm's lookup run (None: in line)."""
        return self.ctx.side_stream

    @property
    def sequences(self) -> Sequences:
        return self.ctx.sequences


def speculative_step(run: Run, arm: int, keep_current: bool) -> Step:
    """Enqueue one speculative step with ``arm`` (module docstring, items 1–6; the commit too when the backend
    commits inside the step), feeding its columns to the sources that did not draft it if ``keep_current`` (the
    static backend's every :data:`~flashspec_hf.backends.KEEP_CURRENT_EVERY`-th step; the only steps that gather
    side evidence). State is updated in place, so a captured step replays correctly."""
    source, gamma = run.arms[arm]
    drafts, draft_scores = run.sources[source].propose(run.ctx, gamma)  # [B, γ], [B, γ, V] | None
    gamma = drafts.shape[1]  # fewer where the source drafted fewer (DraftContext.fewer_drafts)
    others = [o for o, other in enumerate(run.sources) if o != source and other.keeps_current] if keep_current else []
    join = fork(run.side_stream if others else None, lambda: [_keep_current(run, o, gamma) for o in others])
    logits = run.target.verify_forward(run.columns, gamma).to(drafts.device)  # [B, γ+1, V]
    target_scores = run.processing.target(logits, run.sequences, run.groups, drafts)  # [B, γ+1, V]
    output, num_accepted = verify(target_scores, drafts, draft_scores)  # [B, γ+1], [B]
    output = output.masked_fill(output == PLACEHOLDER_TOKEN_ID, run.sequences.pad_token_id)
    was_finished = run.finished.clone()  # [B]
    scored = []  # the side evidence, int64 [A, 2]: scored beside the rest of the step, which writes nothing it reads

    def score() -> None:
        scored.append(run.evidence.score(source, gamma, output, num_accepted, ~was_finished))

    join_score = fork(run.side_stream, score) if run.evidence is not None and keep_current else lambda: None
    num_emitted, finished = run.stopping.cut(output, num_accepted, target_scores, was_finished, run.sequences, run.groups)
    run.finished.copy_(finished)
    num_new_before = run.sequences.num_new.clone() if run.reports.selector.full_information else None  # [B]
    run.sequences.append(output, num_emitted)
    if run.recorder.active:
        run.recorder.add(target_scores, logits, num_emitted)
    join()
    if run.commit_in_step is not None:
        run.commit_in_step(run.columns, output, num_accepted, gamma, was_finished)
    join_score()
    evidence = scored[0] if scored else None if run.evidence is None else run.evidence.zeros  # [A, 2]
    return Step(arm, gamma, output, num_accepted, num_emitted, was_finished, finished, num_new_before, evidence)


def _keep_current(run: Run, source: int, gamma: int) -> None:
    """Keep a source that did not draft the step current, writing its guesses for the side evidence if gathered."""
    guesses = run.evidence.buffer(source) if run.evidence is not None else None
    if guesses is None:
        run.sources[source].keep_current(run.ctx, gamma)
    else:
        run.sources[source].keep_current(run.ctx, gamma, guesses=guesses)


def decode(run: Run, backend: Backend, streamer=None) -> None:
    """Run steps until every row is finished (at most ``max_new_tokens`` steps: each emits a token per active row).

    With a backend that reads each report at once, the host features run after each step: the processors' row
    groups, full-information scoring of every arm, the streamer.
    """
    host_groups = bool(run.processing.contextual or run.stopping.criteria)
    for _ in range(run.stopping.max_new_tokens):
        arm, start = run.reports.choose(backend.warming_arm(run.reports.selector))
        with _step_guard():  # enqueues the whole step; nothing here waits for the device
            step = backend.step(arm, lambda a, keep_current: speculative_step(run, a, keep_current))
            run.reports.add(arm, step.gamma, start, step.num_accepted, step.num_emitted, step.was_finished,
                            step.finished, step.evidence)
        done = run.reports.read(backend.in_flight)
        backend.commit(run.columns, step.output, step.num_accepted, run.reports.last)
        if not backend.in_flight:
            _host_features(run, step, streamer, host_groups)
        if done:
            break
    run.reports.read(0)
    if streamer is not None:
        streamer.end()


def _host_features(run: Run, step: Step, streamer, host_groups: bool) -> None:
    """After a step whose report was read at once: score every arm (full information), stream the emitted tokens,
    regroup the rows for processors and criteria."""
    report = run.reports.last
    selector = run.reports.selector
    if selector.full_information:
        successes, trials = score_arms(
            run.sources, run.arms, step.arm, step.gamma, run.ctx, step.output, step.num_accepted, ~step.was_finished,
            step.num_new_before, max(report.accepted),
        )
        selector.update_all(successes, trials)
    if streamer is not None:
        streamer.put(step.output[0, : report.emitted[0]].cpu())
    if host_groups:
        run.groups = run.sequences.groups(step.finished, report.finished)


def speculative_decode(
    model: PreTrainedModel,
    input_ids: torch.LongTensor,
    logits_processor: LogitsProcessorList,
    stopping_criteria: StoppingCriteriaList,
    generation_config: GenerationConfig,
    assistants: list[PreTrainedModel | DraftSource],
    selector: str | Selector | None,
    num_assistant_tokens: int | list[int],
    attention_mask: torch.Tensor | None = None,
    streamer=None,
    static: bool | None = None,
) -> GenerateDecoderOnlyOutput | torch.LongTensor:
    """Generate with the target ``model`` and draft ``assistants``; same distribution as ``model`` alone.

    Args:
        model: the target.
        input_ids: int64 ``[B, L]`` left-padded prompts (``attention_mask`` ``[B, L]`` marks the padding).
        logits_processor, stopping_criteria, generation_config: as prepared by ``generate``.
        assistants: draft models sharing the target's tokenizer, or other draft sources
            (:class:`~flashspec_hf.drafts.PromptLookup`).
        selector: picks the arm of each step; a name or a :class:`~flashspec_hf.selection.Selector`.
        num_assistant_tokens: ``γ`` >= 1, or several: every source is then paired with every γ (one arm each).
        streamer: a transformers streamer (batch 1), fed each step's emitted tokens.
        static: the static backend (static caches, no per-step synchronisation, CUDA graphs on the GPU; True), the
            dynamic one (False), or None: static on CUDA whenever the call needs nothing it lacks.

    Raises:
        ValueError: ``static=True`` with a feature the static backend does not support; a logits processor that
            may keep state (:class:`~flashspec_hf.processing.LogitsProcessing`).

    Returns:
        ``[B, L + N]`` sequences, or a ``GenerateDecoderOnlyOutput`` (``sequences``, ``scores``, ``logits``; no
        cache) when ``generation_config.return_dict_in_generate``. Statistics go to ``model.flashspec_stats``
        (:class:`~flashspec_hf.stats.FlashSpecStats`).
    """
    start = time.perf_counter()
    batch_size, prompt_length = input_ids.shape
    device = input_ids.device
    gammas = [num_assistant_tokens] if isinstance(num_assistant_tokens, int) else list(num_assistant_tokens)
    selector = make_selector(selector)
    if selector.cost_aware:
        assistants = [*assistants, PlainDecoding()]  # the plain-decoding arm: never slower than plain generate
    mixes = _mixes(assistants) if batch_size > 1 and not selector.full_information else []  # mixed arms' sources
    arms = [(s, 0 if isinstance(a, PlainDecoding) else g) for s, a in enumerate(assistants) for g in gammas]
    arms = list(dict.fromkeys(arms))  # (source index, γ) per arm; the plain arm once
    shared = len(arms)  # the arms of every batch size; the mixed arms follow
    arms += [(len(assistants) + m, g) for m in range(len(mixes)) for g in gammas]
    selector.ensure(len(arms), [g for _, g in arms], shared)
    selector.begin_call()
    vocab_size = model.config.get_text_config().vocab_size
    processing = LogitsProcessing(logits_processor)
    recorder = Recorder(generation_config)
    pad = generation_config._pad_token_tensor
    pad_token_id = int(pad) if pad is not None else 0
    backend = _backend(
        static, model, assistants, arms, processing, stopping_criteria, streamer, recorder, selector,
        generation_config, pad_token_id, batch_size, vocab_size, device,
    )
    limit = max_new_tokens(stopping_criteria, generation_config.max_length, prompt_length)
    capacity = backend.capacity(prompt_length, limit)
    columns = backend.columns(input_ids, attention_mask, capacity, limit)  # picks the backend's buffers
    stopping = Stopping(stopping_criteria, limit, backend.buffers)
    sequences = Sequences(input_ids, capacity, pad_token_id, backend.buffers)
    window = prompt_window(columns) if selector.wants_prior else None  # prompt columns the sources are scored on
    with record_function("flashspec.prefill"):  # host phases, named for torch.profiler (benchmarks.e2e_bench)
        target = backend.target_runner(model, columns, window)
        sources = [
            a if isinstance(a, DraftSource) else ModelDrafts(backend.draft_runner(a, columns, i, window), vocab_size)
            for i, a in enumerate(assistants)
        ]
    sources += [LookupOrDraft(sources[lookup], sources[draft]) for lookup, draft in mixes]
    names = _arm_names(sources, arms, several_gammas=len(gammas) > 1)
    stats = FlashSpecStats(names, max(gammas), [g for _, g in arms])
    evidence = SideEvidence(sources, arms, batch_size, max(gammas), backend.buffers) if backend.evidence else None
    finished = backend.buffers.full("finished", (batch_size,), False, torch.bool)  # [B]
    groups = sequences.groups(finished, [False] * batch_size) if processing.contextual or stopping.criteria else []

    def process_draft(logits: torch.Tensor, drafted: torch.Tensor) -> torch.Tensor:
        return processing.draft(logits, sequences, run.groups, drafted)

    run = Run(
        target=target,
        sources=sources,
        arms=arms,
        ctx=DraftContext(columns, sequences, process_draft, vocab_size, generation_config.do_sample,
                         fewer_drafts=not isinstance(backend, StaticBackend), side_stream=backend.side_stream,
                         plain_greedy=not generation_config.do_sample and processing.is_identity),
        processing=processing,
        stopping=stopping,
        reports=StepReports(selector, stats, sequences, device, stopping.max_new_tokens),
        recorder=recorder,
        finished=finished,
        groups=groups,
        commit_in_step=backend.commit_in_step if isinstance(backend, StaticBackend) else None,
        evidence=evidence,
    )
    rows = min(batch_size * (max(gammas) + 1), MAX_ROWS)  # a verification forward's
    with few_row_products([model, *(a for a in assistants if isinstance(a, PreTrainedModel))], rows):  # CPU only
        if selector.cost_aware:
            with record_function("flashspec.arm_costs"):
                selector.set_costs(arm_costs(target, sources, arms, columns, type(backend).__name__,
                                             side_stream=run.side_stream, evidence=evidence is not None,
                                             graphed=backend.graphed, weights=backend.weights))
        if window is not None:
            with record_function("flashspec.prior"):
                selector.prior(*prompt_agreement(target, sources, arms, run.ctx, window))
        stats.setup_seconds = time.perf_counter() - start
        with record_function("flashspec.steps"):
            decode(run, backend, streamer)

    stats.new_tokens = sum(sequences.num_new_host)
    stats.seconds = time.perf_counter() - start
    stats.warmup_seconds = backend.warmup_seconds
    model.flashspec_stats = stats
    if not generation_config.return_dict_in_generate:
        return sequences.result()
    return recorder.output(sequences.result())


def _mixes(assistants: list) -> list[tuple[int, int]]:
    """``(prompt lookup, draft model)`` index pairs of the pool that make a mixed arm
    (:class:`~flashspec_hf.drafts.LookupOrDraft`): every draft model with every prompt lookup whose
    ``mix_min_match`` is set. Offered at batch > 1 only: a mixed arm pays off when rows differ (the slowest sets the
    steps); at batch 1 it is a per-step switch between two arms the selector already has, and only adds arms to
    explore."""
    lookups = [i for i, a in enumerate(assistants) if isinstance(a, PromptLookup) and a.mix_min_match is not None]
    return [(i, j) for i in lookups for j, a in enumerate(assistants) if isinstance(a, PreTrainedModel)]


def _backend(static, model, assistants, arms, processing, stopping_criteria, streamer, recorder, selector,
             generation_config, pad_token_id, batch_size, vocab_size, device) -> Backend:
    """The call's backend: static when asked or, with ``static=None``, on CUDA when the call needs nothing it lacks.

    Raises:
        ValueError: ``static=True`` with a feature the static backend does not support.
    """
    gammas = sorted({g for _, g in arms})
    models = [model] + [a for a in assistants if isinstance(a, PreTrainedModel)]
    criteria = other_criteria(stopping_criteria)
    if not _use_static(static, device, models, processing, criteria, streamer, recorder, selector):
        return DynamicBackend(batch_size, vocab_size, gammas, device)
    # what a captured step depends on besides the tensors it reads: the session key (sources with tensors of
    # their own, such as a user's DraftSource, by identity; models by identity, their weights by fingerprint)
    sources = tuple(repr(vars(a)) if isinstance(a, (PromptLookup, PlainDecoding)) else id(a) for a in assistants)
    warpers = tuple((type(w).__name__, repr(vars(w))) for w in processing.warpers)
    eos = eos_ids(stopping_criteria)
    compile_options = _compile_options(generation_config)
    set_up = (sources, tuple(arms), warpers, generation_config.do_sample, selector.side_evidence, pad_token_id,
              None if eos is None else eos.numel(), repr(compile_options), os.environ.get("FLASHSPEC_VERIFIER"))
    evidence = selector.side_evidence and not generation_config.do_sample  # greedy only (flashspec_hf.evidence)
    return StaticBackend(batch_size, vocab_size, gammas, device, models, set_up, compile_options, evidence)


def _use_static(static: bool | None, device: torch.device, models, processing, criteria, streamer, recorder,
                selector) -> bool:
    """Whether the call runs on the static backend: when asked (``static=True``), or, with ``static=None``, on CUDA
    when the call needs nothing it lacks.

    Raises:
        ValueError: ``static=True`` with a feature the static backend does not support.
    """
    if static is False or (static is None and device.type != "cuda"):
        return False
    unsupported = StaticBackend.unsupported(
        models, processing.capture_safe, bool(criteria), streamer, recorder.active, selector.full_information
    )
    if static and unsupported:
        raise ValueError(
            f"cache_implementation='static' does not support {unsupported}; drop it, or pass "
            "cache_implementation='dynamic' (or nothing) for flashspec's dynamic loop"
        )
    return unsupported is None


def _compile_options(generation_config: GenerationConfig) -> dict | None:
    """``torch.compile`` arguments for the static backend's captured target forwards: generate's ``compile_config``
    (its ``mode`` aside: flashspec captures the CUDA graphs itself), or None when ``disable_compile=True``."""
    if generation_config.disable_compile:
        return None
    config = generation_config.compile_config
    return {} if config is None else {k: v for k, v in config.to_dict().items() if v is not None}


def _arm_names(sources: list[DraftSource], arms: list[tuple[int, int]], several_gammas: bool) -> list[str]:
    """One distinct name per arm: its source's ``name`` (a mixed arm's: its sources', joined by ``+``; ``#i``
    appended when two sources share one), with ``@γ`` appended when several γ were given (not to the plain-decoding
    arm's)."""
    names = [s.name or f"assistant_{i}" for i, s in enumerate(sources)]
    names = [f"{names[sources.index(s.prompt_lookup)]}+{names[sources.index(s.model)]}"
             if isinstance(s, LookupOrDraft) else n for n, s in zip(names, sources)]
    names = [n if names.count(n) == 1 else f"{n}#{i}" for i, n in enumerate(names)]
    return [f"{names[s]}@{g}" if several_gammas and g else names[s] for s, g in arms]
