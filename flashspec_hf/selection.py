"""Online draft selection: which arm drafts the next step, from past steps only.

An *arm* is a draft source (an assistant model or prompt lookup) with its speculation length γ; with
``num_assistant_tokens=[2, 4, 8]`` every source is paired with every γ. Exactness does not depend on the selector:
the arm is chosen before the step's draft is sampled, from the outcome of earlier steps, so the verification of
every step is an ordinary speculative-sampling step.

Every selector values an arm by the tokens a step is expected to produce, ``1 + E[accepted]`` (accepted draft
tokens plus the recovered or bonus token), or, with ``cost_aware=True``, by those tokens per second of step time
(a bigger draft model accepts more but costs more: acceptance alone always picks the biggest). A cost-aware
selector is given each arm's step seconds before the call's first step (:meth:`Selector.set_costs`, calibrated
once per set-up by :mod:`flashspec_hf.costs`) and is offered a plain-decoding arm (γ = 0: one target token per
step, no draft), so it never has to be slower than plain decoding. With ``conservative=δ`` it is a conservative
bandit (Wu, Shariff, Lattimore & Szepesvári 2016): it explores only with what the call can afford, so each call
keeps at least ``1 - δ`` of plain decoding's tokens per second of calibrated step time (:meth:`Selector.choose`).
Its choices depend on timing only through that calibration, which is kept: with ``torch.manual_seed``, later calls
with the same set-up repeat exactly.

Bandit selectors (UCB1, Thompson sampling, their discounted variants) learn from the drafting arm's acceptance
only. Thompson sampling may also start each call from the prompt (``prompt_weight``): before the first step, every
arm is scored on the prompt's last tokens, where its source's greedy guesses are compared with the target's (read
from the prefills; :func:`~flashspec_hf.drafts.prompt_agreement`), so the draft of the prompt's domain leads from
the first step instead of after exploring the others. :class:`Hedge` is full-information: after each step every arm
is scored on the verified tokens (its greedy agreement with them), at the price of every assistant catching up on
the new tokens each step.
"""

from __future__ import annotations

import math
import random
import warnings
from abc import ABC, abstractmethod


def expected_accepted(alpha: float, gamma: int) -> float:
    """E[accepted draft tokens] of a step with per-token acceptance rate α and γ drafts: Σ_{k=1..γ} α^k
    (Leviathan et al. 2023, eq. 1, without the bonus token)."""
    return sum(alpha**k for k in range(1, gamma + 1))


