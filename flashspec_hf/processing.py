"""generate's logits processors applied position by position to ragged rows, as stock assisted decoding does.

Stock assisted decoding calls the prepared processor list once per verified position with the drafted prefix
(``logits_processor(candidate_input_ids[:, :cur_len + i], new_logits[:, i])``), so prefix-dependent processors
(repetition penalty, no-repeat n-grams, min-length, …) see what the target would have seen token by token.

Rows may have generated different numbers of tokens. The processors run once per *group* of active rows with the
same count, on those rows only, so each row sees exactly its own ``input_ids`` (left-padded prompt + its tokens),
with its own length, as in stock batched ``generate``; a processor that holds per-row data of the call gets it
narrowed to the rows it is given (``prefix_allowed_tokens_fn`` still receives the row's batch index in the call,
repetition penalty its per-row prompt padding). Finished rows are not processed. Position ``i`` of a step is
processed only for the rows whose drafts before it every processor allowed (a finite score): at the other rows a
draft before ``i`` is certainly rejected, so position ``i`` is never used and a processor is never asked about a
prefix it forbade (a prompt-lookup draft outside a constraint is simply rejected). A trailing run of context-free
warpers (temperature, top-k, top-p, …) runs once on all positions.
"""

from __future__ import annotations

import copy

import torch
from transformers.generation.logits_process import (
    EpsilonLogitsWarper,
    EtaLogitsWarper,
    LogitNormalization,
    LogitsProcessorList,
    MinPLogitsWarper,
    PrefixConstrainedLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopHLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
    TypicalLogitsWarper,
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


class LogitsProcessing:
    """The prepared processor list, split into prefix-dependent processors and a trailing run of warpers.

    Args:
        logits_processor: the list generate prepared (processors and warpers).
    """

    def __init__(self, logits_processor: LogitsProcessorList):
        processors = list(logits_processor)
        split = len(processors)
        while split > 0 and isinstance(processors[split - 1], _CONTEXT_FREE):
            split -= 1
        self.contextual = processors[:split]
        self.warpers = processors[split:]

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
