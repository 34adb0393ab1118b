"""On a busy CPU, OpenMP threads wait passively (``OMP_WAIT_POLICY=PASSIVE``) unless the environment says
otherwise; set when ``flashspec_hf`` is imported (if :func:`shared` finds other work on the CPU), which is
effective only before torch is first imported.

torch's CPU kernels run each parallel region on OpenMP threads (libgomp on Linux). By default a thread that
finishes its share spins until its partners finish theirs. On a CPU shared with other processes the thread it
waits for may be descheduled, and the spinning one holds the core it needs, so a region can cost a scheduler time
slice instead of microseconds; a speculative step runs many small regions (draft forwards, processors,
verification). Measured on this project's 2-core machine (SmolLM2-135M-Instruct, fp32, 2 threads, other
processes keeping the 1-minute load average at 4–9): a one-token target forward took 0.7–1.8 s spinning, 85 ms
waiting passively and 80–120 ms on one thread; at load ≈ 3.5 the first flashspec call of the demo's set-up took
36–94 s spinning and 6–7 s passively, and plain ``generate`` ran at 2.9 tokens/s spinning, 12–15 passively.
On an idle machine waiting passively costs instead: a 5-token SmolLM2 forward took 137 ms spinning and 165 ms
passively, and the CPU demo's flashspec tokens/s fell by about a fifth; hence the test. One other busy process is
enough for spinning to lose (2026-12-03, the same machine, one pytest run on one core: a 32-token greedy call of the
README's quick start ran at 0.26–0.28× plain ``generate`` spinning and 1.2–1.4× passively), and the 1-minute load
average both lags behind such a process and stays up for a minute after work that has ended (right after its
install, at load 1.0, the demo ran with passive threads under a load threshold of 0.5: 1.08× plain, where the same
command spinning had given 1.38× an hour before), so on Linux the test counts the tasks runnable right now instead.
OpenMP reads the policy once, when torch loads it: a program that imports torch before ``flashspec_hf`` keeps the
spinning policy unless ``OMP_WAIT_POLICY=PASSIVE`` is in its environment (or it calls ``torch.set_num_threads(1)``).
"""

import os
import time

SAMPLES = 5
"""Looks at the runnable tasks, 10 ms apart (:func:`others_runnable`)."""


def others_runnable(path: str = "/proc/loadavg") -> int | None:
    """Tasks (threads) runnable besides this process's one, the fewest over :data:`SAMPLES` looks at Linux's
    ``/proc/loadavg`` (its fourth field, ``running/total``): a CPU-bound process is runnable at every look, a passing
    one is not. None where the file is missing."""
    counts = []
    try:
        for look in range(SAMPLES):
            with open(path) as f:
                counts.append(int(f.read().split()[3].split("/")[0]) - 1)
            if look + 1 < SAMPLES:
                time.sleep(0.01)
    except (OSError, IndexError, ValueError):
        return None
    return min(counts)


def shared(cores: int, others: int | None, load: float) -> bool:
    """Whether other work shares a CPU of ``cores`` cores: ``others`` (:func:`others_runnable`) at least a quarter
    of the cores (at least 1); without it, the 1-minute ``load`` average at least ``cores``."""
    return others >= max(1, cores // 4) if others is not None else load >= cores


def set_policy(environ, cores: int, others: int | None, load: float) -> None:
    """``OMP_WAIT_POLICY=PASSIVE`` in ``environ`` where the CPU is :func:`shared` and ``environ`` has no policy."""
    if shared(cores, others, load):
        environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


set_policy(os.environ, os.cpu_count() or 1, others_runnable(), os.getloadavg()[0])
