"""Candidate generation: K assistant models, one chosen per step by a selector, each with its own KV cache."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from transformers import PreTrainedModel
from transformers.generation.candidate_generator import CandidateGenerator

from .columns import ColumnCache, Columns
from .selection import Selector

DraftProcessor = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""``(logits [B, 1, V], drafts_so_far int64 [B, i]) -> float32 [B, 1, V]`` processed draft logits."""


class MultiAssistantCandidateGenerator(CandidateGenerator):
    """Drafts ``γ`` tokens per step with the assistant the selector picks.

    Unlike transformers' ``AssistedCandidateGenerator`` there is no nested ``generate`` call: each assistant runs
    ``γ`` forwards on its own cache (the first one also catches up on the columns it has not seen), samples each
    draft token from its processed logits ``q`` (the target's processors applied once, not twice), and returns
    those ``q`` so verification is exact.

    Args:
        assistants: the draft models (same tokenizer as the target; vocabularies may be padded differently).
        columns: the column layout shared with the target (:mod:`flashspec_hf.columns`).
        selector: picks the arm of each step (:mod:`flashspec_hf.selection`).
        num_assistant_tokens: ``γ``, draft tokens per step.
        vocab_size: the target's vocabulary size ``V``; draft logits are cut or ``-inf``-padded to it.
        do_sample: sample drafts from ``q`` (True) or take its argmax.
        process: applies generate's processors to one position of draft logits.
    """

    def __init__(
        self,
        assistants: Sequence[PreTrainedModel],
        columns: Columns,
        selector: Selector,
        num_assistant_tokens: int,
        vocab_size: int,
        do_sample: bool,
        process: DraftProcessor,
    ):
        self.caches = [ColumnCache(model, vocab_size) for model in assistants]
        self.columns = columns
        self.selector = selector
        self.gamma = num_assistant_tokens
        self.vocab_size = vocab_size
        self.do_sample = do_sample
        self.process = process
        self.arm = -1  # arm of the last get_candidates call

    def get_candidates(self, input_ids: torch.LongTensor, **kwargs) -> tuple[torch.LongTensor, torch.Tensor | None]:
        """Pick an arm and draft ``γ`` tokens after the columns.

        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, T)`): the column tokens (``columns.tokens``).

        Returns:
            candidate ids ``[B, T + γ]`` and the processed draft logits ``q`` float32 ``[B, γ, V]`` (None when
            greedy: verification only compares tokens).
        """
        self.arm = self.selector.select()
        cache = self.caches[self.arm]
        batch_size = input_ids.shape[0]
        drafts = input_ids.new_empty(batch_size, 0)  # [B, i]
        scores = []
        for _ in range(self.gamma):
            logits = cache.forward(self.columns, drafts, logits_to_keep=1)  # [B, 1, V_draft]
            logits = _fit_vocab(logits, self.vocab_size, getattr(cache.model, "draft_vocab_ids", None))
            q = self.process(logits.to(input_ids.device), drafts)  # [B, 1, V]
            if self.do_sample:
                token = torch.multinomial(q[:, 0].softmax(dim=-1), num_samples=1)  # [B, 1]
            else:
                token = q[:, 0].argmax(dim=-1, keepdim=True)  # [B, 1]
            drafts = torch.cat([drafts, token], dim=1)
            scores.append(q)
        draft_logits = torch.cat(scores, dim=1) if self.do_sample else None  # [B, γ, V]
        return torch.cat([input_ids, drafts], dim=1), draft_logits

    def update_candidate_strategy(self, input_ids: torch.LongTensor, scores: torch.Tensor | None, num_matches: list[int]):
        """Report the step's accepted draft tokens (one count per row still generating) to the selector."""
        self.selector.update(self.arm, num_matches, self.gamma)

    def crop(self, length: int) -> None:
        """Forget the drafted columns at and after ``length`` (the drafting assistant's rejected tokens)."""
        self.caches[self.arm].crop(length)


def _fit_vocab(logits: torch.Tensor, vocab_size: int, token_ids: torch.Tensor | None = None) -> torch.Tensor:
    """Draft logits on the target's vocabulary, ``[..., V]``; tokens the draft cannot propose get ``-inf``.

    ``logits`` ``[..., V_draft]`` with entry ``i`` for token ``i`` (extra entries dropped, missing ones ``-inf``),
    or ``[..., S]`` with entry ``i`` for token ``token_ids[i]`` (a reduced draft head).
    """
    if token_ids is not None:
        full = logits.new_full((*logits.shape[:-1], vocab_size), float("-inf"))  # [..., V]
        return full.scatter_(-1, token_ids.expand(*logits.shape[:-1], -1), logits)
    extra = logits.shape[-1] - vocab_size
    if extra >= 0:
        return logits[..., :vocab_size]
    return torch.nn.functional.pad(logits, (0, -extra), value=float("-inf"))
