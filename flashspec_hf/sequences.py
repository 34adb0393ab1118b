"""The rows' tokens: prompt plus generated tokens of every row, the call's output buffer and what processors,
stopping criteria and prompt lookup read."""

from __future__ import annotations

import torch

from .buffers import Buffers

Groups = list[tuple[int, torch.Tensor | None]]
"""``(tokens generated, row mask bool [B] or None for every row)`` per distinct count among active rows; finished
rows are in no group."""


class Sequences:
    """Prompt and generated tokens of every row.

    Args:
        input_ids: int64 ``[B, L]`` left-padded prompt.
        capacity: ``C`` columns, at least ``L + max_new_tokens + γ + 1`` (a step may append ``γ + 1``).
        pad_token_id: fills the buffer behind each row.
        buffers: where the tensors live (:class:`~flashspec_hf.buffers.Buffers`).

    Attributes:
        buffer: int64 ``[B, C]``.
        num_new: int64 ``[B]`` tokens generated so far (device).
        prompt_length: ``L`` (host); prompt_end: the same as an int64 ``[]`` device tensor (what steps read).
        num_new_host: the generated counts on the host, as far as the host has read the steps' reports.
    """

    def __init__(self, input_ids: torch.Tensor, capacity: int, pad_token_id: int, buffers: Buffers):
        batch_size, self.prompt_length = input_ids.shape
        self.pad_token_id = pad_token_id
        self.buffer = buffers.full("sequences.buffer", (batch_size, capacity), pad_token_id, torch.long)  # [B, C]
        self.buffer[:, : self.prompt_length] = input_ids
        self.num_new = buffers.full("sequences.num_new", (batch_size,), 0, torch.long)  # [B]
        self.prompt_end = buffers.full("sequences.prompt_end", (), self.prompt_length, torch.long)  # []
        self.num_new_host = [0] * batch_size

    def prefix(self, generated: int) -> torch.Tensor:
        """int64 ``[B, L + generated]``: exact ``input_ids`` for the rows that have generated ``generated`` tokens."""
        return self.buffer[:, : self.prompt_length + generated]

    def groups(self, finished: torch.Tensor, finished_host: list[bool]) -> Groups:
        """The distinct generated-token counts among the rows not ``finished`` (bool ``[B]``, on the device and on
        the host), each with the mask of its active rows (None: every row of the batch)."""
        counts = sorted({n for n, f in zip(self.num_new_host, finished_host, strict=True) if not f})
        if len(counts) == 1 and not any(finished_host):
            return [(counts[0], None)]
        return [(n, (self.num_new == n) & ~finished) for n in counts]

    def append(self, tokens: torch.Tensor, counts: torch.Tensor) -> None:
        """Append the first ``counts[b]`` of ``tokens[b]`` (int64 ``[B, n]``) to each row (device only; the host
        learns the counts through :meth:`count_on_host`)."""
        n = tokens.shape[1]
        index = self.prompt_end + self.num_new.unsqueeze(1) + torch.arange(n, device=tokens.device)  # [B, n]
        keep = torch.arange(n, device=tokens.device) < counts.unsqueeze(1)  # [B, n]
        self.buffer.scatter_(1, index, torch.where(keep, tokens, self.pad_token_id))
        self.num_new += counts

    def count_on_host(self, counts: list[int]) -> None:
        """Add one step's appended counts, read from the device, to :attr:`num_new_host`."""
        self.num_new_host = [a + b for a, b in zip(self.num_new_host, counts, strict=True)]

    def result(self) -> torch.Tensor:
        """``sequences`` as stock generate returns them: int64 ``[B, L + max generated]``, pad-filled (once every
        step's counts are on the host); a copy, since the buffer may be kept for the next call."""
        return self.buffer[:, : self.prompt_length + max(self.num_new_host)].clone()
