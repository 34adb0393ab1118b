"""generate's logits processors applied position by position to ragged rows, as stock assisted decoding does.

Stock assisted decoding calls the prepared processor list once per verified position with the drafted prefix
(``logits_processor(candidate_input_ids[:, :cur_len + i], new_logits[:, i])``), so prefix-dependent processors
(repetition penalty, no-repeat n-grams, min-length, …) see what the target would have seen token by token.

Which processors flashspec runs: it calls each processor once per draft position and per verified position, on
subsets of the batch, so a processor must keep no state across calls and compute each output row from its own
input row alone. The transformers processors known to do so are listed in :data:`STATELESS_PROCESSORS` (exact
classes: a subclass may add state). Any other processor — classifier-free guidance (``guidance_scale``, it keeps
the unconditional branch's cache), SynthID watermarking (it keeps the n-gram context), a user's processor — is
refused with a ``ValueError`` naming it, unless it carries ``flashspec_stateless = True`` (its author's promise
that it is stateless and row-wise).

Which rows and prefixes a processor sees: rows may have generated different numbers of tokens. The processors run
once per *group* of active rows with the same count, on those rows only, so each row sees exactly its own
``input_ids`` (left-padded prompt + its tokens), with its own length, as in stock batched ``generate``; a
processor that holds per-row data of the call gets it narrowed to the rows it is given (``prefix_allowed_tokens_fn``
still receives the row's batch index in the call, repetition penalty its per-row prompt padding). Finished rows are
not processed. Position ``i`` of a step is processed only for the rows whose drafts before it every processor
allowed (a finite score): at the other rows a draft before ``i`` is certainly rejected, so position ``i`` is never
used and a processor is never asked about a prefix it forbade (a prompt-lookup draft outside a constraint is simply
rejected). A trailing run of context-free warpers (temperature, top-k, top-p, …) runs once on all positions.
"""

from __future__ import annotations

import copy

import torch
from transformers.generation.logits_process import (
    EpsilonLogitsWarper,
    EtaLogitsWarper,
    ExponentialDecayLengthPenalty,
    ForcedBOSTokenLogitsProcessor,
    ForcedEOSTokenLogitsProcessor,
    InfNanRemoveLogitsProcessor,
    LogitNormalization,
    LogitsProcessorList,
    MinLengthLogitsProcessor,
    MinNewTokensLengthLogitsProcessor,
    MinPLogitsWarper,
    NoBadWordsLogitsProcessor,
    NoRepeatNGramLogitsProcessor,
    PrefixConstrainedLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
    SequenceBiasLogitsProcessor,
    SuppressTokensAtBeginLogitsProcessor,
    SuppressTokensLogitsProcessor,
    TemperatureLogitsWarper,
    TopHLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
    TypicalLogitsWarper,
    WatermarkLogitsProcessor,
)

from .sequences import Groups, Sequences

_CONTEXT_FREE = (
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
    TopHLogitsWarper,
    MinPLogitsWarper,
    TypicalLogitsWarper,
    EpsilonLogitsWarper,
    EtaLogitsWarper,
    LogitNormalization,
)

CAPTURE_SAFE_WARPERS = (
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
    MinPLogitsWarper,
    TypicalLogitsWarper,
    EpsilonLogitsWarper,
    LogitNormalization,
)
"""Warpers whose work is device-only and whose settings are host numbers: a CUDA graph can capture them (top-h and
eta build a ``torch.distributions.Categorical``, whose argument check reads the device; eta also keeps a tensor
made per call)."""

STATELESS_PROCESSORS = frozenset(
    {
        *_CONTEXT_FREE,
        MinLengthLogitsProcessor,
        MinNewTokensLengthLogitsProcessor,
        RepetitionPenaltyLogitsProcessor,  # 5.24: per-row prompt padding, narrowed by _for_rows
        NoRepeatNGramLogitsProcessor,
        SequenceBiasLogitsProcessor,  # prepares its bias tensors on the first call, the same on every call
        NoBadWordsLogitsProcessor,
        PrefixConstrainedLogitsProcessor,  # batch index mapped by _for_rows
        ForcedBOSTokenLogitsProcessor,
        ForcedEOSTokenLogitsProcessor,
        InfNanRemoveLogitsProcessor,
        ExponentialDecayLengthPenalty,
        SuppressTokensLogitsProcessor,
        SuppressTokensAtBeginLogitsProcessor,
        WatermarkLogitsProcessor,  # reseeds its generator from each row's last tokens at every call
    }
)
"""transformers processors (read from ``generation/logits_process.py``, 5.17 and 5.24) that keep no state across
calls and compute each row from its own input row: flashspec may call them per position and on subsets of rows.
Left out: those that keep state (``UnbatchedClassifierFreeGuidanceLogitsProcessor``,
``SynthIDTextWatermarkLogitsProcessor``, ``WhisperNoSpeechDetection``, ``DiaEOSDelayPatternLogitsProcessor``),
that mix rows (``ClassifierFreeGuidanceLogitsProcessor``), that hold encoder inputs (encoder-decoder models are
refused anyway), and other model-specific ones (Whisper, Bark, Dia)."""


