"""Per-call statistics of a flashspec ``generate`` call, reachable as ``model.flashspec_stats``."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class FlashSpecStats:
    """What one ``generate(..., flashspec=True)`` call did.

    Attributes:
        arm_names: one name per arm: the draft source's name (its ``config.name_or_path``, ``prompt_lookup`` or
            ``assistant_<i>``), with ``@γ`` appended when several γ were given.
        num_assistant_tokens: ``γ``, draft tokens per step (the largest, when arms differ).
        arm_gammas: γ of each arm (default: ``num_assistant_tokens`` for every arm).
        step_arms: per step, the index of the arm that drafted it.
        step_accepted: per step, the accepted draft tokens of each row still generating at that step.
        step_seconds: time of each step (s): on CUDA between CUDA events recorded before and after it (a step
            queued behind others starts when they end; one launched on an idle GPU, as the static loop's last steps
            near ``max_new_tokens`` are, also counts the host's launch), on the CPU the host's wall time.
        step_gammas: per step, its draft tokens: the arm's γ, or fewer where its source drafted fewer (0: prompt
            lookup without a match, a plain step).
        new_tokens: tokens generated, all rows together.
        seconds: wall time of the call inside ``generate`` (s), setup included.
        setup_seconds: of ``seconds``, the time before the first step (s): caches, the prefills (on CUDA compiled,
            then captured as CUDA graphs, in a set-up's first calls), and on a set-up's first call the arm-cost
            calibration (the first compilations of a cost-aware call happen there).
        warmup_seconds: of ``seconds``, host time of the static loop's steps run eagerly before their CUDA graphs
            and of the steps' captures (s): the (other) compilations happen there, on a set-up's first calls only.
    """

    arm_names: list[str]
    num_assistant_tokens: int
    arm_gammas: list[int] | None = None
    step_arms: list[int] = field(default_factory=list)
    step_accepted: list[list[int]] = field(default_factory=list)
    step_seconds: list[float] = field(default_factory=list)
    step_gammas: list[int] = field(default_factory=list)
    new_tokens: int = 0
    seconds: float = 0.0
    setup_seconds: float = 0.0
    warmup_seconds: float = 0.0

    def __post_init__(self):
        if self.arm_gammas is None:
            self.arm_gammas = [self.num_assistant_tokens] * len(self.arm_names)

    def record(self, arm: int, accepted: list[int], gamma: int, seconds: float | None = None) -> None:
        """Add one step: the arm that drafted, each active row's accepted draft tokens, the step's draft tokens (the
        arm's γ, or fewer when its source drafted fewer, e.g. prompt lookup without a match) and its seconds."""
        self.step_gammas.append(gamma)
        self.step_arms.append(arm)
        self.step_accepted.append(accepted)
        if seconds is not None:
            self.step_seconds.append(seconds)

    @property
    def steps(self) -> int:
        """Steps (one draft, possibly empty, + one target verification each)."""
        return len(self.step_arms)

    @property
    def tau(self) -> float:
        """τ: mean tokens produced per row per step, accepted + 1 (the recovered or bonus token)."""
        counts = [n + 1 for step in self.step_accepted for n in step]
        return sum(counts) / max(len(counts), 1)

    @property
    def alpha(self) -> dict[str, float]:
        """α per arm that drafted: accepted / tested draft tokens, where a step tests its accepted tokens plus the
        first rejected one (if any); the maximum-likelihood per-token acceptance rate. NaN-free: unused arms
        are left out."""
        acc, tested = [0] * len(self.arm_names), [0] * len(self.arm_names)
        for arm, step, gamma in zip(self.step_arms, self.step_accepted, self.step_gammas, strict=True):
            acc[arm] += sum(step)
            tested[arm] += sum(step) + sum(n < gamma for n in step)
        return {name: acc[i] / tested[i] for i, name in enumerate(self.arm_names) if tested[i]}

    @property
    def arm_share(self) -> dict[str, float]:
        """Fraction of steps drafted by each arm."""
        return {name: self.step_arms.count(i) / max(self.steps, 1) for i, name in enumerate(self.arm_names)}

    @property
    def tokens_per_second(self) -> float:
        """Generated tokens per second of decoding (tokens/s), all rows together."""
        return self.new_tokens / self.seconds if self.seconds else 0.0
