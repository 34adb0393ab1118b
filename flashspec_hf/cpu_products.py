"""Few-row matrix products on the CPU: a call's linear layers computed with MKL's packed fp32 GEMM.

A speculative step feeds the target ``γ + 1`` tokens at once, so at batch 1 every ``nn.Linear`` multiplies an input of
a few rows by its weight. On a memory-bound CPU that product should cost about what the one-row product costs (the
weight is read once either way), but torch's fp32 ``linear`` (MKL's ``sgemm``, which packs the weight into its own
layout on every call) does not: on this project's CPU on 2026-12-04 (a 2-core Intel Xeon VM, torch 2.13 with MKL) the
products of SmolLM2-135M's 211 linear layers took 25.6 ms at one row, 43.0 ms at five and 52.2 ms at eight, a whole
five-token forward 1.5× a one-token one. MKL's packed GEMM (``cblas_sgemm_pack`` / ``sgemm_compute``, reached through
``torch.ops.mkl._mkl_reorder_linear_weight`` and ``_mkl_linear``, as inductor's CPU weight prepacking does) packs each
weight once: the same products took 21.7, 28.9 and 31.0 ms (2026-12-04, fastest of 7 passes;
``benchmarks/results/cpu_2026-12-04``).

:func:`few_row_products` reroutes, for the duration of a flashspec call and in the calling thread only, the float32
``nn.Linear`` layers of the models on the CPU: inputs of 2 to :data:`MAX_ROWS` rows (batch × tokens: a verification
forward at batch 1, a short prompt's prefill, batched one-token draft steps) go through the packed GEMM with a packed
copy of the weight made once per layer (:func:`packed_weight`; about the weight's bytes again, kept while the layer
lives and packed again when its weight changed); one-row inputs, larger ones, inputs autograd records and CPU autocast
through ``linear`` as before, so batch-1 plain decoding's products are stock's bit for bit: in whole one-token SmolLM2
forwards the packed product was the slower (39.5 against 35.8 ms, six alternating rounds in one process), though over
the layers' products alone it was the faster (21.7 against 25.6 ms). The packed product rounds differently from
``linear``'s in most shapes (by about 1e-6 of unit-scale outputs; bit for bit at 16 rows), as a multi-row product
already does against one-row ones. Another thread using the same model meanwhile outside a flashspec call gets stock's
``linear``.

Whether it pays depends on the CPU and its BLAS, so unless told it is measured (:func:`ratio`): once per process,
thread count, row count and set of weight shapes, both products are timed over the models' own layers (the first of
each weight shape, about :data:`TIMED_BYTES` in all, scaled to every layer) at the call's verification rows, and the
layers are rerouted only where the packed product took at most :data:`RATIO` of ``linear``'s time (whole five-token
SmolLM2 forwards: 50.8 against 57.8 ms). It is a timing, so another process on a busy machine may decide otherwise
(and round some products differently). Nothing is packed where the packed copies (estimated at
:data:`PACKED_BYTES_PER_BYTE` × the weights) would take more than :data:`MEMORY_SHARE` of the memory available, or
where torch was built without MKL.
``FLASHSPEC_FEW_ROW_PRODUCTS=0`` in the environment turns it off, ``=1`` on without measuring.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
import types
import weakref
from collections.abc import Iterable, Iterator

import torch

MAX_ROWS = 16
"""Largest row count rerouted: the packed product took 48.2 ms against ``linear``'s 56.0 at 16 rows and 71.9
against 68.6 at 32 (SmolLM2-135M's layers, this project's CPU)."""

TIMED_BYTES = 160 << 20
"""Weights timed by :func:`ratio`, shared among the weight shapes (each shape's first layers; a layer larger than its
share, such as an LM head, is timed whole). Timing the first 160 MB of layers without the LM head misjudged whole
forwards on this project's CPU on 2026-12-03 (``benchmarks/results/selector_cpu_2026-12-03e``). About 0.5 s once
per process and row count."""

RATIO = 1.0
"""The packed product is used when its fastest pass took at most this fraction of ``linear``'s fastest."""

REPEATS = 5
"""Timed passes of each product (after one warm-up pass each, which packs the timed layers), alternating; each
counts its fastest (another process can only slow a pass down)."""

PACKED_BYTES_PER_BYTE = 1.0
"""Bytes of a packed copy per byte of weight: 1.00–1.03 of resident memory for the weight shapes of SmolLM2-135M
and Qwen2.5-Coder-1.5B (0.52 for 192 × 576), measured on this project's CPU."""

MEMORY_SHARE = 0.5
"""Most of the available memory (``MemAvailable``) the packed copies may take; above it nothing is packed."""


