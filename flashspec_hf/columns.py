"""The column layout that the target and every draft model's KV cache share, for ragged acceptance at batch > 1.

Every token any model has cached sits in a *column*; column ``j`` of every row is the ``j``-th cache slot of every
model. The first ``length`` columns are *committed*: the prompt, then each step's columns. A step writes its draft
tokens after them (:meth:`Columns.write_drafts`) and, once verified, :meth:`Columns.commit` appends ``width``
columns to every row: the first ``width - 1`` draft columns, of which each row keeps its accepted ones and turns the
rest into *holes* (masked out of attention, skipped by position ids), then the row's recovered or bonus token, the
new *pending* column (emitted, not yet fed to the target).

How wide a step's commit is depends on the backend (:mod:`flashspec_hf.backends`): ``γ + 1`` columns (known on the
host without reading the device) or the batch's largest accepted count plus one (no hole at batch 1). Each model's
cache covers a prefix of the columns (:mod:`flashspec_hf.runners`); a model catches up by feeding the columns it
has not seen, so a draft model that was not picked for a while re-reads the accepted tokens in one forward.
"""

from __future__ import annotations

import torch


class Columns:
    """Token, validity and position of every column, in buffers allocated once per call.

    Args:
        input_ids: int64 ``[B, L]`` left-padded prompts; ``attention_mask`` ``[B, L]`` (1 = token) or None.
        capacity: ``N``, columns to allocate: the prompt, every step's commit and one step's drafts.
        max_new_tokens: tokens a row may generate; positions are clamped to the last position an emitted token can
            have (``L - 1 + max_new_tokens``), so drafts past the end and finished rows never index past it.

    Attributes:
        tokens: int64 ``[B, N]``; positions: int64 ``[B, N]`` (padding 1, as transformers' ``generate``; holes keep
            their draft's position, masked); valid: bool ``[B, N]`` (False for padding and holes).
        length: committed columns ``T`` (host int); column ``T - 1`` is each row's pending token.
        all_valid: host flag, True while no committed column is padding or a hole: models then get no attention
            mask and build their own causal one (which sliding-window layers need in transformers 5.17).
    """

    def __init__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, capacity: int, max_new_tokens: int):
        batch_size, self.length = input_ids.shape
        device = input_ids.device
        valid = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
        self.tokens = torch.zeros(batch_size, capacity, dtype=torch.long, device=device)  # [B, N]
        self.valid = torch.zeros(batch_size, capacity, dtype=torch.bool, device=device)  # [B, N]
        self.positions = torch.ones(batch_size, capacity, dtype=torch.long, device=device)  # [B, N]
        self.tokens[:, : self.length] = input_ids
        self.valid[:, : self.length] = valid
        self.positions[:, : self.length] = (valid.long().cumsum(-1) - 1).masked_fill(~valid, 1)
        self.pending_position = self.positions[:, self.length - 1].clone()  # [B]
        self.max_position = self.length - 1 + max_new_tokens
        self.all_valid = bool(valid.all())
        self.index = torch.arange(capacity, device=device)  # [N]

    @property
    def capacity(self) -> int:
        """``N``, allocated columns."""
        return self.tokens.shape[1]

    def write_drafts(self, drafts: torch.Tensor, offset: int = 0) -> None:
        """Place draft tokens int64 ``[B, k]`` (numbers ``offset … offset + k - 1`` of the step) at columns
        ``[T + offset, T + offset + k)``, valid, at consecutive positions after the pending token."""
        first, last = self.length + offset, self.length + offset + drafts.shape[1]
        steps = torch.arange(offset + 1, offset + drafts.shape[1] + 1, device=drafts.device)  # [k]
        self.tokens[:, first:last] = drafts
        self.valid[:, first:last] = True
        self.positions[:, first:last] = (self.pending_position.unsqueeze(1) + steps).clamp(max=self.max_position)

    def commit(self, output: torch.Tensor, num_accepted: torch.Tensor, width: int, holes: bool = True) -> None:
        """Append ``width`` columns after verification: the first ``width - 1`` draft columns (rejected ones
        become holes), then the recovered or bonus token as the new pending column.

        Args:
            output: int64 ``[B, γ + 1]`` verified tokens (accepted, then the recovered or bonus token).
            num_accepted: int64 ``[B]``, each at most ``width - 1``.
            width: columns appended, ``1 <= width <= γ + 1``.
            holes: whether some row accepted fewer than ``width - 1`` (False only if known on the host).
        """
        pending = self.length + width - 1
        drafted = torch.arange(width - 1, device=output.device)  # [w - 1]
        self.valid[:, self.length : pending] = drafted < num_accepted.unsqueeze(1)
        self.tokens[:, pending] = output.gather(1, num_accepted.unsqueeze(1)).squeeze(1)
        self.valid[:, pending] = True
        self.pending_position = self.pending_position + num_accepted + 1
        self.positions[:, pending] = self.pending_position.clamp(max=self.max_position)
        self.length = pending + 1
        self.all_valid = self.all_valid and not holes

    def attention_mask_2d(self, end: int) -> torch.Tensor | None:
        """bool ``[B, end]`` padding/hole mask of the first ``end`` columns for a model that builds its own causal
        mask, or None while no committed column is invalid (drafts past ``T`` are always valid)."""
        return None if self.all_valid else self.valid[:, :end]

    def attention_mask_4d(self, start: int, width: int, dtype: torch.dtype) -> torch.Tensor:
        """Additive mask ``[B, 1, width, N]`` for queries at columns ``[start, start + width)`` over every column:
        0 where the key column is valid and not after the query, the dtype's minimum elsewhere."""
        queries = self.index[start : start + width].unsqueeze(-1)  # [w, 1]
        allowed = self.valid.unsqueeze(1) & (self.index <= queries)  # [B, w, N]
        zero = torch.zeros((), dtype=dtype, device=allowed.device)
        return torch.where(allowed, zero, torch.finfo(dtype).min).unsqueeze(1)
