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

:func:`few_row_products` reroutes, for the duration of a flashspec call, the float32 ``nn.Linear`` layers of the
models on the CPU: inputs of 2 to :data:`MAX_ROWS` rows go through ``torch.matmul(W, xᵀ)ᵀ`` (+ bias); others, one
row included, through ``linear`` as before, so plain decoding's products are stock's bit for bit. The result is
the same product rounded in another order (as a multi-row product already is against one-row ones).
``FLASHSPEC_FEW_ROW_PRODUCTS=0`` in the environment turns it off.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator

import torch

MAX_ROWS = 16
"""Largest row count rerouted; from 32 rows on the two orders measured within 0.9–1.5× of each other."""


def few_row_linear(layer: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """``layer(x)`` for ``x`` ``[..., K]`` (``[..., N]`` out, the layer's dtype): ``(W xᵀ)ᵀ + b`` when ``x`` has 2 to
    :data:`MAX_ROWS` rows (the product of all leading dimensions), else ``torch.nn.functional.linear``."""
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


@contextlib.contextmanager
def few_row_products(models: Iterable[torch.nn.Module]) -> Iterator[None]:
    """Within the block, the float32 ``nn.Linear`` layers (exactly that class) of ``models`` whose weight is on the
    CPU compute through :func:`few_row_linear`; their own ``forward`` is back afterwards, also on an error. Layers
    whose ``forward`` is already replaced on the instance (accelerate's hooks, an enclosing block) are left alone.
    Does nothing when ``FLASHSPEC_FEW_ROW_PRODUCTS=0``."""
    rerouted = []
    if enabled():
        for model in models:
            for layer in model.modules():
                if (type(layer) is torch.nn.Linear and "forward" not in vars(layer)
                        and layer.weight.device.type == "cpu" and layer.weight.dtype == torch.float32):
                    layer.forward = few_row_linear.__get__(layer)
                    rerouted.append(layer)
    try:
        yield
    finally:
        for layer in rerouted:
            del layer.forward
