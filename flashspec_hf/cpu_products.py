"""Few-row matrix products on the CPU: a verification forward's linear layers computed as ``(W xᵀ)ᵀ``.

A speculative step feeds the target ``γ + 1`` tokens at once, so at batch 1 every ``nn.Linear`` multiplies an
input of a few rows by its weight. On a memory-bound CPU that product should cost about what the one-row product
costs (the weight is read once either way), but torch's fp32 ``linear`` (MKL's ``sgemm`` on ``x Wᵀ``) takes 2–3.5×
the one-row time there on this project's CPU (AMD EPYC, AVX2, torch 2.13, MKL 2024.2), while the same product
ordered as ``W xᵀ`` runs near the weight-read time. Measured on a Qwen2.5-Coder-1.5B layer shape
(``W`` 8,960 × 1,536, fp32, weights cycled beyond the L3 cache), ``linear``'s time over the transposed order's:
1.3–1.7× at 2–5 rows on one thread and 2.3–3.0× on two, about 1.0 at one row and at 64 rows; over the whole model a
5-token forward took 1.69 s as ``linear`` and 1.01 s transposed on one thread (one-token forward 0.50 s), 1.44 s
and 0.65 s on two.

:func:`few_row_products` reroutes, for the duration of a flashspec call and in the calling thread only, the float32
``nn.Linear`` layers of the models on the CPU: inputs of 2 to :data:`MAX_ROWS` rows (batch × tokens: a verification
forward at batch 1, a short prompt's prefill, batched one-token draft steps) go through ``torch.matmul(W, xᵀ)ᵀ``
(+ bias); others, one row included, through ``linear`` as before, so batch-1 plain decoding's products are stock's
bit for bit. The result is the same product rounded in another order (as a multi-row product already is against
one-row ones). Another thread using the same model meanwhile gets stock's ``linear``.

Whether it pays depends on the CPU and its BLAS: on an Intel Xeon machine of this project (2 cores, the same torch)
the transposed order took 1.2–2.5× ``linear``'s time at 2–5 rows on the same shapes, and the SmolLM2 demo gave
0.92× plain with it and 1.13× without. So unless told, it is measured (:func:`pays`): once per process, thread
count, row count and set of weight shapes, both orders are timed over the models' own layers (the first of each
weight shape, about :data:`TIMED_BYTES` in all, scaled to every layer) and the rerouting is used only where the
transposed order took at most :data:`RATIO` of ``linear``'s time. That is a timing, so another process on a busy
machine may decide otherwise (and round some products differently). ``FLASHSPEC_FEW_ROW_PRODUCTS=0`` in the environment turns it off, ``=1``
on without measuring.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import types
import weakref
from collections.abc import Iterable, Iterator

import torch

MAX_ROWS = 16
"""Largest row count rerouted; from 32 rows on the two orders measured within 0.9–1.5× of each other."""

TIMED_BYTES = 160 << 20
"""Weights timed by :func:`pays`, shared among the weight shapes (each shape's first layers; a layer larger than its
share, such as an LM head, is timed whole). Timing only the first 160 MB of layers (the LM head left out) gave the
SmolLM2 demo's models ratios of 0.70–1.07 in processes on this project's CPU on 2026-12-03 (on in 8 of 8 processes
the day before), while every whole five-column forward measured was faster with the transposed order; timing all
their layers gave 0.68–0.87 in 9 of 9; per shape with the LM head, see ``benchmarks/results/selector_cpu_2026-12-03e``.
About 0.5 s once per process."""

RATIO = 1.0
"""The transposed order is used when its fastest pass took at most this fraction of ``linear``'s fastest. In six
processes on this project's CPU (SmolLM2-135M, fp32, 2 threads) a whole five-column forward took 0.82–0.98× the time
with the transposed order, while a timing of the first 64 MB of layers gave 0.72–1.03×: a ratio of 0.9 on the
medians of 3 passes turned it off in half of them."""

REPEATS = 5
"""Timed passes of each order (after one warm-up pass each), alternating; each order counts its fastest (another
process can only slow a pass down)."""


def few_row_linear(layer: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """``layer(x)`` for ``x`` ``[..., K]`` (``[..., N]`` out, the layer's dtype): ``(W xᵀ)ᵀ + b`` when ``x`` has 2 to
    :data:`MAX_ROWS` rows (the product of all leading dimensions), else ``torch.nn.functional.linear``.

    Raises:
        RuntimeError: as ``linear`` does, for an input whose last dimension or dtype does not match the weight's.
    """
    rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
    if not 2 <= rows <= MAX_ROWS:
        return torch.nn.functional.linear(x, layer.weight, layer.bias)
    out = torch.matmul(layer.weight, x.reshape(rows, -1).T).T.contiguous()  # [N, rows] -> [rows, N]
    if layer.bias is not None:
        out += layer.bias
    return out.view(*x.shape[:-1], out.shape[-1])


def setting() -> str:
    """``"off"`` (``FLASHSPEC_FEW_ROW_PRODUCTS=0``), ``"on"`` (``=1``) or ``"auto"`` (unset or anything else:
    measured by :func:`pays`)."""
    return {"0": "off", "1": "on"}.get(os.environ.get("FLASHSPEC_FEW_ROW_PRODUCTS", ""), "auto")


def state() -> str:
    """What a record should say: :func:`setting`, with the last measured decision of this process and its ratio
    after ``"auto"`` (``"auto: on (0.731)"``, ``"auto: off (1.042)"``: the transposed order's time over
    ``linear``'s; plain ``"auto"`` before any)."""
    if setting() != "auto" or not _decisions:
        return setting()
    ratio = list(_decisions.values())[-1]
    return f"auto: {'on' if ratio <= RATIO else 'off'} ({ratio:.3f})"


def rerouting() -> bool:
    """True inside a :func:`few_row_products` block of this thread that rerouted layers."""
    return bool(getattr(_active, "on", 0))


def pays(layers: list[torch.nn.Linear], rows: int) -> bool:
    """Whether ``(W xᵀ)ᵀ`` took at most :data:`RATIO` of ``linear``'s time for ``rows``-row inputs through all of
    ``layers``, estimated per weight shape: the first layers of each shape (about :data:`TIMED_BYTES` over the
    shapes; at least one, such as the LM head) are timed (the fastest of :data:`REPEATS` alternating passes) and
    scaled to the bytes of all that shape's layers. Measured once per process for each set of weight shapes,
    ``rows`` and torch thread count."""
    shapes: dict[tuple, list[torch.nn.Linear]] = {}  # weight shape -> its layers, in order
    for layer in layers:
        shapes.setdefault(tuple(layer.weight.shape), []).append(layer)
    key = (tuple(shapes), rows, torch.get_num_threads())
    if key not in _decisions:
        groups = []  # (layers timed, scale: the shape's layers over those timed)
        for same in shapes.values():
            size = same[0].weight.numel() * same[0].weight.element_size()
            timed = same[: max(1, min(len(same), TIMED_BYTES // len(shapes) // size))]
            groups.append((timed, len(same) / len(timed)))
        noise = torch.Generator().manual_seed(0)  # its own: the caller's seeded draws stay as they were
        inputs = {k: torch.randn(rows, k, generator=noise) for k in {shape[1] for shape in shapes}}  # [rows, K] each
        seconds = {(order, g): [] for order in (True, False) for g in range(len(groups))}  # (linear order?, group)
        with torch.no_grad():
            for repeat in range(REPEATS + 1):
                for linear_order in (True, False):
                    for g, (timed, _) in enumerate(groups):
                        start = time.perf_counter()
                        for layer in timed:
                            x = inputs[layer.in_features]
                            if linear_order:
                                torch.nn.functional.linear(x, layer.weight)
                            else:
                                torch.matmul(layer.weight, x.T).T.contiguous()
                        if repeat:  # the first pass of each order warms up
                            seconds[linear_order, g].append(time.perf_counter() - start)
        estimate = {order: sum(scale * min(seconds[order, g]) for g, (_, scale) in enumerate(groups))
                    for order in (True, False)}
        _decisions[key] = estimate[False] / estimate[True]
    return _decisions[key] <= RATIO


_lock = threading.Lock()
_users: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # rerouted layer -> blocks using it (all threads)
_active = threading.local()  # .depth: few_row_products blocks open in this thread; .on: those that rerouted
_decisions: dict[tuple, float] = {}  # pays()'s measured ratios (transposed / linear), in the order made


def _rerouted_forward(layer: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """A rerouted layer's ``forward``: :func:`few_row_linear` inside a block of this thread, else stock ``linear``."""
    if getattr(_active, "depth", 0):
        return few_row_linear(layer, x)
    return torch.nn.functional.linear(x, layer.weight, layer.bias)


def _eligible(layer: torch.nn.Module) -> bool:
    """An ``nn.Linear`` (exactly) with a plain, strided float32 weight on the CPU (no tensor subclass, such as a
    quantized weight, whose own ``linear`` must run)."""
    weight = getattr(layer, "weight", None)
    return (type(layer) is torch.nn.Linear and type(weight) in (torch.nn.Parameter, torch.Tensor)
            and weight.layout == torch.strided and weight.device.type == "cpu" and weight.dtype == torch.float32)


@contextlib.contextmanager
def few_row_products(models: Iterable[torch.nn.Module], rows: int = 5) -> Iterator[None]:
    """Within the block, in this thread, the eligible layers of ``models`` (float32 ``nn.Linear``, exactly that
    class, with a plain weight on the CPU) compute through :func:`few_row_linear`, if :func:`setting` is
    ``"on"``, or ``"auto"`` and :func:`pays` for ``rows``-row inputs (a verification forward's ``γ + 1`` at batch
    1). Blocks may nest and run in several threads on the same models: a layer keeps the rerouting ``forward``
    while any block uses it, and gets its own back after the last one, also on an error. Layers whose ``forward``
    is replaced on the instance by something else (accelerate's hooks) are left alone, and an override installed
    inside the block is kept."""
    used = []
    mode = setting()
    eligible = [] if mode == "off" else list({id(m): m for model in models for m in model.modules()
                                              if _eligible(m)}.values())
    if eligible and (mode == "on" or pays(eligible, rows)):
        with _lock:
            for layer in eligible:
                if layer not in _users:
                    if "forward" in vars(layer):
                        continue
                    layer.forward = types.MethodType(_rerouted_forward, layer)
                _users[layer] = _users.get(layer, 0) + 1
                used.append(layer)
    _active.depth = getattr(_active, "depth", 0) + 1
    _active.on = getattr(_active, "on", 0) + bool(used)
    try:
        yield
    finally:
        _active.depth -= 1
        _active.on -= bool(used)
        with _lock:
            for layer in used:
                _users[layer] -= 1
                if _users[layer] == 0:
                    del _users[layer]
                    if getattr(vars(layer).get("forward"), "__func__", None) is _rerouted_forward:
                        del layer.forward