class Selector(ABC):
    """One small interface for every selector.

    ``reset(num_arms, gammas)`` is called at the start of each ``generate`` call that built the selector from a
    name; a selector instance passed by the user keeps its statistics across calls with the same arms, and for the
    arms every batch size has when a call on the other side of batch 1 adds or drops the mixed arms (:meth:`ensure`).

    Args:
        cost_aware: value arms by expected tokens per second of step time instead of tokens per step.
        conservative: δ in ``[0, 1)``, or None; needs ``cost_aware``: a step may draft with the selected arm only if,
            with that arm's pessimistic tokens per step (1 + :meth:`pessimistic_accepted`), the call would still have
            produced ``1 - δ`` of the tokens plain decoding produces in the same calibrated step seconds; otherwise
            the best affordable arm, or the plain arm, decodes the step (Wu et al. 2016, "Conservative Bandits",
            with plain decoding as the baseline, whose value the calibration gives exactly).

    Raises:
        ValueError: ``conservative`` outside ``[0, 1)``, or given without ``cost_aware``.
    """

    num_arms: int = 0
    arm_state: tuple[str, ...] = ("pulls", "chosen", "costs")
    """The per-arm lists (one entry per arm, in arm order) that :meth:`ensure` keeps for the arms a call shares with
    the previous one. A subclass adds its own; one that learns from every arm at every step
    (:attr:`full_information`) is never kept in part, since a new arm could not catch up."""
    shared: int | None = None
    """The leading arms shared by every call of the pool, as the last :meth:`ensure` was told."""
    full_information: bool = False
    """True for selectors that want every arm scored after every step (:meth:`update_all`)."""
    side_evidence: bool = False
    """True for selectors that take the side evidence the static backend gathers for free under greedy decoding
    (:meth:`update_all` after each step's :meth:`update`; :mod:`flashspec_hf.evidence`)."""

    @property
    def wants_prior(self) -> bool:
        """True for selectors that want every arm scored on the prompt before a call's first step (:meth:`prior`)."""
        return False

    def __init__(self, cost_aware: bool = False, conservative: float | None = None):
        if conservative is not None and not 0 <= conservative < 1:
            raise ValueError(f"conservative is the fraction δ of plain decoding's speed a call may risk, in [0, 1); "
                             f"got {conservative}")
        if conservative is not None and not cost_aware:
            raise ValueError("conservative needs cost_aware=True: the guard compares the arms' calibrated step times "
                             "with plain decoding's")
        self.cost_aware = cost_aware
        self.conservative = conservative
        self.allowed: list[bool] | None = None  # the arms _best may pick (None: all); set by choose

    def reset(self, num_arms: int, gammas: list[int] | None = None) -> None:
        """Forget all statistics; ``num_arms`` arms drafting ``gammas[a]`` tokens per step (default all 4)."""
        self.num_arms = num_arms
        self.gammas = list(gammas) if gammas is not None else [4] * num_arms
        self.pulls = [0] * num_arms  # steps drafted by each arm, whose outcome was reported
        self.chosen = [0] * num_arms  # steps each arm was chosen for (ahead of pulls while outcomes are in flight)
        self.costs = [1.0] * num_arms  # step seconds per arm (cost-aware selectors; set_costs)
        self.plain = next((a for a, g in enumerate(self.gammas) if g == 0), None)  # the plain-decoding arm
        Selector.begin_call(self)  # a fresh account (a subclass's begin_call would weaken statistics not yet made)

    def set_costs(self, costs: list[float]) -> None:
        """Step seconds of each arm (> 0), used by cost-aware selectors; given before a call's first step."""
        if len(costs) != self.num_arms or min(costs) <= 0:
            raise ValueError(f"set_costs needs {self.num_arms} positive step times, got {costs}")
        self.costs = list(costs)

    def ensure(self, num_arms: int, gammas: list[int] | None = None, shared: int | None = None) -> None:
        """Make the selector ready for a call's arms. It keeps what it learnt when they are the previous call's arms,
        and for the ``shared`` leading arms when only the arms after them differ (a batch size on the other side of
        1 adds or drops the mixed arms: those start fresh); otherwise it starts over (first use, another pool or γ
        list), and warns when that forgets steps it learnt from.

        Args:
            num_arms: the number of the call's arms; gammas: their γ (None: not compared).
            shared: how many leading arms every call of the pool has, whatever its batch size (the arms before the
                mixed ones); kept (:attr:`arm_state`) when the previous call said as many and had the same γ there.

        Raises:
            ValueError: ``shared`` outside ``[1, num_arms]``.
        """
        if shared is not None and not 1 <= shared <= num_arms:
            raise ValueError(f"shared counts leading arms of the call's {num_arms}, from 1; got {shared}")
        if self.num_arms == num_arms and (gammas is None or self.gammas == list(gammas)):
            self.shared = shared
            return
        keep = bool(self.num_arms) and shared is not None and shared == self.shared and gammas is not None \
            and self.gammas[:shared] == list(gammas)[:shared] and not self.full_information
        kept = {name: getattr(self, name)[:shared] for name in self.arm_state} if keep else {}
        if self.num_arms and not keep and sum(self.pulls):
            now = f"{num_arms}" + (f" (γ {list(gammas)})" if gammas is not None else "")
            warnings.warn(f"{type(self).__name__} learnt over {self.num_arms} arms (γ {self.gammas}) and this call "
                          f"has {now}: it starts over. Keep one selector per pool and γ list to keep what it learns",
                          stacklevel=2)
        self.reset(num_arms, gammas)
        self.shared = shared
        for name, values in kept.items():
            getattr(self, name)[:shared] = values

    def begin_call(self) -> None:
        """Called at the start of every ``generate`` call, after :meth:`ensure`: starts the call's account of tokens
        and step seconds (:meth:`choose`); a selector kept across calls may also weaken what it learnt, since the
        next prompt's domain may differ."""
        self.call_tokens = 0.0  # tokens per row the call's steps gave (1 per step whose outcome is in flight)
        self.call_seconds = 0.0  # calibrated step seconds of the call's steps
        self.empty = [0] * self.num_arms  # the call's reported steps per arm that drafted nothing (no lookup match)
        self.reported = [0] * self.num_arms  # the call's reported steps per arm

    @abstractmethod
    def select(self) -> int:
        """Index of the arm that drafts the next step."""

    def candidates(self) -> list[int]:
        """The arms :meth:`select` may ever return (all of them; :class:`FixedArm` its own): the static backend
        warms these up before the selector is asked."""
        return list(range(self.num_arms))

    def choose(self, arm: int | None = None) -> int:
        """:meth:`select` (or ``arm``, an arm the backend must warm up), counted in ``chosen`` at once (the loops
        call this). The static loop reads outcomes a few steps late, so ``pulls`` lags behind the choices made.

        A conservative selector replaces its selection by the plain arm when the call cannot afford it: when
        ``tokens + 1 + p · pessimistic_accepted(arm) < (1 - δ) (seconds + cost(arm)) / cost(plain)``, ``tokens``
        being the call's tokens per row so far (a step still in flight counted as 1, its worst case), ``seconds`` its
        calibrated step seconds (a step that drafted nothing counted as a plain one) and ``p`` the arm's
        :meth:`drafting_rate`. Every step then keeps the call at ``1 - δ`` of plain decoding or above, unless an
        arm yields less than its pessimistic estimate; the plain arm's steps add ``δ`` tokens of slack each, which
        is what exploration spends. Selectors that pick the arm of largest value (UCB1, Thompson sampling) pick
        among the arms the call can afford instead; the others fall back to the plain arm."""
        if arm is None:
            arm = self.select()
            if not self.affordable(arm):  # the best arm it can afford (argmax selectors), else the plain arm
                self.allowed = [self.affordable(a) for a in range(self.num_arms)]
                arm = self.select()
                self.allowed = None
                arm = arm if self.affordable(arm) else self.plain
        self.chosen[arm] += 1
        self.call_tokens += 1.0
        self.call_seconds += self.costs[arm]
        return arm

    def affordable(self, arm: int) -> bool:
        """Whether a conservative selector may draft the next step with ``arm`` (:meth:`choose`); always True for the
        plain arm (the baseline, even when an arm that yielded less than its pessimistic estimate took the call below
        the floor) and for a selector that is not conservative, not cost-aware, or has no plain arm."""
        if self.conservative is None or not self.cost_aware or self.plain is None or arm == self.plain:
            return True
        keep = (1.0 - self.conservative) / self.costs[self.plain]  # tokens per second of step time to keep
        tokens = 1.0 + self.drafting_rate(arm) * self.pessimistic_accepted(arm)
        return self.call_tokens + tokens >= keep * (self.call_seconds + self.costs[arm])

    def pessimistic_accepted(self, arm: int) -> float:
        """Accepted tokens per row of a step of ``arm`` that drafts, at worst as far as the selector can tell: 0
        unless a selector's statistics give a lower confidence bound."""
        return 0.0

    def drafting_rate(self, arm: int) -> float:
        """The share of the call's steps of ``arm`` that drafted, ``(drafted + 1) / (reported + 1)``: 1 for an arm
        that always drafts; below 1 for prompt lookup once it found no match (its step was then a plain one)."""
        return (self.reported[arm] - self.empty[arm] + 1) / (self.reported[arm] + 1)

    def update(self, arm: int, accepted: list[int], gamma: int) -> None:
        """Record one step.

        Args:
            arm: the arm that drafted.
            accepted: accepted draft tokens of each row still generating (each in ``[0, γ]``).
            gamma: draft tokens of the step (γ; 0 for the plain-decoding arm, and for a step whose source drafted
                nothing, e.g. prompt lookup without a match: no evidence of the arm's acceptance).
        """
        self.pulls[arm] += 1
        self.reported[arm] += 1
        self.call_tokens += sum(accepted) / max(len(accepted), 1)  # the step's 1 was counted by choose
        if gamma or not self.gammas[arm]:
            self.observe(arm, sum(accepted) / (gamma * max(len(accepted), 1)) if gamma else 0.0)
        else:  # a plain step, for which choose charged the arm's cost
            self.empty[arm] += 1
            if self.plain is not None:
                self.call_seconds -= self.costs[arm] - self.costs[self.plain]

    def observe(self, arm: int, reward: float) -> None:
        """Hook for selectors that keep their own reward statistics; ``reward`` = accepted / drafted in ``[0, 1]``
        (0 for the plain-decoding arm, which drafts nothing)."""

    def update_all(self, successes: list[float], trials: list[float]) -> None:
        """Evidence hook: each arm's agreeing tokens and tested tokens on the step's verified tokens, every arm's
        (full information) or, with :attr:`side_evidence`, the arms that did not draft it and were scored for free
        (0 and 0 for the others)."""

    def prior(self, successes: list[float], trials: list[float]) -> None:
        """Prompt hook (:attr:`wants_prior`), before a call's first step and after :meth:`begin_call`: per arm, the
        prompt positions where its source's greedy guess equals the target's greedy token, and the positions scored
        (0 for an arm with no guesses, e.g. the plain arm)."""

    def step_cost(self, arm: int) -> float:
        """Step seconds of ``arm`` (:meth:`set_costs`; 1 when not cost-aware)."""
        return self.costs[arm] if self.cost_aware else 1.0

    def value(self, arm: int, accepted: float) -> float:
        """Tokens per step ``1 + p · accepted`` of ``arm`` (per second of step time ``p c_a + (1 - p) c_plain`` when
        cost-aware), ``p`` its :meth:`drafting_rate`: a step that drafts nothing is a plain one."""
        p = self.drafting_rate(arm)
        plain = self.step_cost(self.plain) if self.plain is not None else self.step_cost(arm)
        return (1.0 + p * accepted) / (p * self.step_cost(arm) + (1 - p) * plain)

    def _best(self, values: list[float]) -> int:
        """The arm of largest value among those :meth:`choose` allows (all, unless it restricts them)."""
        arms = range(self.num_arms)
        return max((a for a in arms if self.allowed is None or self.allowed[a]), key=values.__getitem__)