class LogitsProcessing:
    """The prepared processor list, split into prefix-dependent processors and a trailing run of warpers.

    Args:
        logits_processor: the list generate prepared (processors and warpers).

    Raises:
        ValueError: a processor that is neither in :data:`STATELESS_PROCESSORS` nor marked ``flashspec_stateless``.
    """

    def __init__(self, logits_processor: LogitsProcessorList):
        processors = list(logits_processor)
        unknown = sorted(
            {type(p).__name__ for p in processors if not (type(p) in STATELESS_PROCESSORS or _marked_stateless(p))}
        )
        if unknown:
            raise ValueError(
                f"flashspec cannot run {', '.join(unknown)}: it calls logits processors once per draft and verified "
                "position and on subsets of rows, so a processor that keeps state across calls (classifier-free "
                "guidance from guidance_scale, SynthID watermarking, counters) would change the output. Drop "
                "flashspec=True or the processor; if the processor keeps no state and computes each row from its own "
                "row, set flashspec_stateless = True on it (or its class)"
            )
        split = len(processors)
        while split > 0 and isinstance(processors[split - 1], _CONTEXT_FREE):
            split -= 1
        self.contextual = processors[:split]
        self.warpers = processors[split:]

    @property
    def capture_safe(self) -> bool:
        """True when every processor is a warper of :data:`CAPTURE_SAFE_WARPERS` (what the static backend runs)."""
        return not self.contextual and all(type(w) in CAPTURE_SAFE_WARPERS for w in self.warpers)

    @property
    def is_identity(self) -> bool:
        """True when processing would return the logits unchanged (greedy with no processors)."""
        return not (self.contextual or self.warpers)

    def draft(self, logits: torch.Tensor, sequences: Sequences, groups: Groups, drafted: torch.Tensor) -> torch.Tensor:
        """Draft scores ``q`` float32 ``[B, 1, V]`` from draft logits ``[B, 1, V]`` predicting the token after
        ``row ++ drafted`` (``drafted`` int64 ``[B, i]``, the step's draft tokens so far)."""
        return self._process(logits, sequences, groups, drafted, offset=drafted.shape[1])

    def target(self, logits: torch.Tensor, sequences: Sequences, groups: Groups, drafts: torch.Tensor) -> torch.Tensor:
        """Target scores float32 ``[B, γ + 1, V]`` from target logits ``[B, γ + 1, V]``: position ``i`` predicts the
        token after ``row ++ drafts[:, :i]`` (``drafts`` int64 ``[B, γ]``). Positions after a draft the processors
        forbid keep their unprocessed logits (verification never uses them)."""
        return self._process(logits, sequences, groups, drafts, offset=0)

    def _process(
        self, logits: torch.Tensor, sequences: Sequences, groups: Groups, after: torch.Tensor, offset: int
    ) -> torch.Tensor:
        """Process ``P`` consecutive positions of every row: position ``i`` predicts the token after
        ``row ++ after[:, :offset + i]`` (``after`` int64 ``[B, >= offset + P - 1]``, draft tokens); returns float32
        ``[B, P, V]`` (``-inf`` where a processor forbids a token); without processors, ``logits`` themselves."""
        if self.is_identity:
            return logits
        scores = logits.float()  # [B, P, V], a copy when the logits are bf16/fp16
        if scores.data_ptr() == logits.data_ptr():
            scores = scores.clone()
        for generated, rows in groups if self.contextual else []:
            self._process_group(scores, sequences.prefix(generated), rows, after, offset)
        if self.warpers:
            flat = scores.view(-1, scores.shape[-1])  # [B * P, V]
            for proc in self.warpers:
                flat = proc(None, flat)
            scores = flat.view_as(scores)
        return scores

    def _process_group(
        self, scores: torch.Tensor, prefix: torch.Tensor, rows: torch.Tensor | None, after: torch.Tensor, offset: int
    ) -> None:
        """Apply the prefix-dependent processors in place to ``scores`` ``[B, P, V]`` of one group: ``rows`` bool
        ``[B]`` (None: every row), each row's tokens ``prefix`` int64 ``[B, L + generated]``. Position ``i > 0`` is
        processed for the rows whose token ``after[:, offset + i - 1]`` got a finite score at position ``i - 1``
        (one host read of those rows per position)."""
        live = rows  # bool [B] or None (every row)
        for i in range(scores.shape[1]):
            if i:
                drafted = after[:, offset + i - 1, None]  # [B, 1]
                allowed = scores[:, i - 1].gather(1, drafted)[:, 0] > float("-inf")  # [B]
                live = allowed if live is None else live & allowed
            ids = torch.cat([prefix, after[:, : offset + i]], dim=1)  # [B, L + generated + offset + i]
            if live is None:
                scores[:, i] = self._apply(ids, scores[:, i], None)
                continue
            index = live.nonzero()[:, 0]  # [R] (a host synchronisation)
            if not len(index):
                return
            scores[index, i] = self._apply(ids[index], scores[index, i], index.tolist())

    def _apply(self, ids: torch.Tensor, scores: torch.Tensor, rows: list[int] | None) -> torch.Tensor:
        """The prefix-dependent processors on ``ids`` int64 ``[R, n]`` and ``scores`` float32 ``[R, V]``: the
        call's rows ``rows`` (None: all of them, in order)."""
        for proc in self.contextual:
            scores = (proc if rows is None else _for_rows(proc, rows))(ids, scores)
        return scores


def _marked_stateless(processor) -> bool:
    return getattr(processor, "flashspec_stateless", False) is True


def _for_rows(processor, rows: list[int]):
    """``processor`` as it acts on the call's rows ``rows`` alone: per-row data of the call narrowed to them."""
    if type(processor) is PrefixConstrainedLogitsProcessor:
        allowed, beams = processor._prefix_allowed_tokens_fn, processor._num_beams
        return PrefixConstrainedLogitsProcessor(lambda r, ids: allowed(rows[r] // beams, ids), num_beams=1)
    if type(processor) is RepetitionPenaltyLogitsProcessor and isinstance(processor.prompt_ignore_length, torch.Tensor):
        narrowed = copy.copy(processor)
        narrowed.prompt_ignore_length = processor.prompt_ignore_length[rows]
        return narrowed
    return processor