def available() -> bool:
    """Whether this torch has MKL's packed GEMM (x86 builds with MKL; not e.g. aarch64 builds)."""
    return torch.backends.mkl.is_available() and hasattr(torch.ops.mkl, "_mkl_linear")


SAMPLED_VALUES = 16
"""Values of a weight, evenly spaced, that :func:`packed_weight` compares to notice writes torch does not count."""


def packed_weight(layer: torch.nn.Linear, check: bool = True) -> torch.Tensor:
    """MKL's packed copy of ``layer.weight`` (float32, an opaque 1-D layout), made on first use and kept while the
    layer lives. It is packed again when the weight is another tensor or changed in place (torch's version counter),
    and, with ``check`` (every :func:`few_row_products` block checks on entry), when a write through ``.data``
    (which that counter does not see; e.g. a merged LoRA delta) changed one of :data:`SAMPLED_VALUES` values.
    It is packed for :data:`MAX_ROWS`-row products, which serves 2 to 16 rows: packed for one row, SmolLM2's
    five-row products took 36.7 ms against 28.8 packed for five or sixteen."""
    kept, weight = _packed.get(layer), layer.weight
    if kept is not None and not check and kept[0][:2] == (weight.data_ptr(), weight._version):
        return kept[1]  # a step's products: no tensor made
    weight = weight.detach()
    flat = weight.reshape(-1)
    key = (weight.data_ptr(), weight._version, tuple(flat[_sampled(flat.numel())].tolist()))
    if kept is None or kept[0] != key:
        kept = _packed[layer] = (key, torch.ops.mkl._mkl_reorder_linear_weight(weight, MAX_ROWS))
    return kept[1]


@functools.cache
def _sampled(numel: int) -> torch.Tensor:
    """Indices (int64 ``[min(SAMPLED_VALUES, numel)]``) of evenly spaced values among ``numel``, the last included."""
    n = min(SAMPLED_VALUES, numel)
    return torch.arange(n) * (numel - 1) // max(n - 1, 1)


