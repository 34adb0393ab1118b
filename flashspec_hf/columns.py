"""The column layout that the target and every draft model's KV cache share, for ragged acceptance at batch > 1.

Every token any model has cached sits in a *column*; column ``j`` of row ``b`` is the ``j``-th cache slot of row
``b`` in every model. The first ``length[b]`` columns of row ``b`` are *committed*: the prompt, then each step's
columns. A step writes its draft tokens after them (:meth:`Columns.write_drafts`) and, once verified,
:meth:`Columns.commit` appends the row's accepted drafts and its recovered or bonus token, the new *pending* column
(emitted, not yet fed to the target). Two layouts, one per backend (:mod:`flashspec_hf.backends`):

- *holes* (``dense=False``): every row appends the same ``width`` columns, ``γ + 1`` or the batch's largest accepted
  count plus one, so all rows share one length (known on the host) and each model's cache covers a prefix of the
  columns; a row's rejected drafts among them become *holes*, masked out of attention and skipped by position ids.
- *dense* (``dense=True``): each row appends only its accepted drafts and its pending token, so rows have lengths of
  their own, kept on the device, and no hole ever enters a cache: the next step writes over the rejected columns.
  The capacity is then the prompt, ``max_new_tokens`` and two steps' drafts, not ``γ + 1`` columns per step.

A model catches up by feeding the columns it has not seen, so a draft model that was not picked for a while re-reads
the accepted tokens in one forward.
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
        capacity: ``N``, columns to allocate: the prompt, every step's commit and one step's drafts (the backend's
            bound for its layout).
        max_new_tokens: tokens a row may generate; positions are clamped to the last position an emitted token can
            have (``L - 1 + max_new_tokens``), so drafts past the end and finished rows never index past it.
        buffers: where the tensors live (:class:`~flashspec_hf.buffers.Buffers`).
        track_host_length: keep :attr:`host_length` (the holes layout of the dynamic backend).
        lead: masked padding columns put before the prompt (a static draft model reads the last ``W`` committed
            columns again when it catches up, which needs ``L + lead >= W``: :attr:`StaticBackend.behind`).
        dense: the dense layout (module docstring): rows commit their own number of columns.

    Attributes:
        tokens: int64 ``[B, N]``; positions: int64 ``[B, N]`` (padding 1, as transformers' ``generate``; holes keep
            their draft's position, masked); valid: bool ``[B, N]`` (False for padding and holes).
        length: int64 ``[B]`` committed columns ``T`` of each row (device; equal in the holes layout); column
            ``T - 1`` is the row's pending token.
        host_length: ``T`` on the host (holes layout), or None when not tracked; start_length: ``T`` before the
            first step (every row's).
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
        dense: bool = False,
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
        self.length = buffers.full("columns.length", (batch_size,), end, torch.long)  # [B]
        self.index = buffers.like("columns.index", torch.arange(capacity, device=buffers.device))  # [N]
        self.host_length = end if track_host_length else None
        self.start_length = end
        self.all_valid = lead == 0 and bool(valid.all())
        self.dense = dense
        if dense and track_host_length:
            raise ValueError("rows of the dense layout have lengths of their own: no host length to track")

    @property
    def capacity(self) -> int:
        """``N``, allocated columns."""
        return self.tokens.shape[1]

    def read(self, start: int | torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Tokens and positions int64 ``[B, width]`` of columns ``[start, start + width)`` (``start`` a host int, or
        an int64 ``[]`` or ``[B]`` device tensor: each row's)."""
        if isinstance(start, int):
            return self.tokens[:, start : start + width], self.positions[:, start : start + width]
        index = (start.reshape(-1, 1) + self.index[:width]).expand(self.tokens.shape[0], -1)  # [B, w]
        return self.tokens.gather(1, index), self.positions.gather(1, index)

    def draft_index(self, k: int) -> torch.Tensor:
        """Indices int64 ``[B, k]`` of the step's draft columns ``[T, T + k)``."""
        return self.length.unsqueeze(1) + self.index[:k]

    def draft_slots(self, k: int) -> torch.Tensor:
        """Make the step's draft columns ``[T, T + k)`` valid, at consecutive positions after the pending token, for
        :meth:`write_drafts` to fill; returns their indices int64 ``[B, k]``. A source that drafts token by token
        opens them once (each query attends only to columns up to its own, so the later ones, not yet written, are
        never read)."""
        index = self.draft_index(k)  # [B, k]
        positions = (self.pending_position.unsqueeze(1) + 1 + self.index[:k]).clamp(max=self.max_position)  # [B, k]
        self.valid.scatter_(1, index, True)
        self.positions.scatter_(1, index, positions)
        return index

    def write_drafts(self, drafts: torch.Tensor, slots: torch.Tensor | None = None) -> None:
        """Place draft tokens int64 ``[B, k]`` in the step's first ``k`` draft columns (:meth:`draft_slots`), or in
        ``slots`` int64 ``[B, k]``, columns that :meth:`draft_slots` opened."""
        self.tokens.scatter_(1, self.draft_slots(drafts.shape[1]) if slots is None else slots, drafts)

    def commit(self, output: torch.Tensor, num_accepted: torch.Tensor, width: int, holes: bool = True,
               frozen: torch.Tensor | None = None) -> None:
        """Append the verified step: each row's accepted drafts (already in place, from :meth:`write_drafts`), then
        its recovered or bonus token as the new pending column.

        Holes layout: every row appends ``width`` columns, the first ``width - 1`` draft columns (rejected ones
        become holes), then the pending one. Dense layout: row ``b`` appends ``num_accepted[b] + 1`` columns (the
        pending token overwrites the first rejected draft's column) and ``width`` is the step's ``γ + 1``.

        Args:
            output: int64 ``[B, γ + 1]`` verified tokens (accepted, then the recovered or bonus token).
            num_accepted: int64 ``[B]``, each at most ``width - 1``.
            width: columns appended (holes layout), ``1 <= width <= γ + 1``; unused by the dense layout.
            holes: whether some row accepted fewer than ``width - 1`` (False only if known on the host; holes layout).
            frozen: bool ``[B]`` rows that append nothing (dense layout: rows finished before the step, so that a
                finished row's length stays within the capacity however long the others run), or None.
        """
        pending = output.gather(1, num_accepted.unsqueeze(1))  # [B, 1] recovered or bonus token
        if self.dense:
            advance = num_accepted + 1  # [B]
            if frozen is not None:  # a frozen row's pending column takes the step's token, never emitted
                advance = advance.masked_fill(frozen, 0)
            at = (self.length + advance - 1).unsqueeze(1)  # [B, 1] each row's new pending column
            self.valid.scatter_(1, at, True)  # a bonus token's column held no draft
        else:
            index = self.length.unsqueeze(1) + self.index[:width]  # [B, w]: the drafts, then the pending
            kept = self.index[:width] < num_accepted.unsqueeze(1)  # [B, w] accepted drafts
            kept[:, -1] = True
            self.valid.scatter_(1, index, kept)
            advance, at = num_accepted + 1, index[:, -1:]
        self.pending_position += advance
        self.tokens.scatter_(1, at, pending)
        self.positions.scatter_(1, at, self.pending_position.clamp(max=self.max_position).unsqueeze(1))
        self.length += advance if self.dense else width
        if self.host_length is not None:
            self.host_length += width
        self.all_valid = self.all_valid and not holes and not self.dense

    def attention_mask_2d(self, end: int) -> torch.Tensor | None:
        """bool ``[B, end]`` padding/hole mask of the first ``end`` columns for a model that builds its own causal
        mask, or None while no committed column is invalid (drafts past ``T`` are always valid)."""
        return None if self.all_valid else self.valid[:, :end]

    def attention_mask_4d(self, start: int | torch.Tensor, width: int, dtype: torch.dtype) -> torch.Tensor:
        """Additive mask ``[B, 1, width, N]`` for queries at columns ``[start, start + width)`` (``start`` a host int,
        or an int64 ``[]`` or ``[B]`` device tensor) over every column: 0 where the key column is valid and not after
        the query, the dtype's minimum elsewhere."""
        queries = torch.as_tensor(start, device=self.index.device).reshape(-1, 1) + self.index[:width]  # [B | 1, w]
        allowed = self.valid.unsqueeze(1) & (self.index <= queries.unsqueeze(-1))  # [B, w, N]
        zero = torch.zeros((), dtype=dtype, device=allowed.device)
        return torch.where(allowed, zero, torch.finfo(dtype).min).unsqueeze(1)
