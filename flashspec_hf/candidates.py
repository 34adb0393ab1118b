"""Candidate generation: K arms, one chosen per step by a selector. An arm is a draft source (an assistant model
or prompt lookup, :mod:`flashspec_hf.drafts`) with its speculation length γ."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers.generation.candidate_generator import CandidateGenerator

from .drafts import DraftContext, DraftSource
from .selection import Selector


class MultiAssistantCandidateGenerator(CandidateGenerator):
    """Drafts each step with the arm the selector picks.

    Unlike transformers' ``AssistedCandidateGenerator`` there is no nested ``generate`` call: the source drafts
    ``γ`` tokens on its own cache and returns the processed logits ``q`` it sampled them from, so verification is
    exact (:mod:`flashspec_hf.drafts`).

    Args:
        sources: the draft sources.
        arms: ``(source index, γ)`` per arm.
        selector: picks the arm of each step (:mod:`flashspec_hf.selection`), already reset for these arms.
        ctx: the step context shared by the sources.
    """

    def __init__(self, sources: Sequence[DraftSource], arms: list[tuple[int, int]], selector: Selector, ctx: DraftContext):
        self.sources = list(sources)
        self.arms = arms
        self.selector = selector
        self.ctx = ctx
        self.arm = -1  # arm of the last get_candidates call

    @property
    def gamma(self) -> int:
        """γ of the last get_candidates call."""
        return self.arms[self.arm][1]

    def get_candidates(self, input_ids: torch.LongTensor, **kwargs) -> tuple[torch.LongTensor, torch.Tensor | None]:
        """Pick an arm and draft its ``γ`` tokens after the columns.

        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, T)`): the column tokens (``columns.tokens``).

        Returns:
            candidate ids ``[B, T + γ]`` and the processed draft logits ``q`` float32 ``[B, γ, V]`` (None when
            greedy: verification only compares tokens).
        """
        self.arm = self.selector.choose()
        source, gamma = self.arms[self.arm]
        drafts, draft_logits = self.sources[source].propose(self.ctx, gamma)  # [B, γ], [B, γ, V] | None
        return torch.cat([input_ids, drafts], dim=1), draft_logits

    def update_candidate_strategy(
        self,
        input_ids: torch.LongTensor,
        scores: torch.Tensor | None,
        num_matches: list[int],
        seconds: float | None = None,
        verified: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
    ) -> None:
        """Report the step to the selector.

        Args:
            num_matches: accepted draft tokens of each row still generating.
            seconds: the step's wall time (s).
            verified: for full-information selectors, ``(output int64 [B, γ + 1], num_accepted int64 [B],
                active bool [B], num_new_before int64 [B], m)`` of the step (``m`` = max accepted, on the host),
                after the columns and sequences received its tokens.
        """
        self.selector.update(self.arm, num_matches, self.gamma, seconds)
        if self.selector.full_information and verified is not None:
            self.selector.update_all(*self._agreement(*verified))

    def _agreement(self, output, num_accepted, active, num_new_before, m) -> tuple[list[float], list[float]]:
        """Per arm, agreeing and tested tokens of its teacher-forced greedy predictions on the step's tokens.

        Row ``b`` verified positions ``0 … n_b`` (``n_b`` accepted drafts, then the recovered or bonus token); an
        arm of length ``γ_a`` is tested on the first ``w_b = min(n_b + 1, γ_a)`` of them: its leading agreement
        ``k_b`` are successes, plus one failure if ``k_b < w_b``, the censoring of a drafted step. The drafting
        arm reports its actual acceptance.
        """
        width = m + 1  # the step's new columns: no row verified more positions
        output = output[:, :width]  # [B, m + 1]
        drafting = self.arms[self.arm][0]
        pos = torch.arange(width, device=output.device)  # [m + 1]
        predictions = {}  # source -> int64 [B, m + 1] greedy predictions
        counts = []  # per arm: (successes, trials), device scalars
        for source, gamma in self.arms:
            known = self.gamma if source == drafting else width  # positions the source has predicted
            window = (num_accepted + 1).clamp(max=min(gamma, known))  # [B]
            if source == drafting:  # its drafts matched the first n_b tokens, then were rejected
                agree = num_accepted.minimum(window)
            else:
                if source not in predictions:
                    predictions[source] = self.sources[source].predict(self.ctx, num_new_before, width)
                hit = (predictions[source] == output) & (pos < window.unsqueeze(1))  # [B, m + 1]
                agree = hit.long().cumprod(dim=1).sum(dim=1)  # [B] leading agreement
            tested = agree + (agree < window).long()  # [B]
            counts.append(torch.stack([(agree * active).sum(), (tested * active).sum()]))
        successes, trials = torch.stack(counts).T.tolist()  # full-information mode's extra host copy
        return successes, trials

    def crop(self, length: int) -> None:
        """Forget the drafted columns at and after ``length`` (the drafting source's rejected tokens)."""
        self.sources[self.arms[self.arm][0]].crop(length)
