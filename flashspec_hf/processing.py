"""generate's logits processors applied position by position to ragged rows, as stock assisted decoding does.

Stock assisted decoding calls the prepared processor list once per verified position with the drafted prefix
(``logits_processor(candidate_input_ids[:, :cur_len + i], new_logits[:, i])``), so prefix-dependent processors
(repetition penalty, no-repeat n-grams, bad words, …) see what the target would have seen token by token. Here
rows have different lengths, so each call gets the rows *right-aligned* (extra left padding on shorter rows):
at batch 1 that is exactly stock's ``input_ids``.

Processors that read ``input_ids.shape[-1]`` as the row length cannot work on ragged rows: the minimum-length
ones are enforced per row here instead, and the other length-dependent ones are refused at batch > 1.
A trailing run of context-free warpers (temperature, top-k, top-p, …) runs once on all positions together.
"""

from __future__ import annotations

import torch
from transformers.generation.logits_process import (
    EpsilonLogitsWarper,
    EtaLogitsWarper,
    ExponentialDecayLengthPenalty,
    ForcedBOSTokenLogitsProcessor,
    ForcedEOSTokenLogitsProcessor,
    LogitsProcessorList,
    MinLengthLogitsProcessor,
    MinNewTokensLengthLogitsProcessor,
    MinPLogitsWarper,
    SuppressTokensAtBeginLogitsProcessor,
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
_LENGTH_DEPENDENT = (
    ForcedBOSTokenLogitsProcessor,
    ForcedEOSTokenLogitsProcessor,
    SuppressTokensAtBeginLogitsProcessor,
    ExponentialDecayLengthPenalty,
)


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

    def aligned(self) -> torch.Tensor:
        """Rows right-aligned, int64 ``[B, L + max_new]``; shorter rows get ``pad_token_id`` on the left."""
        width = self.prompt_length + self.max_new
        if self.buffer.shape[0] == 1:
            return self.buffer[:, :width]
        shift = (self.max_new - self.num_new).unsqueeze(1)  # [B, 1]
        src = torch.arange(width, device=self.buffer.device) - shift  # [B, width]
        rows = self.buffer.gather(1, src.clamp_min(0))
        return rows.masked_fill(src < 0, self.pad_token_id)

    def append(self, tokens: torch.Tensor, counts: torch.Tensor, counts_host: list[int]) -> None:
        """Append the first ``counts[b]`` of ``tokens[b]`` (int64 ``[B, n]``) to each row.

        ``counts`` is int64 ``[B]`` on the device, ``counts_host`` the same numbers already on the host.
        """
        n = tokens.shape[1]
        index = self.prompt_length + self.num_new.unsqueeze(1) + torch.arange(n, device=tokens.device)  # [B, n]
        keep = torch.arange(n, device=tokens.device) < counts.unsqueeze(1)  # [B, n]
        self.buffer.scatter_(1, index, torch.where(keep, tokens, self.pad_token_id))
        self.num_new += counts
        self.num_new_host = [a + b for a, b in zip(self.num_new_host, counts_host, strict=True)]
        self.max_new = max(self.num_new_host)

    def result(self) -> torch.Tensor:
        """``sequences`` as stock generate returns them: int64 ``[B, L + max generated]``, pad-filled."""
        return self.buffer[:, : self.prompt_length + self.max_new]


class LogitsProcessing:
    """The prepared processor list, split for ragged rows.

    Args:
        logits_processor: the list generate prepared (processors and warpers).
        batch_size: rows; length-dependent processors are refused when > 1.
        eos_token_ids: int64 ``[E]`` end-of-sequence ids (masked while a row is under its minimum length).

    Raises:
        NotImplementedError: a processor reads the row length (forced BOS/EOS, suppress-at-begin, exponential
            length penalty) and rows are ragged (batch > 1).
    """

    def __init__(self, logits_processor: LogitsProcessorList, batch_size: int, eos_token_ids: torch.Tensor | None):
        processors = list(logits_processor)
        self.min_length = 0  # rows shorter than this (prompt included) may not end
        kept = []
        for proc in processors:
            if isinstance(proc, MinLengthLogitsProcessor):
                self.min_length = max(self.min_length, proc.min_length)
            elif isinstance(proc, MinNewTokensLengthLogitsProcessor):
                self.min_length = max(self.min_length, proc.prompt_length_to_skip + proc.min_new_tokens)
            else:
                kept.append(proc)
        if batch_size > 1:
            for proc in kept:
                if isinstance(proc, _LENGTH_DEPENDENT):
                    raise NotImplementedError(
                        f"{type(proc).__name__} depends on the row length, which differs between rows under "
                        "flashspec's ragged acceptance; use batch size 1 for it"
                    )
        split = len(kept)
        while split > 0 and isinstance(kept[split - 1], _CONTEXT_FREE):
            split -= 1
        self.contextual = kept[:split]
        self.warpers = kept[split:]
        self.eos_token_ids = eos_token_ids

    @property
    def is_identity(self) -> bool:
        """True when processing would return the logits unchanged (greedy with no processors)."""
        return not (self.contextual or self.warpers or (self.min_length and self.eos_token_ids is not None))

    def __call__(
        self, logits: torch.Tensor, context: torch.Tensor, following: torch.Tensor, generated: torch.Tensor, prompt_length: int
    ) -> torch.Tensor:
        """Process ``P`` consecutive positions of every row.

        Args:
            logits: ``[B, P, V]`` raw logits; position ``i`` predicts the token after
                ``context ++ following[:, :i]``.
            context: int64 ``[B, W]`` right-aligned rows before position 0.
            following: int64 ``[B, P - 1]`` tokens between the positions (the draft tokens), maybe ``[B, 0]``.
            generated: int64 ``[B]`` tokens each row had generated before position 0.
            prompt_length: ``L``, the left-padded prompt length.

        Returns:
            float32 ``[B, P, V]`` processed logits (``-inf`` where a processor forbids a token).
        """
        scores = logits.float()  # [B, P, V], a copy when the logits are bf16/fp16
        if scores.data_ptr() == logits.data_ptr():
            scores = scores.clone()
        positions = scores.shape[1]
        if self.min_length and self.eos_token_ids is not None:
            row_length = prompt_length + generated.unsqueeze(1) + torch.arange(positions, device=scores.device)  # [B, P]
            too_short = (row_length < self.min_length).unsqueeze(-1)  # [B, P, 1]
            eos = scores[..., self.eos_token_ids]
            scores[..., self.eos_token_ids] = eos.masked_fill(too_short, float("-inf"))
        for i in range(positions if self.contextual else 0):
            ids = torch.cat([context, following[:, :i]], dim=1)  # [B, W + i]
            row = scores[:, i]
            for proc in self.contextual:
                row = proc(ids, row)
            scores[:, i] = row
        if self.warpers:
            flat = scores.view(-1, scores.shape[-1])  # [B * P, V]
            for proc in self.warpers:
                flat = proc(None, flat)
            scores = flat.view_as(scores)
        return scores