class UCB1(Selector):
    """UCB1 (Auer, Cesa-Bianchi & Fischer 2002): the arm maximising the optimistic index
    ``u_a = mean_a + sqrt(c ln n / n_a)`` of its reward (accepted / drafted), each arm once first.

    Arms of different γ or cost are compared by the optimistic value ``(1 + γ_a u_a) / cost_a``; with one γ and
    no cost that is the plain UCB1 choice. With ``discount < 1`` it is discounted UCB (Garivier & Moulines 2011):
    every step first multiplies all arms' reward sums and counts by ``discount``, so old acceptance fades
    (memory ``1 / (1 - discount)`` steps) and the choice follows a stream whose best arm changes.

    Args:
        exploration: ``c``; 2 is the constant of UCB1's regret bound.
        discount: in ``(0, 1]``; 1 is plain UCB1.
        cost_aware, conservative: see :class:`Selector` (the pessimistic accepted tokens of a step are ``γ l_a``, with
            the lower confidence bound ``l_a = mean_a - sqrt(c ln n / n_a)``, as conservative UCB has it).
    """

    arm_state = (*Selector.arm_state, "reward_sum", "weight")

    def __init__(self, exploration: float = 2.0, discount: float = 1.0, cost_aware: bool = False,
                 conservative: float | None = None):
        super().__init__(cost_aware, conservative)
        self.exploration = exploration
        self.discount = discount

    def reset(self, num_arms: int, gammas: list[int] | None = None) -> None:
        super().reset(num_arms, gammas)
        self.reward_sum = [0.0] * num_arms
        self.weight = [0.0] * num_arms  # discounted pull counts

    def observe(self, arm: int, reward: float) -> None:
        self.reward_sum = [r * self.discount for r in self.reward_sum]
        self.weight = [w * self.discount for w in self.weight]
        self.reward_sum[arm] += reward
        self.weight[arm] += 1.0

    def select(self) -> int:
        waiting = [a for a in range(self.num_arms) if not self.pulls[a] and (self.allowed is None or self.allowed[a])]
        if waiting:  # each arm once first; while outcomes are in flight, the least chosen of them
            return min(waiting, key=self.chosen.__getitem__)
        # an arm whose steps never drafted (prompt lookup without a match) has no reward yet: the optimistic 1
        index = [s / w + r if w else 1.0 for s, w, r in zip(self.reward_sum, self.weight, self._radii(), strict=True)]
        return self._best([self.value(a, self.gammas[a] * u) for a, u in enumerate(index)])

    def pessimistic_accepted(self, arm: int) -> float:
        w = self.weight[arm]
        return self.gammas[arm] * max(0.0, self.reward_sum[arm] / w - self._radii()[arm]) if w else 0.0

    def _radii(self) -> list[float]:
        """Each arm's confidence radius ``sqrt(c ln n / n_a)`` from its (discounted) pulls ``n_a`` (``n`` at least
        2, so that one pull is not taken for certainty; inf for an arm never pulled)."""
        scale = self.exploration * math.log(max(sum(self.weight), 2.0))
        return [math.sqrt(scale / w) if w else math.inf for w in self.weight]


