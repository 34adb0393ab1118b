"""Selectors on simulated acceptance: the learning ones beat round-robin, the discounted ones follow a shift."""

import pytest

from benchmarks.regret import SETTINGS, run
from flashspec_hf import ThompsonSampling, UCB1
from flashspec_hf.selection import SELECTORS, make_selector


def _regret(setting, make, rounds, seeds=3):
    return sum(run(setting, make, seed, rounds)[0][-1] for seed in range(seeds)) / seeds


@pytest.mark.parametrize("make", [lambda s: UCB1(), lambda s: ThompsonSampling(seed=s)])
def test_learning_selectors_beat_round_robin(make):
    rr = _regret(SETTINGS["easy"], lambda s: SELECTORS["round_robin"](), 2000)
    assert _regret(SETTINGS["easy"], make, 2000) < 0.5 * rr


def test_discounting_follows_a_shifted_best_arm():
    shifting = [(0, (0.7, 0.5, 0.6)), (1000, (0.5, 0.6, 0.7))]
    plain = _regret(shifting, lambda s: ThompsonSampling(seed=s), 3000)
    discounted = _regret(shifting, lambda s: ThompsonSampling(seed=s, discount=0.99), 3000)
    assert discounted < plain


def test_every_named_selector_builds():
    for name in SELECTORS:
        assert 0 <= make_selector(name, 3).select() < 3
