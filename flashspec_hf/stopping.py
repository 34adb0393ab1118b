"""Where each row stops: EOS, the length limit and generate's other stopping criteria, applied at every emitted
position of a verified block (a stop in the middle of a block ends the row there)."""

from __future__ import annotations

import torch
from transformers.generation.stopping_criteria import EosTokenCriteria, MaxLengthCriteria, StoppingCriteriaList

from .buffers import Buffers
from .sequences import Groups, Sequences


class Stopping:
    """generate's stopping criteria, split into what is applied per row inside a block and what is checked per
    position.

    ``EosTokenCriteria`` and ``MaxLengthCriteria`` (generate's or the user's) read ``input_ids.shape[-1]`` or only
    the last token; their parameters (EOS ids, ``max_length``) are applied per emitted position instead. The other
    criteria (stop strings, custom ones) are called position by position on each row's own tokens.

    Args:
        stopping_criteria: the list generate prepared.
        max_new_tokens: tokens each row may generate (:func:`max_new_tokens`).
        buffers: where the EOS ids and the limit live (:class:`~flashspec_hf.buffers.Buffers`).

    Attributes:
        eos: int64 ``[E]`` EOS ids or None; max_new_tokens: tokens each row may generate (host), limit: the same as
            an int64 ``[]`` device tensor (what steps read); criteria: the rest.
    """

    def __init__(self, stopping_criteria: StoppingCriteriaList, max_new_tokens: int, buffers: Buffers):
        eos = eos_ids(stopping_criteria)
        self.criteria = other_criteria(stopping_criteria)
        self.eos = buffers.like("stopping.eos", eos.to(buffers.device)) if eos is not None else None
        self.max_new_tokens = max_new_tokens
        self.limit = buffers.full("stopping.limit", (), self.max_new_tokens, torch.long)

    def cut(
        self,
        output: torch.Tensor,
        num_accepted: torch.Tensor,
        target_scores: torch.Tensor,
        finished: torch.Tensor,
        sequences: Sequences,
        groups: Groups,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Tokens each row keeps of its ``[B, γ + 1]`` verified block, and which rows are finished afterwards.

        A row keeps ``accepted + 1`` tokens, cut after the first EOS, at ``max_new_tokens``, and after the first
        position where a stopping criterion fires; finished rows keep none.

        Args:
            output: int64 ``[B, γ + 1]``; num_accepted: int64 ``[B]``; target_scores: ``[B, γ + 1, V]`` (what
                the criteria see as ``scores``); finished: bool ``[B]`` before the step; sequences, groups: the
                rows so far and their groups (criteria only).

        Returns:
            num_emitted int64 ``[B]``, finished bool ``[B]``.
        """
        width = output.shape[1]
        pos = torch.arange(width, device=output.device)  # [γ+1]
        num_emitted = torch.minimum(num_accepted + 1, self.limit - sequences.num_new)  # [B]
        num_emitted = num_emitted.masked_fill(finished, 0)
        ended = finished.clone()
        if self.eos is not None:
            is_eos = (output.unsqueeze(-1) == self.eos).any(-1) & (pos < num_emitted.unsqueeze(1))  # [B, γ+1] (isin syncs)
            first = torch.where(is_eos, pos, width).amin(dim=1)  # [B]
            ended |= first < width
            num_emitted = torch.minimum(num_emitted, first + 1)
        for generated, rows in groups if self.criteria else []:
            for i in range(width):
                ids = torch.cat([sequences.prefix(generated), output[:, : i + 1]], dim=1)
                hit = self.criteria(ids, target_scores[:, i]) & (i < num_emitted)
                hit = hit if rows is None else hit & rows
                num_emitted = torch.where(hit, i + 1, num_emitted)
                ended |= hit
        ended |= sequences.num_new + num_emitted >= self.limit
        return num_emitted, ended


def other_criteria(stopping_criteria: StoppingCriteriaList) -> StoppingCriteriaList:
    """The criteria checked position by position: all but ``EosTokenCriteria`` and ``MaxLengthCriteria``."""
    return StoppingCriteriaList(
        [c for c in stopping_criteria if not isinstance(c, (EosTokenCriteria, MaxLengthCriteria))]
    )


def eos_ids(stopping_criteria: StoppingCriteriaList) -> torch.Tensor | None:
    """int64 ``[E]``: the EOS ids of every ``EosTokenCriteria`` (generate's or the user's), or None."""
    ids = [c.eos_token_id.flatten() for c in stopping_criteria if isinstance(c, EosTokenCriteria)]
    return torch.cat(ids) if ids else None


def max_new_tokens(stopping_criteria: StoppingCriteriaList, default_max_length: int, prompt_length: int) -> int:
    """Tokens each row may generate: the smallest ``MaxLengthCriteria.max_length`` (else ``default_max_length``)
    minus the prompt's ``L`` columns."""
    lengths = [c.max_length for c in stopping_criteria if isinstance(c, MaxLengthCriteria)]
    return min(lengths, default=default_max_length) - prompt_length