class ThompsonSampling(Selector):
    """Thompson sampling with a Beta-Bernoulli model of per-token acceptance (Thompson 1933; Agrawal & Goyal 2012).

    Every tested draft token is a Bernoulli trial (accepted, or the first rejection): the posterior of arm ``a``'s
    acceptance rate α is ``Beta(1 + accepted_a, 1 + rejected_a)``; the arm whose posterior draw has the largest
    value (``1 + Σ_k α^k`` tokens per step, per second when cost-aware) drafts. With ``discount < 1`` it is
    discounted Thompson sampling (Raj & Kalyani 2017): all arms' counts are multiplied by ``discount`` every step.
    With ``call_memory``, a selector kept across ``generate`` calls scales each arm's counts down to at most that
    many tested draft tokens when a call starts: its acceptance estimate stays, its confidence becomes that of a few
    steps, so a new prompt from another domain (chat after code) moves the choice within a few steps instead of
    the ``1 / (1 - discount)`` the discount alone takes. With ``prompt_weight``, each call then adds the prompt's
    evidence (:meth:`Selector.prior`) as at most that many tested draft tokens per scored arm (fewer when fewer
    prompt positions were scored), at the arm's agreement rate on the prompt: a prior from the prompt's own domain.

    Args:
        seed: seed of the selector's own random generator (host side; generation randomness is untouched).
        discount: in ``(0, 1]``; 1 is plain Thompson sampling.
        cost_aware, conservative: see :class:`Selector` (the pessimistic accepted tokens of a step are ``Σ_k l^k``, with
            ``l`` two standard deviations below the posterior mean of α).
        call_memory: tested draft tokens per arm kept at the start of a call (> 0), or None to keep everything.
        prompt_weight: most tested draft tokens the prompt's agreement counts for per arm (0: the prompt is not
            read; may be changed between calls).
        side_evidence: also count, after each step, the tested draft tokens of the arms that did not draft it,
            where the backend gets them for free (:mod:`flashspec_hf.evidence`: the static backend's draft models,
            under greedy decoding), as a bandit with side observations does (Mannor & Shamir 2011).
    """

    arm_state = (*Selector.arm_state, "successes", "failures")

    def __init__(self, seed: int = 0, discount: float = 1.0, cost_aware: bool = False,
                 call_memory: float | None = None, prompt_weight: float = 0.0, conservative: float | None = None,
                 side_evidence: bool = False):
        super().__init__(cost_aware, conservative)
        self.rng = random.Random(seed)
        self.discount = discount
        self.call_memory = call_memory
        self.prompt_weight = prompt_weight
        self.side_evidence = side_evidence

    @property
    def wants_prior(self) -> bool:
        return self.prompt_weight > 0

    def reset(self, num_arms: int, gammas: list[int] | None = None) -> None:
        super().reset(num_arms, gammas)
        self.successes = [0.0] * num_arms
        self.failures = [0.0] * num_arms

    def update(self, arm: int, accepted: list[int], gamma: int) -> None:
        super().update(arm, accepted, gamma)
        self.successes = [x * self.discount for x in self.successes]
        self.failures = [x * self.discount for x in self.failures]
        self.successes[arm] += sum(accepted)
        self.failures[arm] += sum(n < gamma for n in accepted)

    def update_all(self, successes: list[float], trials: list[float]) -> None:
        for arm, (agree, tested) in enumerate(zip(successes, trials, strict=True)):
            self.successes[arm] += agree
            self.failures[arm] += tested - agree

    def begin_call(self) -> None:
        super().begin_call()
        if self.call_memory is None:
            return
        for arm in range(self.num_arms):
            scale = min(1.0, self.call_memory / max(self.successes[arm] + self.failures[arm], 1e-12))
            self.successes[arm] *= scale
            self.failures[arm] *= scale

    def prior(self, successes: list[float], trials: list[float]) -> None:
        """Adds ``min(prompt_weight, scored)`` tested draft tokens to each scored arm at its agreement rate (a prompt
        shorter than the weight counts for what it holds). An arm whose source has no guesses (an early exit, a
        user's source) keeps its posterior: knowing nothing of it, Thompson sampling tries it. Giving it the scored
        arms' pooled rate instead would judge it by other sources' agreement: beside prompt lookup alone (the
        TinyLlama pool: early exits + prompt lookup), that is prompt lookup's, unrelated to the early exits'."""
        for arm, (agree, scored) in enumerate(zip(successes, trials, strict=True)):
            if scored:
                weight = min(self.prompt_weight, scored)
                self.successes[arm] += weight * agree / scored
                self.failures[arm] += weight * (scored - agree) / scored

    def select(self) -> int:
        draws = [self.rng.betavariate(1 + a, 1 + b) for a, b in zip(self.successes, self.failures, strict=True)]
        return self._best([self.value(a, expected_accepted(x, self.gammas[a])) for a, x in enumerate(draws)])

    def pessimistic_accepted(self, arm: int) -> float:
        a, b = 1 + self.successes[arm], 1 + self.failures[arm]  # the Beta posterior of α
        mean = a / (a + b)
        low = mean - 2 * math.sqrt(mean * (1 - mean) / (a + b + 1))
        return expected_accepted(max(0.0, low), self.gammas[arm])


