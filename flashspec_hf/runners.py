"""Model runners: one model (the target or a draft) over the shared columns, with its own KV cache.

A runner feeds columns ``[seen, seen + width)`` of :class:`~flashspec_hf.columns.Columns` and returns the logits
of the last ``keep`` of them; :meth:`Runner.rewind` forgets the columns from a given one on. Two kinds:

- :class:`DynamicRunner`: a ``DynamicCache`` that grows with the columns and is cropped on rewind; the model
  builds its own causal mask from a 2D padding mask (or none), so sliding-window layers work;
- :class:`StaticRunner`: a ``StaticCache`` of ``N`` columns, a 4D mask over all of them, and on CUDA every
  forward of a shape listed at construction captured once as a CUDA graph and replayed. Runners are kept on the
  model between calls (per batch size, capacity and shapes), so repeated calls capture nothing; they are dropped
  when the model's parameters change (new tensors, dtype or device), since a graph replays the memory it captured.
"""

from __future__ import annotations

import functools
import inspect

import torch
import transformers
from packaging.version import Version
from transformers import DynamicCache, PreTrainedModel, StaticCache
from transformers.cache_utils import StaticLayer

from .columns import Columns

SLIDING_WINDOW_MIN_VERSION = Version("5.24")
"""Oldest transformers verified to crop a full sliding-window cache correctly (5.17 returns one key too many)."""

KEPT_RUNNERS = 4
"""Static runners (cache + graphs) kept per model, least recently used dropped first."""


class Runner:
    """One model over a prefix of the columns (``seen`` of them).

    Args:
        model: the target or a draft model.
        vocab_size: the target's ``V``; ids the model has no embedding for (a draft with a smaller padded
            vocabulary) are fed as token 0 (its logits for them are ``-inf``-padded anyway).
    """

    def __init__(self, model: PreTrainedModel, vocab_size: int):
        self.model = model
        self.seen = 0
        embeddings = model.get_input_embeddings().num_embeddings
        self.max_token = embeddings - 1 if embeddings < vocab_size else None
        self.cache_kwarg = _cache_kwarg(type(model))

    def forward(self, columns: Columns, width: int, keep: int) -> torch.Tensor:
        """Feed columns ``[seen, seen + width)``; logits ``[B, keep, V_model]`` (model dtype, model device) of the
        last ``keep`` of them. Afterwards ``seen`` is ``width`` larger."""
        start = self.seen
        ids = columns.tokens[:, start : start + width]  # [B, w]
        if self.max_token is not None:
            ids = ids.masked_fill(ids > self.max_token, 0)
        positions = columns.positions[:, start : start + width]  # [B, w]
        self.seen += width
        return self._forward(columns, ids, positions, start, keep)

    def rewind(self, length: int) -> None:
        """Forget the columns from ``length`` on (no-op if ``seen <= length``)."""

    def _forward(self, columns, ids, positions, start, keep) -> torch.Tensor:
        raise NotImplementedError

    def _call(self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None, cache, keep: int):
        device = self.model.device
        out = self.model(
            input_ids=ids.to(device),
            position_ids=positions.to(device),
            attention_mask=None if mask is None else mask.to(device),
            use_cache=True,
            logits_to_keep=keep,
            **{self.cache_kwarg: cache},
        )
        return out.logits[:, -keep:]


class DynamicRunner(Runner):
    """A runner over a ``DynamicCache``, cropped on rewind (transformers' past recording makes sliding-window and
    linear-attention layers croppable).

    Raises:
        NotImplementedError: sliding-window layers on transformers older than :data:`SLIDING_WINDOW_MIN_VERSION`.
    """

    def __init__(self, model: PreTrainedModel, vocab_size: int):
        super().__init__(model, vocab_size)
        self.cache = _new_cache(DynamicCache, model.config)
        if any(self.cache.is_sliding) and Version(transformers.__version__) < SLIDING_WINDOW_MIN_VERSION:
            raise NotImplementedError(
                f"{type(model).__name__} has sliding-window layers, whose cache transformers "
                f"{transformers.__version__} cannot roll back once the window is full (seen on 5.17); "
                f"flashspec supports them from transformers {SLIDING_WINDOW_MIN_VERSION} on: upgrade transformers"
            )
        self.cache.activate_past_recording()

    def check_holes_allowed(self) -> None:
        """Raise NotImplementedError if holes (ragged acceptance at batch > 1) would break the model's attention:
        a sliding window counts cache slots, holes included, and a linear-attention state absorbs rejected tokens."""
        if any(self.cache.is_sliding) or any(self.cache.is_linear):
            raise NotImplementedError(
                f"{type(self.model).__name__} has sliding-window or linear-attention layers; flashspec runs them at "
                "batch size 1 only (ragged acceptance leaves holes in the cache)"
            )

    def rewind(self, length: int) -> None:
        if self.seen > length:
            self.cache.crop(length - self.seen)  # negative: number of columns to remove
            self.seen = length

    def _forward(self, columns, ids, positions, start, keep) -> torch.Tensor:
        return self._call(ids, positions, columns.attention_mask_2d(start + ids.shape[1]), self.cache, keep)


