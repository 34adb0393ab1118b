"""Regret of the draft selectors on simulated acceptance (CPU): python -m benchmarks.regret [--seeds N]

Each arm is an assistant with per-token acceptance rate α_a and step cost c_a. A step with arm a drafts γ = 4
tokens and accepts the first n of them, n ~ min(Geometric, γ) with P(n >= k) = α_a^k: the accepted counts the
engine feeds the selector. Cost-aware selectors are given the step costs c_a up front, as the engine gives them
its calibrated step times (flashspec_hf.costs). A full-information selector (Hedge)
also gets every other arm's censored agreement, simulated the same way. An arm's value is its expected tokens per
unit of step time, v_a = (1 + E[n | α_a]) / c_a; regret is the pseudo-regret Σ_t (v*_t - v_{a_t}) against the best
arm of each segment. With unit costs that is regret in expected accepted tokens. Settings (T = 10,000):

- easy: K = 3, α = (0.5, 0.6, 0.7);
- hard: K = 5, small gaps, α = (0.60, 0.62, 0.64, 0.66, 0.68);
- shifting: K = 3, the best arm changes every 2,000 rounds (α cycles through (0.7, 0.5, 0.6) rotations);
- costly: K = 3, α = (0.55, 0.75, 0.9) at step costs (1.0, 1.4, 2.6) (a small, medium and large assistant):
  the most accepting arm is the slowest; arm 1 gives the most tokens per second.

Writes benchmarks/results/regret.csv (setting, selector, t, mean, ci95 over seeds), regret.png and
arm_share.png (the shifting setting), and prints a table with the UCB1 bound
Σ_a 8 ln T / Δ_a + (1 + π²/3) Σ_a Δ_a (Auer et al. 2002, Thm 1; Δ in expected reward per step, reward = n / γ).
"""

import argparse
import csv
import math
import random
from pathlib import Path

import numpy as np

from flashspec_hf.selection import Hedge, RoundRobin, ThompsonSampling, UCB1, expected_accepted

GAMMA, T = 4, 10_000
SETTINGS = {
    "easy": [(0, (0.5, 0.6, 0.7))],
    "hard": [(0, (0.60, 0.62, 0.64, 0.66, 0.68))],
    "shifting": [(start, (0.7, 0.5, 0.6)[i % 3 :] + (0.7, 0.5, 0.6)[: i % 3]) for i, start in enumerate(range(0, T, 2000))],
    "costly": [(0, (0.55, 0.75, 0.9))],
}
COSTS = {"costly": (1.0, 1.4, 2.6)}  # step seconds per arm (default: 1 for every arm)
SELECTORS = {
    "ucb1": lambda seed: UCB1(),
    "thompson": lambda seed: ThompsonSampling(seed=seed),
    "hedge": lambda seed: Hedge(seed=seed),
    "discounted_ucb": lambda seed: UCB1(discount=0.998),
    "discounted_thompson": lambda seed: ThompsonSampling(seed=seed, discount=0.998),
    "discounted_hedge": lambda seed: Hedge(seed=seed, discount=0.998),
    "cost_aware_ucb1": lambda seed: UCB1(cost_aware=True),
    "cost_aware_thompson": lambda seed: ThompsonSampling(seed=seed, cost_aware=True),
    "cost_aware_hedge": lambda seed: Hedge(seed=seed, cost_aware=True),
    "round_robin": lambda seed: RoundRobin(),
}
OUT = Path(__file__).parent / "results"


def accepted(alpha: float, rng: random.Random) -> int:
    n = 0
    while n < GAMMA and rng.random() < alpha:
        n += 1
    return n


