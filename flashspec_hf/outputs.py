"""What a flashspec call returns: the sequences, or generate's output dict with per-token scores and logits."""

from __future__ import annotations

import torch
from transformers import GenerationConfig
from transformers.generation.utils import GenerateDecoderOnlyOutput


class Recorder:
    """Per-step target scores and raw target logits kept for ``return_dict_in_generate`` with ``output_scores`` /
    ``output_logits``, turned into stock ``generate``'s one ``[B, V]`` tensor per generated token at the end.

    Args:
        generation_config: the call's config (``return_dict_in_generate``, ``output_scores``, ``output_logits``).
    """

    def __init__(self, generation_config: GenerationConfig):
        as_dict = generation_config.return_dict_in_generate
        self.want_scores = bool(as_dict and generation_config.output_scores)
        self.want_logits = bool(as_dict and generation_config.output_logits)
        self.scores, self.logits, self.emitted = [], [], []  # per step: [B, w, V], [B, w, V], int64 [B]

    @property
    def active(self) -> bool:
        """True when the call asked for scores or logits."""
        return self.want_scores or self.want_logits

    def add(self, target_scores: torch.Tensor, logits: torch.Tensor, num_emitted: torch.Tensor) -> None:
        """Keep one step: target scores and raw logits ``[B, w, V]`` (``w`` = the step's γ + 1), and int64 ``[B]``
        tokens each row emitted of them."""
        if self.want_scores:
            self.scores.append(target_scores.float())
        if self.want_logits:
            self.logits.append(logits.float())
        self.emitted.append(num_emitted)

    def per_token(self, recorded: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        """One float32 ``[B, V]`` per generated token from per-step ``[B, w_s, V]`` tensors (steps may differ in
        width). Positions after a row finished (batch > 1) hold zeros: flashspec computes no target distribution
        there (stock computes one on the padding)."""
        stacked = torch.cat(recorded, dim=1)  # [B, Σ w_s, V]
        firsts = torch.tensor([0] + [r.shape[1] for r in recorded[:-1]]).cumsum(0).tolist()  # first column per step
        emitted = torch.stack(self.emitted, dim=1).tolist()  # [B][steps]
        index = [[first + j for first, n in zip(firsts, row, strict=True) for j in range(n)] for row in emitted]
        longest = max(len(ix) for ix in index)
        kept = torch.tensor([[True] * len(ix) + [False] * (longest - len(ix)) for ix in index], device=stacked.device)
        index = torch.tensor([ix + [0] * (longest - len(ix)) for ix in index], device=stacked.device)  # [B, N]
        gathered = stacked.gather(1, index.unsqueeze(-1).expand(-1, -1, stacked.shape[-1]))  # [B, N, V]
        return tuple(torch.where(kept.unsqueeze(-1), gathered, 0.0).unbind(dim=1))

    def output(self, sequences: torch.Tensor) -> GenerateDecoderOnlyOutput:
        """generate's output dict (``sequences``, ``scores``, ``logits``; no cache)."""
        return GenerateDecoderOnlyOutput(
            sequences=sequences,
            scores=self.per_token(self.scores) if self.want_scores else None,
            logits=self.per_token(self.logits) if self.want_logits else None,
        )
