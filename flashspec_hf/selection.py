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
        self.accepted = [0] * num_arms  # draft tokens accepted, all rows
        self.tested = [0] * num_arms  # draft tokens tested: accepted + one per rejection

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
        self.accepted[arm] += sum(accepted)
        self.tested[arm] += sum(accepted) + sum(n < gamma for n in accepted)
        self.observe(arm, sum(accepted) / (gamma * max(len(accepted), 1)))

    def observe(self, arm: int, reward: float) -> None:
        """Hook for selectors that keep their own reward statistics; ``reward`` in ``[0, 1]``."""


class UCB1(Selector):
    """UCB1 (Auer, Cesa-Bianchi & Fischer 2002): pick ``argmax mean_a + sqrt(c * ln t / n_a)``, each arm once first.

    Args:
        exploration: ``c``; 2 is the constant of the paper's regret bound.
    """

    def __init__(self, exploration: float = 2.0):
        self.exploration = exploration

    def reset(self, num_arms: int) -> None:
        super().reset(num_arms)
        self.reward_sum = [0.0] * num_arms

    def observe(self, arm: int, reward: float) -> None:
        self.reward_sum[arm] += reward

    def select(self) -> int:
        for arm, n in enumerate(self.pulls):
            if n == 0:
                return arm
        log_t = math.log(sum(self.pulls))
        scores = [
            s / n + math.sqrt(self.exploration * log_t / n) for s, n in zip(self.reward_sum, self.pulls, strict=True)
        ]
        return max(range(self.num_arms), key=scores.__getitem__)


class ThompsonSampling(Selector):
    """Thompson sampling with a Beta-Bernoulli model of per-token acceptance (Thompson 1933; Agrawal & Goyal 2012).

    Every tested draft token is a Bernoulli trial (accepted or the first rejection): the posterior of arm ``a``'s
    acceptance rate α is ``Beta(1 + accepted_a, 1 + rejected_a)``; the arm with the largest posterior draw drafts.
    Expected accepted tokens per step grow with α, so this also maximises τ.

    Args:
        seed: seed of the selector's own random generator (host side; generation randomness is untouched).
    """

    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)

    def select(self) -> int:
        draws = [
            self.rng.betavariate(1 + acc, 1 + tested - acc) for acc, tested in zip(self.accepted, self.tested, strict=True)
        ]
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


SELECTORS = {"thompson": ThompsonSampling, "ucb1": UCB1, "round_robin": RoundRobin, "fixed": FixedArm}


def make_selector(spec: str | Selector | None, num_arms: int) -> Selector:
    """Selector from a name in :data:`SELECTORS` (a fresh one) or an instance (kept as is); None = Thompson.

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
