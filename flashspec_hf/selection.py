"""Online draft selection: which assistant (arm) drafts the next step, from past acceptance only.

Exactness does not depend on the selector: the arm is chosen before the step's draft is sampled, from the
acceptance of earlier steps, so the verification of every step is an ordinary speculative-sampling step.

Reward of a step: the fraction of drafted tokens accepted, averaged over the batch rows that were still
generating, in ``[0, 1]``.
"""

from __future__ import annotations

import math
import random
from abc import ABC, abstractmethod


class Selector(ABC):
    """One small interface for every selector.

    ``reset(num_arms)`` is called at the start of each ``generate`` call that built the selector from a name;
    a selector instance passed by the user keeps its statistics across calls.
    """

    num_arms: int = 0

    def reset(self, num_arms: int) -> None:
        """Forget all statistics; ``num_arms`` arms."""
        self.num_arms = num_arms
        self.pulls = [0] * num_arms  # steps drafted by each arm

    def ensure(self, num_arms: int) -> None:
        """Reset if the selector has never been used or was used with another number of arms."""
        if self.num_arms != num_arms:
            self.reset(num_arms)

    @abstractmethod
    def select(self) -> int:
        """Index of the arm that drafts the next step."""

    def update(self, arm: int, accepted: list[int], gamma: int) -> None:
        """Record one step.

        Args:
            arm: the arm that drafted.
            accepted: accepted draft tokens of each row still generating (each in ``[0, γ]``).
            gamma: draft tokens per step (γ).
        """
        self.pulls[arm] += 1
        self.observe(arm, sum(accepted) / (gamma * max(len(accepted), 1)))

    def observe(self, arm: int, reward: float) -> None:
        """Hook for selectors that keep their own reward statistics; ``reward`` in ``[0, 1]``."""


class UCB1(Selector):
    """UCB1 (Auer, Cesa-Bianchi & Fischer 2002): pick ``argmax mean_a + sqrt(c * ln n / n_a)``, each arm once first.

    With ``discount < 1`` it is discounted UCB (Garivier & Moulines 2011): every step first multiplies all arms'
    reward sums and counts ``n_a`` by ``discount``, so old acceptance fades (effective memory ``1 / (1 - discount)``
    steps) and the choice follows a stream whose best arm changes.

    Args:
        exploration: ``c``; 2 is the constant of UCB1's regret bound.
        discount: in ``(0, 1]``; 1 is plain UCB1.
    """

    def __init__(self, exploration: float = 2.0, discount: float = 1.0):
        self.exploration = exploration
        self.discount = discount

    def reset(self, num_arms: int) -> None:
        super().reset(num_arms)
        self.reward_sum = [0.0] * num_arms
        self.weight = [0.0] * num_arms  # discounted pull counts

    def observe(self, arm: int, reward: float) -> None:
        self.reward_sum = [r * self.discount for r in self.reward_sum]
        self.weight = [w * self.discount for w in self.weight]
        self.reward_sum[arm] += reward
        self.weight[arm] += 1.0

    def select(self) -> int:
        for arm, n in enumerate(self.pulls):
            if n == 0:
                return arm
        log_n = math.log(max(sum(self.weight), 1.0 + 1e-9))
        scores = [
            s / w + math.sqrt(self.exploration * log_n / w) for s, w in zip(self.reward_sum, self.weight, strict=True)
        ]
        return max(range(self.num_arms), key=scores.__getitem__)


class ThompsonSampling(Selector):
    """Thompson sampling with a Beta-Bernoulli model of per-token acceptance (Thompson 1933; Agrawal & Goyal 2012).

    Every tested draft token is a Bernoulli trial (accepted or the first rejection): the posterior of arm ``a``'s
    acceptance rate α is ``Beta(1 + accepted_a, 1 + rejected_a)``; the arm with the largest posterior draw drafts.
    Expected accepted tokens per step grow with α, so this also maximises τ. With ``discount < 1`` it is discounted
    Thompson sampling (Raj & Kalyani 2017): all arms' counts are multiplied by ``discount`` every step.

    Args:
        seed: seed of the selector's own random generator (host side; generation randomness is untouched).
        discount: in ``(0, 1]``; 1 is plain Thompson sampling.
    """

    def __init__(self, seed: int = 0, discount: float = 1.0):
        self.rng = random.Random(seed)
        self.discount = discount

    def reset(self, num_arms: int) -> None:
        super().reset(num_arms)
        self.successes = [0.0] * num_arms
        self.failures = [0.0] * num_arms

    def update(self, arm: int, accepted: list[int], gamma: int) -> None:
        super().update(arm, accepted, gamma)
        self.successes = [x * self.discount for x in self.successes]
        self.failures = [x * self.discount for x in self.failures]
        self.successes[arm] += sum(accepted)
        self.failures[arm] += sum(n < gamma for n in accepted)

    def select(self) -> int:
        draws = [self.rng.betavariate(1 + a, 1 + b) for a, b in zip(self.successes, self.failures, strict=True)]
        return max(range(self.num_arms), key=draws.__getitem__)


class RoundRobin(Selector):
    """Switches arm every step (0, 1, …, K-1, 0, …): no learning; for tests and fixed baselines."""

    def select(self) -> int:
        return sum(self.pulls) % self.num_arms


class FixedArm(Selector):
    """Always the same arm (a single-assistant baseline)."""

    def __init__(self, arm: int = 0):
        self.arm = arm

    def select(self) -> int:
        if not 0 <= self.arm < self.num_arms:
            raise ValueError(f"FixedArm({self.arm}) but only {self.num_arms} assistants were given")
        return self.arm


SELECTORS = {
    "thompson": ThompsonSampling,
    "ucb1": UCB1,
    "discounted_thompson": lambda: ThompsonSampling(discount=0.998),
    "discounted_ucb": lambda: UCB1(discount=0.998),
    "round_robin": RoundRobin,
    "fixed": FixedArm,
}


def make_selector(spec: str | Selector | None, num_arms: int) -> Selector:
    """Selector from a name in :data:`SELECTORS` (a fresh one; the discounted ones use ``discount=0.998``, a memory of about 500 steps) or an
    instance (kept as is); None = Thompson.

    Raises:
        ValueError: unknown name. TypeError: neither a name nor a :class:`Selector`.
    """
    if spec is None:
        spec = "thompson"
    if isinstance(spec, str):
        if spec not in SELECTORS:
            raise ValueError(f"unknown selector {spec!r}; choose one of {sorted(SELECTORS)} or pass a Selector")
        selector = SELECTORS[spec]()
        selector.reset(num_arms)
        return selector
    if not isinstance(spec, Selector):
        raise TypeError(f"selector must be a name or a flashspec_hf.Selector, got {type(spec).__name__}")
    spec.ensure(num_arms)
    return spec