class Hedge(Selector):
    """Full-information selection with Hedge (exponential weights; Freund & Schapire 1997), as HedgeSpec
    (ICLR 2026) proposes for draft selection: not a bandit, every arm is scored every step.

    After a step, each arm's greedy predictions of the verified tokens are compared with them (no extra target
    forward: the assistants only catch up on the new tokens, which they would do anyway when picked). An arm's
    leading agreement is a censored sample of its acceptance, exactly as a drafted step is: ``successes`` agreeing
    tokens out of ``trials`` tested. The step's gain of arm ``a`` is its value at the step's agreement rate,
    normalised to ``[0, 1]``; the arm is drawn with probability ``∝ exp(η_t G_a)`` of the (discounted) cumulative
    gains ``G``, with the anytime rate ``η_t = learning_rate · sqrt(ln K / t)``.

    Args:
        learning_rate: scale of ``η_t``; larger follows the leader sooner.
        discount: in ``(0, 1]``, multiplies past gains every step (1: plain Hedge).
        seed: seed of the selector's own random generator.
        cost_aware, conservative: see :class:`Selector` (a step's pessimistic accepted tokens are its worst case, 0).
    """

    full_information = True

    def __init__(self, learning_rate: float = 2.0, discount: float = 1.0, seed: int = 0, cost_aware: bool = False,
                 conservative: float | None = None):
        super().__init__(cost_aware, conservative)
        self.learning_rate = learning_rate
        self.discount = discount
        self.rng = random.Random(seed)

    def reset(self, num_arms: int, gammas: list[int] | None = None) -> None:
        super().reset(num_arms, gammas)
        self.gains = [0.0] * num_arms
        self.rounds = 0.0  # discounted number of scored steps

    def update_all(self, successes: list[float], trials: list[float]) -> None:
        values = [
            self.value(a, expected_accepted(s / t if t else 0.0, self.gammas[a]))
            for a, (s, t) in enumerate(zip(successes, trials, strict=True))
        ]
        top = (1 + max(self.gammas)) / min(self.step_cost(a) for a in range(self.num_arms))
        self.gains = [g * self.discount + v / top for g, v in zip(self.gains, values, strict=True)]
        self.rounds = self.rounds * self.discount + 1

    def select(self) -> int:
        if not self.rounds:
            return self.rng.randrange(self.num_arms)
        eta = self.learning_rate * math.sqrt(math.log(max(self.num_arms, 2)) / self.rounds)
        top = max(self.gains)
        weights = [math.exp(eta * (g - top)) for g in self.gains]
        return self.rng.choices(range(self.num_arms), weights=weights)[0]


