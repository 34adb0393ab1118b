"""Selectors on simulated acceptance: the learning ones beat round-robin, the discounted ones follow a shift."""

import pytest
import torch

from benchmarks.regret import COSTS, SETTINGS, run
from flashspec_hf import Hedge, PromptLookup, ThompsonSampling, UCB1
from flashspec_hf.selection import SELECTORS, make_selector


def _regret(setting, make, rounds, seeds=3, costs=None):
    return sum(run(setting, make, seed, rounds, costs)[0][-1] for seed in range(seeds)) / seeds


@pytest.mark.parametrize("make", [lambda s: UCB1(), lambda s: ThompsonSampling(seed=s)])
def test_learning_selectors_beat_round_robin(make):
    rr = _regret(SETTINGS["easy"], lambda s: SELECTORS["round_robin"](), 2000)
    assert _regret(SETTINGS["easy"], make, 2000) < 0.5 * rr


def test_discounting_follows_a_shifted_best_arm():
    plain = _regret(SETTINGS["shifting"], lambda s: ThompsonSampling(seed=s), 4000)  # the best arm changes at 2,000
    discounted = _regret(SETTINGS["shifting"], lambda s: ThompsonSampling(seed=s, discount=0.998), 4000)
    assert discounted < 0.7 * plain


def test_every_named_selector_builds():
    for name in SELECTORS:
        selector = make_selector(name)
        selector.ensure(3)
        assert 0 <= selector.select() < 3


def test_hedge_full_information_beats_the_bandits_on_the_hard_setting():
    hedge = _regret(SETTINGS["hard"], lambda s: Hedge(seed=s), 3000)
    assert hedge < _regret(SETTINGS["hard"], lambda s: UCB1(), 3000)


def test_cost_aware_selection_prefers_tokens_per_second():
    """The most accepting arm is the slowest: acceptance alone picks it, the cost-aware selector does not."""
    costs = COSTS["costly"]
    plain = _regret(SETTINGS["costly"], lambda s: ThompsonSampling(seed=s), 3000, costs=costs)
    aware = _regret(SETTINGS["costly"], lambda s: ThompsonSampling(seed=s, cost_aware=True), 3000, costs=costs)
    assert aware < 0.2 * plain


def test_gamma_arms_are_valued_by_tokens_per_step():
    """Same acceptance, γ = 2 or 8: with α = 0.9 the longer draft yields more tokens per step, and is chosen."""
    selector = ThompsonSampling(seed=0)
    selector.reset(2, [2, 8])
    for _ in range(200):
        arm = selector.select()
        gamma = selector.gammas[arm]
        selector.update(arm, [min(gamma, 6)], gamma)  # accepts 6 of 8, or all of 2
    assert selector.pulls[1] > 150


@pytest.mark.parametrize(
    "row, gamma, want",
    [
        ([1, 2, 3, 9, 1, 2], 6, [3, 9, 1, 2, 3, 9]),  # "1 2" seen before: what followed, then periodically
        ([4, 5, 6, 4, 5, 7, 4, 5], 3, [7, 4, 5]),  # the latest match wins
        ([8, 1, 2, 3, 7, 2, 3], 2, [7, 2]),  # longest n first: "2 3" beats the later "3"
        ([1, 2, 3, 4], 3, [4, 4, 4]),  # no match: the last token repeated
    ],
)
def test_prompt_lookup_proposals(row, gamma, want):
    lookup = PromptLookup(max_ngram=3)
    buffer = torch.tensor([[0, 0] + row + [0, 0, 0]])  # left padding, then the unused tail of the buffer
    got = lookup._lookup(buffer, torch.tensor([2 + len(row)]), gamma)
    assert got.tolist() == [want]


def test_prompt_lookup_rejects_bad_ngram_lengths():
    with pytest.raises(ValueError, match="min_ngram <= max_ngram"):
        PromptLookup(max_ngram=1, min_ngram=2)
