"""On a busy CPU, OpenMP threads wait passively (``OMP_WAIT_POLICY=PASSIVE``) unless the environment says
otherwise; set when ``flashspec_hf`` is imported (if the 1-minute load average is at least the number of cores),
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
passively, and the CPU demo's flashspec tokens/s fell by about a fifth; hence the load test. OpenMP reads the
policy once, when torch loads it: a program that imports torch before ``flashspec_hf`` keeps the spinning policy
unless ``OMP_WAIT_POLICY=PASSIVE`` is in its environment (or it calls ``torch.set_num_threads(1)``).
"""

import os

if os.getloadavg()[0] >= (os.cpu_count() or 1):
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