class RoundRobin(Selector):
    """Switches arm every step (0, 1, …, K-1, 0, …): no learning; for tests and fixed baselines."""

    def select(self) -> int:
        return sum(self.chosen) % self.num_arms


class FixedArm(Selector):
    """Always the same arm (a single-assistant baseline)."""

    def __init__(self, arm: int = 0):
        super().__init__()
        self.arm = arm

    def select(self) -> int:
        if not 0 <= self.arm < self.num_arms:
            raise ValueError(f"FixedArm({self.arm}) but only {self.num_arms} arms were given")
        return self.arm

    def candidates(self) -> list[int]:
        return [self.arm]


SELECTORS = {
    "thompson": ThompsonSampling,
    "ucb1": UCB1,
    "hedge": Hedge,
    "discounted_thompson": lambda: ThompsonSampling(discount=0.998),
    "discounted_ucb": lambda: UCB1(discount=0.998),
    "cost_aware_thompson": lambda: ThompsonSampling(cost_aware=True),
    "cost_aware_discounted_thompson": lambda: ThompsonSampling(discount=0.99, cost_aware=True, side_evidence=True),
    "cost_aware_ucb1": lambda: UCB1(exploration=0.5, cost_aware=True),
    "cost_aware_hedge": lambda: Hedge(cost_aware=True),
    "round_robin": RoundRobin,
    "fixed": FixedArm,
}


