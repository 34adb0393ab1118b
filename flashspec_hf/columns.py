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

from .buffers import Buffers


class Columns:
    """Token, validity and position of every column, in buffers allocated once per call.

    Everything a step changes lives on the device, so a step can be captured once as a CUDA graph and replayed:
    the committed length too. A backend that knows each step's width on the host also keeps a host copy of the
    length (``track_host_length``) and slices with it.

    Args:
        input_ids: int64 ``[B, L]`` left-padded prompts; ``attention_mask`` ``[B, L]`` (1 = token) or None.
        capacity: ``N``, columns to allocate: the prompt, every step's commit and one step's drafts.
        max_new_tokens: tokens a row may generate; positions are clamped to the last position an emitted token can
            have (``L - 1 + max_new_tokens``), so drafts past the end and finished rows never index past it.
        buffers: where the tensors live (:class:`~flashspec_hf.buffers.Buffers`).
        track_host_length: keep :attr:`host_length` (the dynamic backend).
        lead: masked padding columns put before the prompt (the static backend keeps every draft model two columns
            behind the committed length, which needs ``L + lead >= 2``).

    Attributes:
        tokens: int64 ``[B, N]``; positions: int64 ``[B, N]`` (padding 1, as transformers' ``generate``; holes keep
            their draft's position, masked); valid: bool ``[B, N]`` (False for padding and holes).
        length: int64 ``[]`` committed columns ``T`` (device); column ``T - 1`` is each row's pending token.
        host_length: ``T`` on the host, or None when not tracked; start_length: ``T`` before the first step.
        pending_position: int64 ``[B]`` position of each row's pending token; max_position: int64 ``[]``.
        all_valid: host flag, True while no committed column is padding or a hole: models then get no attention
            mask and build their own causal one (which sliding-window layers need in transformers 5.17).
    """

    def __init__(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        capacity: int,
        max_new_tokens: int,
        buffers: Buffers,
        track_host_length: bool = True,
        lead: int = 0,
    ):
        batch_size, prompt_length = input_ids.shape
        end = lead + prompt_length
        valid = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
        self.tokens = buffers.full("columns.tokens", (batch_size, capacity), 0, torch.long)  # [B, N]
        self.valid = buffers.full("columns.valid", (batch_size, capacity), False, torch.bool)  # [B, N]
        self.positions = buffers.full("columns.positions", (batch_size, capacity), 1, torch.long)  # [B, N]
        self.tokens[:, lead:end] = input_ids
        self.valid[:, lead:end] = valid
        self.positions[:, lead:end] = (valid.long().cumsum(-1) - 1).masked_fill(~valid, 1)
        self.pending_position = buffers.like("columns.pending_position", self.positions[:, end - 1])  # [B]
        self.max_position = buffers.full("columns.max_position", (), prompt_length - 1 + max_new_tokens, torch.long)
        self.length = buffers.full("columns.length", (), end, torch.long)  # []
        self.index = buffers.like("columns.index", torch.arange(capacity, device=buffers.device))  # [N]
        self.host_length = end if track_host_length else None
        self.start_length = end
        self.all_valid = lead == 0 and bool(valid.all())

    @property
    def capacity(self) -> int:
        """``N``, allocated columns."""
        return self.tokens.shape[1]

    def read(self, start: int | torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Tokens and positions int64 ``[B, width]`` of columns ``[start, start + width)`` (``start`` a host int or
        an int64 ``[]`` device tensor)."""
        if isinstance(start, int):
            return self.tokens[:, start : start + width], self.positions[:, start : start + width]
        index = (start + self.index[:width]).expand(self.tokens.shape[0], -1)  # [B, w]
        return self.tokens.gather(1, index), self.positions.gather(1, index)

    def write_drafts(self, drafts: torch.Tensor, offset: int = 0) -> None:
        """Place draft tokens int64 ``[B, k]`` (numbers ``offset … offset + k - 1`` of the step) at columns
        ``[T + offset, T + offset + k)``, valid, at consecutive positions after the pending token."""
        batch_size, k = drafts.shape
        steps = offset + 1 + self.index[:k]  # [k]
        index = (self.length + offset + self.index[:k]).expand(batch_size, -1)  # [B, k]
        positions = (self.pending_position.unsqueeze(1) + steps).clamp(max=self.max_position)  # [B, k]
        self.tokens.scatter_(1, index, drafts)
        self.valid.scatter_(1, index, True)
        self.positions.scatter_(1, index, positions)

    def commit(self, output: torch.Tensor, num_accepted: torch.Tensor, width: int, holes: bool = True) -> None:
        """Append ``width`` columns after verification: the first ``width - 1`` draft columns (rejected ones
        become holes), then the recovered or bonus token as the new pending column.

        Args:
            output: int64 ``[B, γ + 1]`` verified tokens (accepted, then the recovered or bonus token).
            num_accepted: int64 ``[B]``, each at most ``width - 1``.
            width: columns appended, ``1 <= width <= γ + 1``.
            holes: whether some row accepted fewer than ``width - 1`` (False only if known on the host).
        """
        batch_size = output.shape[0]
        index = (self.length + self.index[:width]).expand(batch_size, -1)  # [B, w]: the drafts, then the pending
        kept = self.index[:width] < num_accepted.unsqueeze(1)  # [B, w] accepted drafts
        kept[:, -1] = True
        pending = output.gather(1, num_accepted.unsqueeze(1))  # [B, 1] recovered or bonus token
        self.pending_position += num_accepted + 1
        self.valid.scatter_(1, index, kept)
        self.tokens.scatter_(1, index[:, -1:], pending)
        self.positions.scatter_(1, index[:, -1:], self.pending_position.clamp(max=self.max_position).unsqueeze(1))
        self.length += width
        if self.host_length is not None:
            self.host_length += width
        self.all_valid = self.all_valid and not holes

    def attention_mask_2d(self, end: int) -> torch.Tensor | None:
        """bool ``[B, end]`` padding/hole mask of the first ``end`` columns for a model that builds its own causal
        mask, or None while no committed column is invalid (drafts past ``T`` are always valid)."""
        return None if self.all_valid else self.valid[:, :end]

    def attention_mask_4d(self, start: int | torch.Tensor, width: int, dtype: torch.dtype) -> torch.Tensor:
        """Additive mask ``[B, 1, width, N]`` for queries at columns ``[start, start + width)`` over every column:
        0 where the key column is valid and not after the query, the dtype's minimum elsewhere."""
        queries = (start + self.index[:width]).unsqueeze(-1)  # [w, 1]
        allowed = self.valid.unsqueeze(1) & (self.index <= queries)  # [B, w, N]
        zero = torch.zeros((), dtype=dtype, device=allowed.device)
        return torch.where(allowed, zero, torch.finfo(dtype).min).unsqueeze(1)
