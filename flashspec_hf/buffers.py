"""Where a call's state tensors live: fresh per call, or kept from call to call in the same memory, so that a CUDA
graph captured by one call stays valid for the next (:class:`~flashspec_hf.backends.StaticBackend`)."""

from __future__ import annotations

import torch


class Buffers:
    """Named state tensors of a call (columns, sequences, limits, flags).

    Args:
        device: where the tensors live.
        keep: return the same tensor for a name on every call (refilled), instead of a new one.
    """

    def __init__(self, device: torch.device, keep: bool = False):
        self.device = device
        self.kept = {} if keep else None  # name -> tensor

    def full(self, name: str, shape: tuple[int, ...], fill, dtype: torch.dtype) -> torch.Tensor:
        """A tensor of ``shape`` and ``dtype`` filled with ``fill`` (the kept one for ``name``, refilled, when
        keeping and the shape and dtype match; else a new one, kept from now on)."""
        if self.kept is None:
            return torch.full(shape, fill, dtype=dtype, device=self.device)
        tensor = self.kept.get(name)
        if tensor is None or tensor.shape != shape or tensor.dtype != dtype:
            tensor = self.kept[name] = torch.empty(shape, dtype=dtype, device=self.device)
        return tensor.fill_(fill)

    def like(self, name: str, value: torch.Tensor) -> torch.Tensor:
        """A tensor holding a copy of ``value`` (kept, like :meth:`full`)."""
        return self.full(name, tuple(value.shape), 0, value.dtype).copy_(value)
