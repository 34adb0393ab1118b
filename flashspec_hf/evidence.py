"""Evidence on the arms that did not draft a step: what they would have had accepted.

Two ways to get it. Full-information selection (:class:`~flashspec_hf.selection.Hedge`, dynamic backend) scores every
arm after every step on the host (:func:`score_arms`: each source predicts the verified tokens, at the price of a
forward of every draft model and a host copy per step). *Side evidence* (:class:`SideEvidence`, static backend) takes
only what costs next to nothing.

A bandit learns an arm's acceptance only from the steps that arm drafts, so it must spend steps on arms that turn out
worse (exploration) and spend them again whenever the text changes. On the static backend, on every
:data:`~flashspec_hf.backends.KEEP_CURRENT_EVERY`-th step, every draft model that did not draft it runs a forward
over that step's columns anyway, to stay current (:meth:`~flashspec_hf.drafts.DraftSource.keep_current`); keeping
the logits of that forward gives its greedy guess of each verified position, teacher-forced on the committed tokens
before it, which is exactly how many drafts it would have had accepted under greedy decoding, censored at the
positions the step verified. The arms of every such draft model are then observed on those steps, as in a bandit
with side observations (Mannor & Shamir 2011, "From Bandits to Experts: On the Value of Side-Observations"): the
selector's estimates stay current for free and its exploration is no longer paid for in steps. The other steps
report no evidence (zeros). Not observed: prompt lookup, mixed arms, early exits
(they read the target's cache and run no forward of their own), the drafting source's own other-γ arms, and every
arm on a plain step (its one column predicts nothing new). The evidence only changes which arm drafts later steps
(from past steps only), so exactness is untouched.

Under sampling a draft's greedy agreement is not its acceptance (``Σ min(p, q)``), so side evidence is gathered
under greedy decoding only. Off the static backend (the CPU's dynamic loop) and under sampling a selector gets
none.
"""

from __future__ import annotations

import torch

from .buffers import Buffers
from .drafts import DraftContext, DraftSource


