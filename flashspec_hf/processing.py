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

_CONTEXT_FREE = (
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
    MinPLogitsWarper,
    TypicalLogitsWarper,
    EpsilonLogitsWarper,
    EtaLogitsWarper,
)

Groups = list[tuple[int, torch.Tensor | None]]
"""``(tokens generated, row mask bool [B, 1] or None for all rows)`` per distinct count among active rows."""


class Sequences:
    """Prompt and generated tokens of every row: the output buffer and the processors' view of the rows.

    Args:
        input_ids: int64 ``[B, L]`` left-padded prompt.
        max_new_tokens: tokens each row may generate (``max_length - L``).
        gamma: draft tokens per step (the buffer holds one extra step).
        pad_token_id: fills the buffer behind each row.
    """

    def __init__(self, input_ids: torch.Tensor, max_new_tokens: int, gamma: int, pad_token_id: int):
        batch_size, self.prompt_length = input_ids.shape
        self.pad_token_id = pad_token_id
        capacity = self.prompt_length + max_new_tokens + gamma + 1
        self.buffer = input_ids.new_full((batch_size, capacity), pad_token_id)  # [B, L + max_new + γ + 1]
        self.buffer[:, : self.prompt_length] = input_ids
        self.num_new = torch.zeros(batch_size, dtype=torch.long, device=input_ids.device)  # [B] generated so far
        self.num_new_host = [0] * batch_size  # host copy of num_new
        self.max_new = 0  # max(num_new_host)

    def prefix(self, generated: int) -> torch.Tensor:
        """int64 ``[B, L + generated]``: exact ``input_ids`` for the rows that have generated ``generated`` tokens."""
        return self.buffer[:, : self.prompt_length + generated]

    def groups(self, active: list[bool]) -> Groups:
        """The distinct generated-token counts among ``active`` rows, each with its row mask (None: every row)."""
        counts = sorted({n for n, a in zip(self.num_new_host, active, strict=True) if a})
        if len(set(self.num_new_host)) == 1:
            return [(counts[0], None)] if counts else []
        return [(n, (self.num_new == n).unsqueeze(1)) for n in counts]

    def append(self, tokens: torch.Tensor, counts: torch.Tensor, counts_host: list[int] | None = None) -> None:
        """Append the first ``counts[b]`` of ``tokens[b]`` (int64 ``[B, n]``) to each row.

        ``counts`` is int64 ``[B]`` on the device, ``counts_host`` the same numbers already on the host, or None
        (the static loop: the host copies are brought up to date by :meth:`sync_counts` at the end).
        """
        n = tokens.shape[1]
        index = self.prompt_length + self.num_new.unsqueeze(1) + torch.arange(n, device=tokens.device)  # [B, n]
        keep = torch.arange(n, device=tokens.device) < counts.unsqueeze(1)  # [B, n]
        self.buffer.scatter_(1, index, torch.where(keep, tokens, self.pad_token_id))
        self.num_new += counts
        if counts_host is not None:
            self.num_new_host = [a + b for a, b in zip(self.num_new_host, counts_host, strict=True)]
            self.max_new = max(self.num_new_host)

    def sync_counts(self) -> None:
        """Copy the generated-token counts to the host (one synchronisation)."""
        self.num_new_host = self.num_new.tolist()
        self.max_new = max(self.num_new_host)

    def result(self) -> torch.Tensor:
        """``sequences`` as stock generate returns them: int64 ``[B, L + max generated]``, pad-filled."""
        return self.buffer[:, : self.prompt_length + self.max_new]


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

    def __call__(
        self,
        logits: torch.Tensor,
        sequences: Sequences,
        groups: Groups,
        drafted: torch.Tensor,
        following: torch.Tensor,
    ) -> torch.Tensor:
        """Process ``P`` consecutive positions of every row.

        Args:
            logits: ``[B, P, V]`` raw logits; position ``i`` predicts the token after
                ``row ++ drafted ++ following[:, :i]``.
            sequences: the rows so far (prompt + generated tokens).
            groups: :meth:`Sequences.groups` of this step.
            drafted: int64 ``[B, m]`` draft tokens already placed after the rows (``m`` may be 0).
            following: int64 ``[B, P - 1]`` tokens between the positions (the draft tokens), maybe ``[B, 0]``.

        Returns:
            float32 ``[B, P, V]`` processed logits (``-inf`` where a processor forbids a token).
        """
        scores = logits.float()  # [B, P, V], a copy when the logits are bf16/fp16
        if scores.data_ptr() == logits.data_ptr():
            scores = scores.clone()
        for generated, rows in groups if self.contextual else []:
            base = torch.cat([sequences.prefix(generated), drafted], dim=1)  # [B, L + generated + m]
            for i in range(scores.shape[1]):
                ids = torch.cat([base, following[:, :i]], dim=1)
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
