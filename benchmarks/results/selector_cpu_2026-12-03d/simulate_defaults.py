"""The default selector's parameters (discount, call_memory) on simulated calls, with a prompt prior; the record of
simulate_defaults.txt (python benchmarks/results/selector_cpu_2026-12-03d/simulate_defaults.py, from the repo root).

Five arms: three draft models, prompt lookup (γ = 4) and the plain arm (γ = 0), at step costs measured on this CPU
(135, 135, 135, 105, 68 ms; SmolLM2 fp32, 2 threads) or GPU-like ones (1.35, 1.35, 1.35, 1.05, 1); per-token
acceptance per domain as listed in ``sc``. 40 calls of 40 steps with one selector kept across them (as the demo
keeps it); each call starts with a prompt prior of 16 positions drawn at the arms' acceptance rates. "in-call
shift": 4 calls of 400 steps whose domain changes at step 200. Prints tokens per unit of time over plain decoding's.
"""
import random, statistics
from flashspec_hf.selection import ThompsonSampling
g = [4,4,4,4,0]
def run(make, domains, costs, calls=40, steps=40, seed=0, prior=True, shift_at=None):
    rng = random.Random(seed); sel = make(); sel.ensure(5, g); sel.set_costs(costs)
    tok = t = 0.0
    for c in range(calls):
        al = domains[c % len(domains)]
        sel.begin_call()
        if prior:  # prompt agreement over 16 positions, drawn at the arm's acceptance rate (0 for plain)
            succ = [sum(rng.random() < a for _ in range(16)) if gg else 0 for a, gg in zip(al, g)]
            sel.prior(succ, [16 if gg else 0 for gg in g])
        for s in range(steps):
            if shift_at and s == shift_at: al = domains[(c + 1) % len(domains)]
            a = sel.choose(); n = 0
            while n < g[a] and rng.random() < al[a]: n += 1
            sel.update(a, [n], g[a]); tok += n + 1; t += costs[a]
    return tok / t * costs[4]
cpu = [135, 135, 135, 105, 68]; gpu = [1.35, 1.35, 1.35, 1.05, 1.0]
sc = {"hopeless": [[0.05,0.08,0.05,0.10,0]], "prose": [[0.05,0.47,0.2,0.25,0]], "code": [[0.1,0.6,0.4,0.55,0]],
      "chat": [[0.75,0.2,0.5,0.2,0]], "alt": [[0.75,0.2,0.5,0.2,0],[0.1,0.75,0.4,0.3,0]]}
for costs, cl in [(cpu, "cpu"), (gpu, "gpu")]:
  for d, cm in [(0.99, 8), (0.998, 16), (1.0, 8), (1.0, 16), (1.0, 32)]:
    row = []
    for name, doms in sc.items():
        v = statistics.mean(run(lambda: ThompsonSampling(discount=d, cost_aware=True, call_memory=cm, prompt_weight=16), doms, costs, seed=s) for s in range(8))
        row.append(f"{name} {v:.3f}")
    v = statistics.mean(run(lambda: ThompsonSampling(discount=d, cost_aware=True, call_memory=cm, prompt_weight=16), sc["alt"], costs, calls=4, steps=400, shift_at=200, seed=s) for s in range(8))
    row.append(f"in-call shift {v:.3f}")
    print(f"{cl} d={d} cm={cm}: " + " | ".join(row))
