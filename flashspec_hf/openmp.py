"""On a busy CPU, OpenMP threads wait passively (``OMP_WAIT_POLICY=PASSIVE``) unless the environment says
otherwise; set when ``flashspec_hf`` is imported (if the 1-minute load average is at least :func:`busy_load`),
which is effective only before torch is first imported.

torch's CPU kernels run each parallel region on OpenMP threads (libgomp on Linux). By default a thread that
finishes its share spins until its partners finish theirs. On a CPU shared with other processes the thread it
waits for may be descheduled, and the spinning one holds the core it needs, so a region can cost a scheduler time
slice instead of microseconds; a speculative step runs many small regions (draft forwards, processors,
verification). Measured on this project's 2-core machine (SmolLM2-135M-Instruct, fp32, 2 threads, other
processes keeping the 1-minute load average at 4–9): a one-token target forward took 0.7–1.8 s spinning, 85 ms
waiting passively and 80–120 ms on one thread; at load ≈ 3.5 the first flashspec call of the demo's set-up took
36–94 s spinning and 6–7 s passively, and plain ``generate`` ran at 2.9 tokens/s spinning, 12–15 passively.
On an idle machine waiting passively costs instead: a 5-token SmolLM2 forward took 137 ms spinning and 165 ms
passively, and the CPU demo's flashspec tokens/s fell by about a fifth; hence the load test. Its threshold is low:
one other busy process is enough (2026-12-03, the same machine, one pytest run on one core, the load average 0.8–1.7
and lagging behind it: a 32-token greedy call of the README's quick start ran at 0.26–0.28× plain ``generate``
spinning and 1.2–1.4× passively), so passive waiting costs its fifth on a machine that is not quite idle, where
spinning can cost several times. OpenMP reads the
policy once, when torch loads it: a program that imports torch before ``flashspec_hf`` keeps the spinning policy
unless ``OMP_WAIT_POLICY=PASSIVE`` is in its environment (or it calls ``torch.set_num_threads(1)``).
"""

import os


def busy_load(cores: int) -> float:
    """The 1-minute load average from which a machine of ``cores`` cores counts as shared: a quarter of its cores
    busy, at least 0.5 (one other process on a small machine)."""
    return max(0.5, cores / 4)


if os.getloadavg()[0] >= busy_load(os.cpu_count() or 1):
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