def run(setting: list, make, seed: int, rounds: int = T, costs: tuple | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Cumulative regret ``[rounds]`` and the arm chosen ``[rounds]`` for one seed."""
    rng = random.Random(1_000 + seed)
    num_arms = len(setting[0][1])
    costs = costs or (1.0,) * num_arms
    selector = make(seed)
    selector.reset(num_arms, [GAMMA] * num_arms)
    selector.set_costs(list(costs))
    regret, arms = np.zeros(rounds), np.zeros(rounds, dtype=np.int8)
    segment, total = 0, 0.0
    for t in range(rounds):
        if segment + 1 < len(setting) and t >= setting[segment + 1][0]:
            segment += 1
        alphas = setting[segment][1]
        values = [(1 + expected_accepted(a, GAMMA)) / c for a, c in zip(alphas, costs, strict=True)]
        arm = selector.choose()
        counts = [accepted(a, rng) for a in alphas] if selector.full_information else None
        n = counts[arm] if counts else accepted(alphas[arm], rng)
        selector.update(arm, [n], GAMMA)
        if counts:
            selector.update_all(counts, [k + (k < GAMMA) for k in counts])
        total += max(values) - values[arm]
        regret[t], arms[t] = total, arm
    return regret, arms


def ucb1_bound(alphas: tuple) -> float:
    means = [expected_accepted(a, GAMMA) / GAMMA for a in alphas]
    gaps = [max(means) - m for m in means if m < max(means)]
    return sum(8 * math.log(T) / d for d in gaps) + (1 + math.pi**2 / 3) * sum(gaps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=100)
    args = parser.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    OUT.mkdir(exist_ok=True)
    checkpoints = np.unique(np.linspace(0, T - 1, 101).astype(int))
    rows, finals, shares = [], {}, {}
    fig, axes = plt.subplots(1, len(SETTINGS), figsize=(20, 4.5))
    for ax, (name, setting) in zip(axes, SETTINGS.items(), strict=True):
        for sel, make in SELECTORS.items():
            runs = [run(setting, make, seed, costs=COSTS.get(name)) for seed in range(args.seeds)]
            regrets = np.stack([r for r, _ in runs])  # [seeds, T]
            mean, ci = regrets.mean(0), 1.96 * regrets.std(0, ddof=1) / math.sqrt(args.seeds)
            rows += [(name, sel, int(t) + 1, mean[t], ci[t]) for t in checkpoints]
            finals[name, sel] = (mean[-1], ci[-1])
            ax.plot(checkpoints + 1, mean[checkpoints], label=sel)
            ax.fill_between(checkpoints + 1, (mean - ci)[checkpoints], (mean + ci)[checkpoints], alpha=0.2)
            if name == "shifting":
                arms = np.stack([a for _, a in runs])  # [seeds, T]
                shares[sel] = [(arms == k).mean(0) for k in range(3)]
        ax.set_title(f"{name}: α = {setting[0][1]}" + (" (rotates every 2,000)" if len(setting) > 1 else ""))
        ax.set_xlabel("round")
        ax.set_ylabel("cumulative regret (expected tokens per unit step time)")
        ax.set_yscale("symlog")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(OUT / "regret.png", dpi=120)
    with open(OUT / "regret.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["setting", "selector", "t", "regret_mean", "regret_ci95"])
        writer.writerows((s, sel, t, f"{m:.3f}", f"{c:.3f}") for s, sel, t, m, c in rows)
    fig, axes = plt.subplots(2, (len(shares) + 1) // 2, figsize=(20, 6), sharey=True)
    axes = axes.flat
    window = 200
    for ax, (sel, per_arm) in zip(axes, shares.items()):
        for k, share in enumerate(per_arm):
            ax.plot(np.convolve(share, np.ones(window) / window, mode="valid"), label=f"arm {k}")
        ax.set_title(sel)
        ax.set_xlabel("round")
    axes[0].set_ylabel("share of seeds choosing the arm")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(OUT / "arm_share.png", dpi=120)
    print(f"cumulative regret at T = {T:,} (expected tokens per unit step time; unit costs except 'costly'; "
          f"mean ± 95% CI over {args.seeds} seeds)")
    print(f"{'selector':<22}" + "".join(f"{s:>22}" for s in SETTINGS))
    for sel in SELECTORS:
        print(f"{sel:<22}" + "".join(f"{finals[s, sel][0]:>14.1f} ± {finals[s, sel][1]:<5.1f}" for s in SETTINGS))
    print(f"{'UCB1 bound (reward n/γ)':<22}" + "".join(
        f"{ucb1_bound(SETTINGS[s][0][1]):>14.0f} {'':6}" for s in ("easy", "hard")))


if __name__ == "__main__":
    main()