class StaticRunner(Runner):
    """A runner over a ``StaticCache`` of ``N`` columns; forwards of the shapes in ``graph_shapes`` are CUDA graphs
    once the cache is initialised (CUDA, model on one GPU). Use :meth:`for_model` to reuse kept runners.

    Args:
        model, vocab_size: see :class:`Runner`.
        capacity: ``N``, the columns' capacity.
        graph_shapes: ``(width, keep)`` forwards to capture.
    """

    def __init__(self, model: PreTrainedModel, vocab_size: int, capacity: int, graph_shapes: set[tuple[int, int]]):
        super().__init__(model, vocab_size)
        self.cache = _new_cache(StaticCache, model.config, max_cache_len=capacity)
        self.dtype = model.get_input_embeddings().weight.dtype
        self.graph_shapes = graph_shapes if on_one_gpu(model) else set()
        self.graphs = {}  # (width, keep) -> (graph, ids, positions, mask, logits)

    @classmethod
    def for_model(cls, model: PreTrainedModel, vocab_size: int, capacity: int, graph_shapes: set, batch_size: int):
        """The runner kept on ``model`` for this batch size, capacity and graph shapes (new if none), reset to no
        columns seen. All kept runners are dropped first if the model's parameters changed."""
        fingerprint = tuple((p.data_ptr(), p.dtype, p.device) for p in model.parameters())
        if model.__dict__.get("_flashspec_static_fingerprint") != fingerprint:
            clear_static_runners(model)
            model.__dict__["_flashspec_static_fingerprint"] = fingerprint
        runners = model.__dict__.setdefault("_flashspec_static_runners", {})
        key = (batch_size, capacity, frozenset(graph_shapes))
        runner = runners.pop(key, None) or cls(model, vocab_size, capacity, graph_shapes)
        runners[key] = runner  # most recently used last
        while len(runners) > KEPT_RUNNERS:
            runners.pop(next(iter(runners)))
        runner.rewind(0)
        return runner

    def rewind(self, length: int) -> None:
        if self.seen > length:
            for layer in self.cache.layers:
                if layer.is_initialized:
                    layer.cumulative_length.fill_(length)  # later writes overwrite; the 4D mask hides the rest
            self.seen = length

    def _forward(self, columns, ids, positions, start, keep) -> torch.Tensor:
        mask = columns.attention_mask_4d(start, ids.shape[1], self.dtype)  # [B, 1, w, N]
        shape = (ids.shape[1], keep)
        if shape not in self.graph_shapes or not all(layer.is_initialized for layer in self.cache.layers):
            return self._call(ids, positions, mask, self.cache, keep)
        if shape not in self.graphs:
            self.graphs[shape] = self._capture(ids, positions, mask, keep)
        graph, *inputs, logits = self.graphs[shape]
        for buffer, value in zip(inputs, (ids, positions, mask), strict=True):
            buffer.copy_(value)
        graph.replay()
        return logits.clone()  # the graph's output buffer is overwritten by its next replay

    def _capture(self, ids, positions, mask, keep) -> tuple:
        """Capture one forward as a CUDA graph on static copies of its inputs; the cache's write offsets are
        restored afterwards (the warm-up run advanced them)."""
        inputs = [ids.clone(), positions.clone(), mask.clone()]
        offsets = [layer.cumulative_length.clone() for layer in self.cache.layers]
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            self._call(*inputs, self.cache, keep)  # warm-up: lazy initialisations happen outside the capture
        torch.cuda.current_stream().wait_stream(stream)
        for layer, offset in zip(self.cache.layers, offsets, strict=True):
            layer.cumulative_length.copy_(offset)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            logits = self._call(*inputs, self.cache, keep)
        for layer, offset in zip(self.cache.layers, offsets, strict=True):
            layer.cumulative_length.copy_(offset)
        return graph, *inputs, logits


def has_standard_static_layers(model: PreTrainedModel) -> bool:
    """True when every layer of the model's ``StaticCache`` is a plain :class:`StaticLayer` (no sliding window,
    no linear attention): what :class:`StaticRunner` supports."""
    return all(type(layer) is StaticLayer for layer in _new_cache(StaticCache, model.config, max_cache_len=8).layers)



def clear_static_runners(model: PreTrainedModel) -> None:
    """Free the static caches and CUDA graphs flashspec keeps on ``model`` (they are rebuilt when needed)."""
    model.__dict__.pop("_flashspec_static_runners", None)
    model.__dict__.pop("_flashspec_static_fingerprint", None)


def on_one_gpu(model: PreTrainedModel) -> bool:
    """True when every weight of ``model`` lives on one CUDA device (no CPU or disk offload): CUDA graphs apply."""
    placements = {str(p) for p in getattr(model, "hf_device_map", {}).values()} or {str(model.device)}
    placements = {f"cuda:{p}" if p.isdigit() else p for p in placements}  # accelerate writes GPU 0 as 0
    return len(placements) == 1 and placements.pop().startswith("cuda")


@functools.cache
def _cache_kwarg(model_cls: type) -> str:
    """``cache`` (transformers >= 5.2x) or ``past_key_values`` (5.17), whichever ``forward`` takes."""
    params = inspect.signature(model_cls.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _new_cache(cache_class: type, config, **kwargs):
    """``cache_class(config=config, **kwargs)`` built on the host whatever the default device: transformers' cache
    layers create small host-side tensors (a static layer's write offset, a sliding layer's window size) on the
    default device and move them to the keys' device on first use, which fails under e.g.
    ``torch.set_default_device("meta")``."""
    with torch.device("cpu"):
        return cache_class(config=config, **kwargs)
