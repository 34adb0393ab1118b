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
``FLASHSPEC_FEW_ROW_PRODUCTS=0`` in the environment turns it off.
"""

from __future__ import annotations

import contextlib
import os
import threading
import types
import weakref
from collections.abc import Iterable, Iterator

import torch

MAX_ROWS = 16
"""Largest row count rerouted; from 32 rows on the two orders measured within 0.9–1.5× of each other."""


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


def enabled() -> bool:
    """False when the environment says ``FLASHSPEC_FEW_ROW_PRODUCTS=0``."""
    return os.environ.get("FLASHSPEC_FEW_ROW_PRODUCTS", "1") != "0"


_lock = threading.Lock()
_users: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # rerouted layer -> blocks using it (all threads)
_active = threading.local()  # .depth: few_row_products blocks open in this thread


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
def few_row_products(models: Iterable[torch.nn.Module]) -> Iterator[None]:
    """Within the block, in this thread, the eligible layers of ``models`` (float32 ``nn.Linear``, exactly that
    class, with a plain weight on the CPU) compute through :func:`few_row_linear`. Blocks may nest and run in
    several threads on the same models: a layer keeps the rerouting ``forward`` while any block uses it, and gets
    its own back after the last one, also on an error. Layers whose ``forward`` is replaced on the instance by
    something else (accelerate's hooks) are left alone, and an override installed inside the block is kept.
    Does nothing when ``FLASHSPEC_FEW_ROW_PRODUCTS=0``."""
    used = []
    if enabled():
        with _lock:
            seen = set()
            for model in models:
                for layer in model.modules():
                    if id(layer) in seen or not _eligible(layer):
                        continue
                    seen.add(id(layer))
                    if layer not in _users:
                        if "forward" in vars(layer):
                            continue
                        layer.forward = types.MethodType(_rerouted_forward, layer)
                    _users[layer] = _users.get(layer, 0) + 1
                    used.append(layer)
    _active.depth = getattr(_active, "depth", 0) + 1
    try:
        yield
    finally:
        _active.depth -= 1
        with _lock:
            for layer in used:
                _users[layer] -= 1
                if _users[layer] == 0:
                    del _users[layer]
                    if getattr(vars(layer).get("forward"), "__func__", None) is _rerouted_forward:
                        del layer.forward