def make_selector(spec: str | Selector | None) -> Selector:
    """Selector from a name in :data:`SELECTORS` (a fresh one; ``discounted_*`` use ``discount=0.998``, a memory
    of about 500 steps; ``cost_aware_discounted_thompson`` 0.99, about 100 steps, with side evidence, for one
    selector serving a stream of prompts whose domain changes: replayed on 72 held-out prompts it kept ≥ 0.98× its
    best fixed arm in every domain, against 0.90–0.94× with the ``call_memory`` of 8 it had until 2026-12-06
    (``benchmarks/results/selection_replay_cpu_2026-12-06``); on the H200 (24 prompts a domain, 2026-12-06) it
    reached 0.895× / 0.983× / 0.966× on chat / code / prose, its steps costing 1.05× a fixed arm's and its costs then
    timed from the host (``benchmarks/results/h200_2026-12-06_side_evidence``). Where no side evidence comes (the CPU's dynamic
    loop, sampling, pools without draft models of their own, e.g. early exits and prompt lookup) it is discount 0.99
    alone: replayed, 0.959–0.971× on chat (0.942× for the worst seed) and ≥ 0.968× elsewhere (0.957×); on the CPU
    demo no domain got slower. It does not read the prompt: with a ``prompt_weight`` of 16 it was slower on the H200 in
    10 of 12 domain comparisons over four runs) or an instance (kept as is, with what it learned); None =
    Thompson. The caller fits it to its arms with :meth:`Selector.ensure`.

    Raises:
        ValueError: unknown name. TypeError: neither a name nor a :class:`Selector`.
    """
    if spec is None:
        spec = "thompson"
    if isinstance(spec, str):
        if spec not in SELECTORS:
            raise ValueError(f"unknown selector {spec!r}; choose one of {sorted(SELECTORS)} or pass a Selector")
        return SELECTORS[spec]()
    if not isinstance(spec, Selector):
        raise TypeError(f"selector must be a name or a flashspec_hf.Selector, got {type(spec).__name__}")
    return spec
