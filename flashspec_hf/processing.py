"""generate's logits processors applied position by position to ragged rows, as stock assisted decoding does.

Stock assisted decoding calls the prepared processor list once per verified position with the drafted prefix
(``logits_processor(candidate_input_ids[:, :cur_len + i], new_logits[:, i])``), so prefix-dependent processors
(repetition penalty, no-repeat n-grams, min-length, …) see what the target would have seen token by token.

Here rows may have generated different numbers of tokens. The processors run once per *group* of active rows
with the same count, on the whole batch, and only the group's rows keep the result: each row sees exactly its own
``input_ids`` (left-padded prompt + its tokens), with its own length, as in stock batched ``generate``, and batch
indices stay those of the call (``prefix_allowed_tokens_fn`` gets the right ``batch_id``). At batch 1 there is one
group. A trailing run of context-free warpers (temperature, top-k, top-p, …) runs once on all positions together.
"""

from __future__ import annotations

import torch
from transformers.generation.logits_process import (
    EpsilonLogitsWarper,
    EtaLogitsWarper,
    LogitsProcessorList,
    MinPLogitsWarper,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
    TypicalLogitsWarper,
)

from .sequences import Groups, Sequences

_CONTEXT_FREE = (
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
    MinPLogitsWarper,
    TypicalLogitsWarper,
    EpsilonLogitsWarper,
    EtaLogitsWarper,
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
        token after ``row ++ drafts[:, :i]`` (``drafts`` int64 ``[B, γ]``)."""
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
            row_ids = sequences.prefix(generated)  # [B, L + generated]
            for i in range(scores.shape[1]):
                ids = torch.cat([row_ids, after[:, : offset + i]], dim=1)
                row = scores[:, i] if rows is None else scores[:, i].clone()
                for proc in self.contextual:
                    row = proc(ids, row)
                scores[:, i] = row if rows is None else torch.where(rows, row, scores[:, i])
        if self.warpers:
            flat = scores.view(-1, scores.shape[-1])  # [B * P, V]
            for proc in self.warpers:
                flat = proc(None, flat)
            scores = flat.view_as(scores)
        return scores