def leading_agreement(predictions: torch.Tensor, output: torch.Tensor,
                      window: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Agreeing and tested tokens of greedy predictions on a step's verified tokens, as a drafted step counts them.

    Row ``b`` is tested on its first ``window[b]`` positions: the leading positions where the prediction equals the
    verified token are successes (``k_b``), and one more failure when ``k_b < window[b]`` (the first rejection).

    Args:
        predictions: int64 ``[..., B, W]`` greedy guesses of positions ``0 … W - 1``; output: int64 ``[B, >= W]``
            the step's verified tokens; window: int64 ``[B]`` tested positions per row, at most ``W``.

    Returns:
        int64 ``[..., B]`` agreeing tokens and tested tokens.
    """
    width = predictions.shape[-1]
    positions = torch.arange(width, device=output.device)  # [W]
    hit = (predictions == output[:, :width]) & (positions < window.unsqueeze(1))  # [..., B, W]
    agree = hit.long().cumprod(dim=-1).sum(dim=-1)  # [..., B] leading agreement
    return agree, agree + (agree < window).long()


def score_arms(
    sources: list[DraftSource],
    arms: list[tuple[int, int]],
    drafting_arm: int,
    drafted: int,
    ctx: DraftContext,
    output: torch.Tensor,
    num_accepted: torch.Tensor,
    active: torch.Tensor,
    num_new_before: torch.Tensor,
    max_accepted: int,
) -> tuple[list[float], list[float]]:
    """Per arm, agreeing and tested tokens of its teacher-forced greedy predictions on a step's verified tokens
    (full-information selection, :class:`~flashspec_hf.selection.Hedge`); one device-to-host copy.

    Row ``b`` verified positions ``0 … n_b`` (``n_b`` accepted drafts, then the recovered or bonus token); an arm of
    length ``γ_a`` is tested on the first ``w_b = min(n_b + 1, γ_a)`` of them: its leading agreement ``k_b`` are
    successes, plus one failure if ``k_b < w_b``, the censoring of a drafted step. The drafting arm reports its
    actual acceptance over the ``drafted`` tokens its source proposed (none, for prompt lookup without a match).

    Args:
        sources: the call's draft sources; arms: ``(source, γ)`` per arm; drafting_arm: the step's arm; drafted: the
            draft tokens its source proposed (``γ``, or fewer); ctx: the call's columns and sequences.
        output: int64 ``[B, γ + 1]`` the step's verified tokens; num_accepted: int64 ``[B]``.
        active: bool ``[B]``, rows generating at the step; num_new_before: int64 ``[B]`` tokens before it.
        max_accepted: ``m``, the largest accepted count (host): no row verified more than ``m + 1`` positions.
    """
    width = max_accepted + 1
    output = output[:, :width]  # [B, m + 1]
    drafting_source = arms[drafting_arm][0]
    predictions = {}  # source -> int64 [B, m + 1] greedy predictions
    counts = []  # per arm: (successes, trials), device scalars
    for source, gamma in arms:
        known = drafted if source == drafting_source else width  # positions the source has predicted
        window = (num_accepted + 1).clamp(max=min(gamma, known))  # [B]
        if source == drafting_source:  # its drafts matched the first n_b tokens, then were rejected
            agree = num_accepted.minimum(window)  # [B]
            tested = agree + (agree < window).long()  # [B]
        else:
            if source not in predictions:
                predictions[source] = sources[source].predict(ctx, num_new_before, width)
            agree, tested = leading_agreement(predictions[source], output, window)  # [B] each
        counts.append(torch.stack([(agree * active).sum(), (tested * active).sum()]))
    successes, trials = torch.stack(counts).T.tolist()  # full-information mode's extra host copy
    return successes, trials


class SideEvidence:
    """Per step, the agreeing and tested tokens of every arm whose source did not draft but kept current (module
    docstring), gathered inside the step, with no synchronisation, and read with the step's report.

    Args:
        sources: the call's draft sources; arms: ``(source, γ)`` per arm.
        batch_size: ``B``; max_gamma: the largest γ of the arms; buffers: where the guesses live (kept from call to
            call by the static backend, so that a captured step writes and reads the same memory).
    """

    def __init__(self, sources: list[DraftSource], arms: list[tuple[int, int]], batch_size: int, max_gamma: int,
                 buffers: Buffers):
        self.arms = arms
        self.guesses = {  # source -> int64 [B, γ_max]: its guesses of the step's verified positions
            s: buffers.full(f"evidence.guesses.{s}", (batch_size, max_gamma), -1, torch.long)
            for s, source in enumerate(sources) if source.gives_side_evidence
        }
        self.zeros = buffers.full("evidence.zeros", (len(arms), 2), 0, torch.long)  # [A, 2], never written

    def buffer(self, source: int) -> torch.Tensor | None:
        """Where ``source`` writes its guesses on a step it does not draft (int64 ``[B, γ_max]``), or None."""
        return self.guesses.get(source)

    def score(self, drafting: int, gamma: int, output: torch.Tensor, num_accepted: torch.Tensor,
              active: torch.Tensor) -> torch.Tensor:
        """int64 ``[A, 2]``: per arm, agreeing and tested tokens summed over the ``active`` rows (bool ``[B]``); 0 and
        0 for the arms of the drafting source (its outcome is the report's own), of a source without guesses, and the
        plain arm. Called inside the step, after verification, on the side stream where there is one, after the
        keep-current forwards there (their guesses are written) and beside the rest of the step
        (:mod:`~flashspec_hf.streams`).
        An arm of length ``γ_a`` is tested on ``min(n_b + 1, γ_a, γ)`` positions of row ``b``,
        ``n_b`` accepted (``num_accepted`` int64 ``[B]``) of the step's ``γ`` drafts: the positions verified with
        committed tokens before them (``output`` int64 ``[B, γ + 1]``)."""
        scored = [s for s in self.guesses if s != drafting]
        rows = [a for a, (s, g) in enumerate(self.arms) if s in scored and g]
        if not rows or not gamma:
            return self.zeros
        totals = {}  # arm -> int64 [2]
        for arm_gamma in sorted({self.arms[a][1] for a in rows}):
            sources = [s for s in scored if (s, arm_gamma) in self.arms]
            width = min(arm_gamma, gamma)
            predictions = torch.stack([self.guesses[s][:, :width] for s in sources])  # [S, B, w]
            window = (num_accepted + 1).clamp(max=width)  # [B]
            agree, tested = leading_agreement(predictions, output, window)  # [S, B] each
            sums = torch.stack([agree, tested], dim=-1).mul(active.long().unsqueeze(-1)).sum(dim=1)  # [S, 2]
            totals |= {self.arms.index((s, arm_gamma)): sums[i] for i, s in enumerate(sources)}
        return torch.stack([totals.get(a, self.zeros[a]) for a in range(len(self.arms))])  # [A, 2]