def packed_linear(layer: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """``layer(x)`` through MKL's packed GEMM (:func:`packed_weight`, its values not sampled again), for a float32 ``x``
    ``[..., K]`` of 2 to :data:`MAX_ROWS` rows (the product of the leading dimensions) and ``K`` equal to the
    layer's ``in_features`` (unchecked: :func:`few_row_linear` checks); ``[..., N]`` out, float32, without autograd."""
    rows = x.numel() // x.shape[-1]
    out = torch.ops.mkl._mkl_linear(x.reshape(rows, -1), packed_weight(layer, check=False), layer.weight,
                                    layer.bias, rows)
    return out.view(*x.shape[:-1], out.shape[-1])  # [rows, N] -> [..., N]


def few_row_linear(layer: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """``layer(x)`` for ``x`` ``[..., K]`` (``[..., N]`` out, the layer's dtype): :func:`packed_linear` for float32
    inputs of 2 to :data:`MAX_ROWS` rows and ``K`` the layer's ``in_features``, outside autograd (no gradient
    recorded for ``x`` or the weight), CPU autocast and compilation (inductor lowers ``linear`` itself and cannot
    lower the packed product); else ``torch.nn.functional.linear``.

    Raises:
        RuntimeError: as ``linear`` does, for an input whose last dimension or dtype does not match the weight's.
    """
    rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
    if 2 <= rows <= MAX_ROWS and x.shape[-1] == layer.in_features and x.dtype == torch.float32:  # cheap tests first
        recorded = torch.is_grad_enabled() and (x.requires_grad or layer.weight.requires_grad
                                                or (layer.bias is not None and layer.bias.requires_grad))
        if not recorded and not torch.is_autocast_enabled("cpu") and not torch.compiler.is_compiling():
            return packed_linear(layer, x)
    return torch.nn.functional.linear(x, layer.weight, layer.bias)


def setting() -> str:
    """``"off"`` (``FLASHSPEC_FEW_ROW_PRODUCTS=0``), ``"on"`` (``=1``) or ``"auto"`` (unset or anything else:
    measured by :func:`ratio`)."""
    return {"0": "off", "1": "on"}.get(os.environ.get("FLASHSPEC_FEW_ROW_PRODUCTS", ""), "auto")


def state() -> str:
    """What a record should say: :func:`setting`, with the process's last decision (any thread's) after it: the
    measured ratio (packed over ``linear``) under ``"auto"``, or why nothing was packed: ``"auto: on (0.809)"``,
    ``"auto: off (1.042)"``, ``"auto: off (not enough memory)"``, ``"on: off (no MKL)"``, ``"auto: off (no float32
    CPU layers)"``; the plain setting before any."""
    if setting() == "off" or _last is None:
        return setting()
    if isinstance(_last, str):
        return f"{setting()}: off ({_last})"
    return f"auto: {'on' if _last <= RATIO else 'off'} ({_last:.3f})" if setting() == "auto" else "on"


def rerouting() -> bool:
    """True inside a :func:`few_row_products` block of this thread that rerouted layers."""
    return bool(getattr(_active, "on", 0))


def ratio(layers: list[torch.nn.Linear], rows: int) -> float:
    """The packed product's estimated time over ``linear``'s for ``rows``-row inputs through all of ``layers``
    (it pays at most :data:`RATIO`), estimated per weight shape: the first layers of each shape (about
    :data:`TIMED_BYTES` over the shapes; at least one, such as the LM head) are timed (the fastest of :data:`REPEATS`
    alternating passes) and scaled to the bytes of all that shape's layers. Measured once per process for each set
    of weight shapes, ``rows`` and torch thread count."""
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
        seconds = {(packed, g): [] for packed in (False, True) for g in range(len(groups))}
        with torch.no_grad():
            for repeat in range(REPEATS + 1):
                for packed in (False, True):
                    for g, (timed, _) in enumerate(groups):
                        start = time.perf_counter()
                        for layer in timed:
                            x = inputs[layer.in_features]
                            if packed:
                                packed_linear(layer, x)
                            else:
                                torch.nn.functional.linear(x, layer.weight, layer.bias)
                        if repeat:  # the first pass of each warms up (and packs the timed layers)
                            seconds[packed, g].append(time.perf_counter() - start)
        estimate = {packed: sum(scale * min(seconds[packed, g]) for g, (_, scale) in enumerate(groups))
                    for packed in (False, True)}
        _decisions[key] = estimate[True] / estimate[False]
    return _decisions[key]


def _memory_available() -> int | None:
    """``MemAvailable`` of ``/proc/meminfo`` in bytes, or None where there is none (not Linux)."""
    try:
        with open("/proc/meminfo") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        return None


def _reroutes(layers: list[torch.nn.Linear], rows: int, mode: str) -> bool:
    """Whether ``layers`` are rerouted in a block for ``rows``-row verification forwards (see
    :func:`few_row_products`); sets what :func:`state` says."""
    global _last
    if mode == "off" or rows < 2:  # no few-row products to reroute (one-row ones stay linear's)
        return False
    if not layers:
        _last = "no float32 CPU layers"
        return False
    if not available():
        _last = "no MKL"
        return False
    unpacked = sum(m.weight.numel() * m.weight.element_size() for m in layers if m not in _packed)  # bytes
    free = _memory_available()
    if free is not None and PACKED_BYTES_PER_BYTE * unpacked > MEMORY_SHARE * free:
        _last = "not enough memory"
        return False
    _last = None
    if mode == "on":
        return True
    _last = ratio(layers, rows)
    if _last > RATIO:
        for layer in layers:  # packed by the timing
            _packed.pop(layer, None)
    return _last <= RATIO


_lock = threading.Lock()
_users: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # rerouted layer -> blocks using it (all threads)
_packed: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # layer -> ((address, version, samples), packed)
_active = threading.local()  # .depth: few_row_products blocks open in this thread; .on: those that rerouted
_decisions: dict[tuple, float] = {}  # ratio()'s measurements (packed / linear)
_last: float | str | None = None  # the last block's measured ratio, or why nothing was packed


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
    """Within the block, in this thread, the eligible layers of ``models`` (float32 ``nn.Linear``, exactly that class,
    with a plain weight on the CPU) compute through :func:`few_row_linear` if :func:`setting` is ``"on"``, or
    ``"auto"`` and :func:`ratio` for ``rows``-row inputs (a verification forward's ``γ + 1`` at batch 1), where
    MKL's packed GEMM exists and its copies fit in memory; the weights are packed on entry (again where they
    changed). Blocks may nest and run in several threads on the same models: a layer keeps the rerouting
    ``forward`` while any block uses it, and gets its own back after the last one, also on an error. Layers whose
    ``forward`` is replaced on the instance by something else (accelerate's hooks) are left alone, and an override
    installed inside the block is kept."""
    used = []
    mode = setting()
    eligible = [] if mode == "off" else list({id(m): m for model in models for m in model.modules()
                                              if _eligible(m)}.values())
    if _reroutes(eligible, rows, mode):
        with _lock:
            for layer in eligible:
                if layer in _users or "forward" not in vars(layer):
                    packed_weight(layer)  # first: a failure here leaves every forward as it was
                    used.append(layer)
            for layer in used:
                if layer not in _users:
                    layer.forward = types.MethodType(_rerouted_forward, layer)
                _users[layer] = _users.get(layer, 0) + 1
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
