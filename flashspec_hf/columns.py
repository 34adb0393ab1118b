"""The column layout shared by the target and every assistant KV cache, for ragged acceptance at batch > 1.

Every token any model has cached sits in a *column*; column ``j`` of every row is the ``j``-th cache slot of every
model. A step appends the same number of columns to all rows (``max accepted + 1``); a row that accepted fewer
draft tokens keeps its rejected drafts as *holes*: masked out of attention, skipped by position ids. Each model's
cache covers a prefix of the columns (``seen``); a model catches up by feeding the columns it has not seen, so an
assistant that was not picked for a while re-reads the accepted tokens in one forward when it is picked again.
At batch 1 no hole ever stays (the cache is cropped to the accepted length).
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass

import torch
import transformers
from packaging.version import Version
from transformers import DynamicCache, PreTrainedModel

SLIDING_WINDOW_MIN_VERSION = Version("5.24")
"""Oldest transformers verified to crop a full sliding-window cache correctly (5.17 returns one key too many)."""


@dataclass
class Columns:
    """Token, validity and position of every column.

    Attributes:
        tokens: int64 ``[B, T]``; the last column is the *pending* token (emitted, not yet seen by the target).
        valid: int64 ``[B, T]``, 1 for real tokens, 0 for left padding and holes (the attention mask).
        positions: int64 ``[B, T]``, position id of each valid column (its number of valid predecessors); padding
            columns hold 1 (as transformers' generate), holes an arbitrary value (they are masked).
        all_valid: host flag, True while no column is padding or a hole; the models then get no attention mask
            and build their own causal one (which sliding-window layers need in transformers 5.17).
    """

    tokens: torch.Tensor
    valid: torch.Tensor
    positions: torch.Tensor
    all_valid: bool

    @classmethod
    def from_prompt(cls, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> "Columns":
        """Columns of a left-padded prompt: ``input_ids`` int64 ``[B, L]``, ``attention_mask`` ``[B, L]`` or None."""
        valid = torch.ones_like(input_ids) if attention_mask is None else attention_mask.long()  # [B, L]
        positions = (valid.cumsum(-1) - 1).masked_fill(valid == 0, 1)  # [B, L], as transformers' generate
        return cls(input_ids, valid, positions, attention_mask is None or bool(attention_mask.all()))

    @property
    def length(self) -> int:
        """Number of columns ``T``."""
        return self.tokens.shape[1]

    def prefix(self, length: int) -> "Columns":
        """The first ``length`` columns (views)."""
        return Columns(self.tokens[:, :length], self.valid[:, :length], self.positions[:, :length], self.all_valid)

    def append(self, tokens: torch.Tensor, valid: torch.Tensor, positions: torch.Tensor, holes: bool) -> None:
        """Append ``[B, n]`` columns; ``holes`` says (on the host) whether any of them is invalid."""
        self.all_valid = self.all_valid and not holes
        self.tokens = torch.cat([self.tokens, tokens], dim=1)
        self.valid = torch.cat([self.valid, valid.long()], dim=1)
        self.positions = torch.cat([self.positions, positions], dim=1)


class ColumnCache:
    """One model's KV cache over a prefix of the columns (``seen`` of them).

    Args:
        model: the target or an assistant.
        vocab_size: the target's vocabulary; tokens the model has no embedding for (an assistant with a smaller
            padded vocabulary) are fed as token 0; its logits for them are ``-inf``-padded anyway.
    """

    def __init__(self, model: PreTrainedModel, vocab_size: int):
        self.model = model
        self.cache = DynamicCache(config=model.config)
        if any(self.cache.is_sliding) and Version(transformers.__version__) < SLIDING_WINDOW_MIN_VERSION:
            raise NotImplementedError(
                f"{type(model).__name__} has sliding-window layers, whose cache transformers "
                f"{transformers.__version__} cannot roll back once the window is full (seen on 5.17); "
                f"flashspec supports them from transformers {SLIDING_WINDOW_MIN_VERSION} on: upgrade transformers"
            )
        self.cache.activate_past_recording()  # lets sliding-window / linear-attention layers be cropped
        self.seen = 0
        embeddings = model.get_input_embeddings().num_embeddings
        self.max_token = embeddings - 1 if embeddings < vocab_size else None
        limit = getattr(model.config.get_text_config(), "max_position_embeddings", None)
        self.max_position = limit - 1 if limit else 2**62  # positions are clamped to it

    def check_holes_allowed(self) -> None:
        """Raise NotImplementedError if holes (batch > 1) would break the model's attention.

        A sliding window counts cache slots, holes included, and a linear-attention state absorbs the rejected
        tokens: both would change the output.
        """
        if any(self.cache.is_sliding) or any(self.cache.is_linear):
            raise NotImplementedError(
                f"{type(self.model).__name__} has sliding-window or linear-attention layers; flashspec runs them at "
                "batch size 1 only (ragged acceptance leaves holes in the cache)"
            )

    def forward(self, columns: Columns, drafts: torch.Tensor, logits_to_keep: int) -> torch.Tensor:
        """Feed what this cache has not seen of ``columns ++ drafts``; return the last ``logits_to_keep`` logits.

        Args:
            columns: the shared layout (``T`` columns).
            drafts: int64 ``[B, n]`` tokens after column ``T - 1`` (valid, consecutive positions), maybe ``n = 0``.
            logits_to_keep: number of trailing positions whose logits are returned.

        Returns:
            logits ``[B, logits_to_keep, V]`` in the model's dtype. Afterwards ``seen = T + n``.
        """
        n = drafts.shape[1]
        steps = torch.arange(1, n + 1, device=drafts.device)  # [n]
        mask = torch.cat([columns.valid, torch.ones_like(drafts)], dim=1)  # [B, T + n]
        first_col, first_draft = min(self.seen, columns.length), max(self.seen - columns.length, 0)
        ids = torch.cat([columns.tokens[:, first_col:], drafts[:, first_draft:]], dim=1)  # [B, T + n - seen]
        if self.max_token is not None:
            ids = ids.masked_fill(ids > self.max_token, 0)
        draft_pos = columns.positions[:, -1:] + steps  # [B, n]
        pos = torch.cat([columns.positions[:, first_col:], draft_pos[:, first_draft:]], dim=1)
        pos = pos.clamp(max=self.max_position)  # drafts past the length limit: never emitted
        device = self.model.device
        out = self.model(
            input_ids=ids.to(device),
            attention_mask=None if columns.all_valid else mask.to(device),
            position_ids=pos.to(device),
            use_cache=True,
            logits_to_keep=logits_to_keep,
            **{_cache_kwarg(type(self.model)): self.cache},
        )
        self.seen = mask.shape[1]
        return out.logits[:, -logits_to_keep:]

    def crop(self, length: int) -> None:
        """Drop cached columns from ``length`` on (no-op if ``seen <= length``)."""
        if self.seen > length:
            self.cache.crop(length - self.seen)  # negative: number of columns to remove
            self.seen = length


@functools.cache
def _cache_kwarg(model_cls: type) -> str:
    """``cache`` (transformers >= 5.2x) or ``past_key_values`` (5.17), whichever ``forward`` takes."""
    params = inspect.signature(model_cls.forward).parameters
    return "cache" if "cache" in params else "past_key_values"
