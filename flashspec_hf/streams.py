"""Work a step runs beside its main line: the forwards keeping the draft models that did not draft current, beside
the target's forward; the side evidence's scoring, beside the step's end (cut, append, commit); and a mixed arm's
prompt lookup, beside its draft model's forwards (it reads the rows' tokens, which drafting does not write).

The keep-current forwards read the columns the step's drafts were written to and write only their own caches (and,
for side evidence, their guesses to buffers of their own, read after the join), and nothing reads those caches
before the step's commit rewinds them: on a GPU they can run on a side stream, concurrently with the target's
forward and the verification, and join the step before its commit. At batch 1 a step's kernels leave most of the GPU
idle, so the draft forwards' kernels run in its gaps. The scoring (:meth:`~flashspec_hf.evidence.SideEvidence.score`,
about 18 small kernels) reads the verified tokens and those guesses, none of which the rest of the step writes, so it
is forked as soon as verification is enqueued, on the same side stream (after the keep-current forwards that write
the guesses), runs beside the step's cut, append and commit, and joins the step at its end; the commit waits for the
keep-current forwards alone (:func:`fork`'s join waits on an event recorded after its work, not on the stream).
Forking from and joining the capturing stream is how a CUDA graph captures concurrent branches (CUDA programming
guide, "Cross-stream dependencies and events")."""

from __future__ import annotations

from collections.abc import Callable

import torch


def fork(side: torch.cuda.Stream | None, work: Callable[[], object]) -> Callable[[], None]:
    """Enqueue ``work`` on the ``side`` stream, after everything enqueued so far on the current stream; returns
    ``join``, which makes the current stream wait for ``work`` (for it alone: not for what is enqueued on ``side``
    after it). With ``side`` None, ``work`` runs here and now and ``join`` does nothing.

    ``work`` must read only tensors the current stream keeps referenced until ``join`` (the columns, the caches,
    ``seen``, the step's verified tokens): a temporary the current stream frees could be reused under it. What
    ``work`` makes on ``side`` and the current stream reads after ``join`` (the scoring's counts, a mixed arm's
    lookup) may be freed without ``record_stream``: the allocator hands a freed ``side`` block only to later ``side``
    work, and every launch on ``side`` goes through :func:`fork`, which first waits for the current stream, after
    those reads. Until ``join``, the current stream must not write what ``work`` reads or writes (the step's commit
    writes the columns and rewinds every runner's ``seen``: it comes after the keep-current forwards' join; the
    scoring reads neither).
    """
    if side is None:
        work()
        return lambda: None
    main = torch.cuda.current_stream(side.device)
    side.wait_stream(main)
    with torch.cuda.stream(side):
        work()
    done = torch.cuda.Event()
    done.record(side)
    return lambda: main.wait_event(done)
