"""Model runners: one model (the target or a draft) over the shared columns, with its own KV cache (an early-exit
draft's, in the static backend, is a view of the target's).

A runner feeds the next ``width`` columns of :class:`~flashspec_hf.columns.Columns` after the ``seen`` ones and
returns the logits of the last ``keep`` of them. A draft model *catches up* before it drafts (feeds what it has
not seen, up to the pending column) and, where the backend asks for it, is *kept current* on steps it did not draft.
Two kinds:

- :class:`DynamicRunner`: ``seen`` on the host, a ``DynamicCache`` that grows with the columns and is cropped on
  rewind; the model builds its own causal mask from a 2D padding mask (or none), so sliding-window layers work.
  A draft model catches up lazily: one forward over everything it missed. The target's prefill feeds the pending
  column too and holds its logits, so a call runs as many target forwards as stock's when every step is plain.
- :class:`StaticRunner`: ``seen`` on the device, one count per row, and a ``StaticCache`` of ``N`` columns whose layers
  write each row's new keys and values at that row's own offset (:class:`RowOffsetLayer`: the dense layout of
  :mod:`~flashspec_hf.columns`), with a 4D mask over all of them, so every forward of a step has a fixed shape and a
  fixed address: the whole step can be captured as one CUDA graph. A draft model's catch-up and keep-current forwards
  read the last :attr:`StaticRunner.behind` committed columns again (two, plus what it may have missed since it was
  last fed: :data:`~flashspec_hf.backends.KEEP_CURRENT_EVERY`), whatever it has seen, so their widths are fixed; an
  early-exit draft (:class:`EarlyExitRunner`) reads and writes the target's cache and catches up with one column. Its
  forwards, the target's and the drafts' alike, can be compiled by ``torch.compile`` (inductor without its own CUDA
  graphs: the step's graph, or each prefill shape's, captures its kernels); the compiled forwards (one for steps, one
  of dynamic width for prefills) are kept on the model, so compilation happens once per model and shape family.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import itertools
import types
from collections.abc import Callable

import torch
import transformers
from packaging.version import Version
from transformers import DynamicCache, PreTrainedModel, StaticCache
from transformers.cache_utils import StaticLayer

from .attention import PACKED_MASK, mask_groups, model_configs, packed_attention, packed_mask
from .columns import Columns

Capture = Callable[[tuple, Callable[[], torch.Tensor]], torch.Tensor]
"""``capture(shape, run)``: the output of ``run`` (a forward reading only tensors kept between calls), computed
eagerly or by replaying a CUDA graph captured from it for ``shape`` (:meth:`StaticRunner.prefill`)."""

SLIDING_WINDOW_MIN_VERSION = Version("5.24")
"""Oldest transformers verified to crop a full sliding-window cache correctly (5.17 returns one key too many)."""


class Runner:
    """One model over a prefix of the columns: its next forward writes from column ``seen`` on (a static draft model's
    forwards first set ``seen`` back to the committed length less :attr:`StaticRunner.behind`).

    Args:
        model: the target or a draft model.
        vocab_size: the target's ``V``; ids the model has no embedding for (a draft with a smaller padded
            vocabulary) are fed as token 0 (its logits for them are ``-inf``-padded anyway).
    """

    seen: int | torch.Tensor
    keeps_current = False
    """Whether :meth:`keep_current` runs a forward (a cost on the steps other sources draft)."""
    prompt_argmax: torch.Tensor | None = None
    """int64 ``[B, W]``: the model's greedy token (an index of its own logits) at each column of the prompt window
    its last :meth:`prefill` was given (None: no window, or the runner fed nothing)."""
    held: torch.Tensor | None = None
    """Logits ``[B, 1, V_model]`` of the pending column, fed by a :meth:`prefill` with ``hold`` and not verified yet
    (:meth:`verify_forward`; what runs in between, the arm costs' timing, rewinds to where it started)."""

    def __init__(self, model: PreTrainedModel, vocab_size: int):
        self.model = model
        embeddings = model.get_input_embeddings().num_embeddings
        self.max_token = embeddings - 1 if embeddings < vocab_size else None
        self.vocab_size = vocab_size
        self.cache_kwarg = _cache_kwarg(type(model))

    def forward(self, columns: Columns, width: int, keep: int | slice | torch.Tensor) -> torch.Tensor:
        """Feed columns ``[seen, seen + width)``; logits ``[B, k, V_model]`` (model dtype, model device) of the last
        ``k = keep`` of them, or of those ``keep`` selects (:meth:`_call`). Afterwards ``seen`` is ``width`` larger."""
        ids, positions = columns.read(self.seen, width)  # [B, w] each
        if self.max_token is not None:
            ids = ids.masked_fill(ids > self.max_token, 0)
        logits = self._forward(columns, ids, positions, keep)
        self.seen += width
        return logits

    def prefill(self, columns: Columns, width: int, window: range | None = None, hold: bool = False) -> None:
        """Feed the first ``width`` columns of a call (the runner has seen none). With ``window`` (columns within
        them), keep the argmax of the logits there in :attr:`prompt_argmax`. With ``hold``, the last column is the
        target's pending one: its logits are kept in :attr:`held` for the first step, whose target forward then
        feeds only the drafts (none for a plain step): the prompt is read in one forward, as stock's prefill
        reads it."""
        kept = window if window is None or not hold else range(window.start, width)  # the window, then the last
        logits = self.forward(columns, width, keep=self._keep(kept))  # [B, W | W' | 1, V_model]
        self.held = logits[:, -1:] if hold else None  # [B, 1, V_model]
        self._keep_argmax(logits if window is None else logits[:, : len(window)], window)

    def verify_forward(self, columns: Columns, gamma: int) -> torch.Tensor:
        """The target's forward of a step: logits ``[B, γ + 1, V_model]`` of the pending column and the ``γ`` drafts
        after it, fed now (the pending column's from :attr:`held` when the prefill fed it)."""
        if self.held is None:
            return self.forward(columns, gamma + 1, keep=gamma + 1)
        held, self.held = self.held, None
        return held if gamma == 0 else torch.cat([held, self.forward(columns, gamma, keep=gamma)], dim=1)

    def _keep(self, window: range | None) -> int | slice | torch.Tensor:
        """``logits_to_keep`` of a prefill: the window's columns, else 1. An int64 ``[W]`` tensor on the model's
        device (a compiled prefill guards on its shape, not its values); a ``slice`` for a model spread over devices
        by accelerate, whose hooks would move a tensor to the first device while the last hidden states sit on
        another (cuda:0 and cuda:1)."""
        if window is None:
            return 1
        if len(set(getattr(self.model, "hf_device_map", {}).values())) > 1:
            return slice(window.start, window.stop)
        return torch.arange(window.start, window.stop, device=self.model.device)

    def _keep_argmax(self, logits: torch.Tensor, window: range | None) -> None:
        """Set :attr:`prompt_argmax` from a prefill's logits ``[B, W, V_model]`` (entries past the target's ``V``,
        a padded head's, never win)."""
        self.prompt_argmax = None if window is None else logits[..., : self.vocab_size].argmax(dim=-1)

    def catch_up(self, columns: Columns) -> torch.Tensor:
        """Feed the columns not seen yet, up to the pending one; logits ``[B, 1, V_model]`` of the pending one."""
        raise NotImplementedError

    def keep_current(self, columns: Columns, gamma: int, logits: bool = False) -> torch.Tensor | None:
        """Called on a step that another source drafted (``gamma`` drafts at columns ``[T, T + γ)``), when the backend
        keeps the others current; with ``logits``, returns the logits ``[B, γ, V_model]`` of columns
        ``[T - 1, T + γ - 1)`` (predicting the step's verified positions ``0 … γ - 1``) where the runner runs a
        forward (:attr:`keeps_current`), else None."""

    def rewind(self, length: int | torch.Tensor) -> None:
        """Forget the columns from ``length`` on (no-op if ``seen <= length``)."""
        raise NotImplementedError

    def _forward(self, columns, ids, positions, keep) -> torch.Tensor:
        raise NotImplementedError

    def _call(self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None, cache,
              keep: int | slice | torch.Tensor, call=None, **extra):
        """One forward of ``call`` (default: the model itself) over ``ids`` int64 ``[B, w]`` at ``positions``
        ``[B, w]``, with ``extra`` keyword arguments; logits ``[B, k, V_model]`` of the last ``k = keep`` columns, or
        of the columns ``keep`` selects (a ``slice``, or int64 ``[k]``)."""
        device = self.model.device
        out = (call or self.model)(
            input_ids=ids.to(device),
            position_ids=positions.to(device),
            attention_mask=None if mask is None else mask.to(device),
            use_cache=True,
            logits_to_keep=keep,
            **{self.cache_kwarg: cache},
            **extra,
        )
        if isinstance(keep, int):
            return out.logits[:, -keep:]
        if out.logits.shape[1] == ids.shape[1]:  # a model that ignored logits_to_keep (remote code)
            return out.logits[:, keep]
        return out.logits


NO_LOGITS = slice(0, 0)
"""``keep`` of a forward whose logits nothing reads (a keep-current forward): the model's head reads none of its
hidden states, and so not its ``[V, H]`` weight (the largest matrix of a small draft). Eager forwards only: a compiled
static step forward computes the last ``min_keep`` columns (1, or γ_max with side evidence) and returns none
(:meth:`StaticRunner._forward`)."""


class DynamicRunner(Runner):
    """A runner over a ``DynamicCache``, cropped on rewind (transformers' past recording makes sliding-window and
    linear-attention layers croppable); ``seen`` is a host int.

    Raises:
        NotImplementedError: sliding-window layers on transformers older than :data:`SLIDING_WINDOW_MIN_VERSION`.
    """

    def __init__(self, model: PreTrainedModel, vocab_size: int):
        super().__init__(model, vocab_size)
        self.seen = 0
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

    def catch_up(self, columns: Columns) -> torch.Tensor:
        return self.forward(columns, columns.host_length - self.seen, keep=1)

    def rewind(self, length: int | torch.Tensor) -> None:
        length = int(length)
        if self.seen > length:
            self.cache.crop(length - self.seen)  # negative: number of columns to remove
            self.seen = length

    def _forward(self, columns, ids, positions, keep) -> torch.Tensor:
        return self._call(ids, positions, columns.attention_mask_2d(self.seen + ids.shape[1]), self.cache, keep)


class RowOffsetLayer(StaticLayer):
    """A static cache layer that writes each row's new keys and values at that row's own column offset.

    transformers' :class:`StaticLayer` writes every row at one shared offset; ragged acceptance then leaves rejected
    drafts in the cache as masked holes. Here row ``b``'s ``w`` new columns go to
    ``[offsets[b], offsets[b] + w)``, so a runner that rewinds a row to its committed length overwrites the rejected
    columns on the next step. ``offsets`` belongs to the runner (its ``seen``), which advances it after the forward.

    Args:
        max_cache_len: ``N`` columns.
        offsets: int64 ``[B]`` each row's write offset, shared by every layer of the cache (not changed here).
    """

    def __init__(self, max_cache_len: int, offsets: torch.Tensor):
        super().__init__(max_cache_len)
        self.offsets = offsets

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Write ``key_states`` ``[B, H, w, D_k]`` and ``value_states`` ``[B, H, w, D_v]`` at each row's offset;
        return the whole keys and values ``[B, H, N, D]``."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        batch, heads, width, _ = key_states.shape
        offsets = self.offsets.to(self.device)  # [B]; a target split over devices has layers off the columns' device
        columns = (offsets.unsqueeze(1) + torch.arange(width, device=self.device)).view(batch, 1, width, 1)
        self.keys.scatter_(2, columns.expand(batch, heads, width, self.k_head_dim), key_states)
        self.values.scatter_(2, columns.expand(batch, heads, width, self.v_head_dim), value_states)
        return self.keys, self.values

    def get_seq_length(self) -> torch.Tensor:
        """Columns written by the widest row, int64 ``[]`` (rows differ; flashspec passes positions and masks, so
        models need no single length)."""
        return self.offsets.max()


class SharedRowOffsetLayer(RowOffsetLayer):
    """A :class:`RowOffsetLayer` over another one's keys and values (an early-exit draft's layer over the target's),
    written at its own offsets.

    Args:
        source: the layer whose tensors it reads and writes (initialised on first use if it is not yet).
        offsets: int64 ``[B]`` this layer's write offsets (the draft runner's ``seen``).
    """

    def __init__(self, source: RowOffsetLayer, offsets: torch.Tensor):
        super().__init__(source.max_cache_len, offsets)
        self.source = source

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        """Take the source's keys, values and the attributes describing them (whatever this transformers version
        keeps), initialising the source from ``key_states`` and ``value_states`` if needed."""
        if not self.source.is_initialized:
            self.source.lazy_initialization(key_states, value_states)
        vars(self).update({k: v for k, v in vars(self.source).items() if k != "offsets"})


class StaticRunner(Runner):
    """A runner over a ``StaticCache`` of ``N`` columns with :class:`RowOffsetLayer` layers, ``seen`` on the device
    (int64 ``[B]``, one per row): every forward has a fixed shape and reads its offsets from the device, so a
    captured step replays with any column counts.

    Args:
        model, vocab_size: see :class:`Runner`.
        batch_size: ``B``.
        capacity: ``N``, the columns' capacity.
        device: where the columns live (``seen`` goes there).
        compile_options: ``torch.compile`` keyword arguments for this model's forwards (their ``mode`` is replaced
            by one without inductor's CUDA graphs), or None for the eager forward. Prefills compile apart, their
            width dynamic unless the options set ``dynamic`` (:func:`compiled_call`'s ``prefill``): with a static
            one, a prompt in a wider prefill bucket compiled a graph per model (61 s on an H100 for SmolLM2-135M
            fp32 and its three drafts).
        behind: ``W``, committed columns a draft model's catch-up and keep-current forwards read again (at least 2:
            the column before the pending one, and the pending one); a draft that missed some steps' columns catches
            up on them within these, so it may miss up to ``W - 2`` columns
            (:data:`~flashspec_hf.backends.KEEP_CURRENT_EVERY`).
        min_keep: the fewest logit columns a compiled step forward asks the model for (:meth:`_forward`): γ_max
            for a draft model whose keep-current forwards keep side evidence, else 1. The target's forwards keep as
            many columns as they feed, and an early exit's feed one: neither is widened.
    """

    keeps_current = True

    def __init__(self, model: PreTrainedModel, vocab_size: int, batch_size: int, capacity: int, device: torch.device,
                 compile_options: dict | None = None, behind: int = 2, min_keep: int = 1):
        super().__init__(model, vocab_size)
        self.behind, self.min_keep = behind, min_keep
        self.seen = torch.zeros(batch_size, dtype=torch.long, device=device)  # [B]
        self.cache = _new_cache(StaticCache, model.config, layer=self._layer_maker(capacity), max_cache_len=capacity)
        self.dtype = model.get_input_embeddings().weight.dtype
        self.compiled = compiled_call(model, compile_options) if compile_options is not None else None
        self.compiled_prefill = (compiled_call(model, compile_options, prefill=True)
                                 if compile_options is not None else None)  # :meth:`prefill`
        self.configs = model_configs([model])
        self.groups = mask_groups(model) if self.configs else 1
        self.window_index: dict[int, torch.Tensor] = {}  # W -> int64 [W] (:meth:`_keep`)

    def _layer_maker(self, capacity: int) -> Callable[[], RowOffsetLayer]:
        """Makes the cache's layers, in order."""
        return lambda: RowOffsetLayer(capacity, self.seen)

    def catch_up(self, columns: Columns) -> torch.Tensor:
        """Feed the last :attr:`behind` committed columns again, the pending one last: ``[T - W, T)`` of each row,
        whatever it has seen (fixed shapes: a draft kept current reads again what it had)."""
        self._back(columns)
        return self.forward(columns, self.behind, keep=1)

    def keep_current(self, columns: Columns, gamma: int, logits: bool = False) -> torch.Tensor | None:
        keep = gamma if logits and gamma else 0
        self._back(columns)
        # [T - W, T + γ - 1): the committed columns it may have missed, the step's drafts; rewound by the commit
        kept = self.forward(columns, self.behind + gamma - 1, keep=keep or NO_LOGITS)
        return kept if keep else None

    def _back(self, columns: Columns) -> None:
        """``seen`` set to :attr:`behind` columns before each row's committed length, where a catch-up or
        keep-current forward starts (written in place: no temporary inside a captured step)."""
        torch.sub(columns.length, self.behind, out=self.seen)

    def rewind(self, length: int | torch.Tensor) -> None:
        """Set ``seen`` (each row's write offset) to ``length`` (a host int, or int64 ``[]`` or ``[B]``): later
        writes overwrite the columns after it, and the 4D mask hides them until then."""
        self.seen.fill_(length) if isinstance(length, int) else self.seen.copy_(length)

    def prefill(self, columns: Columns, width: int, window: range | None = None,
                capture: Capture | None = None) -> None:
        """Feed the first ``width`` columns of a call (see :meth:`Runner.prefill`): through the compiled prefill (if
        any: its width dynamic, so one graph serves every prompt length of a batch size and capacity) over
        :func:`prefill_width` columns, so calls whose prompts differ in length share a few captures, else eagerly
        over ``width``. The columns fed past ``width`` write keys and values that no query attends to
        (each query sees only the columns before it, and later forwards overwrite them before reading). The first
        prefill of a compiled runner runs eagerly first, so that the cache allocates its tensors outside the compiled
        graph (a graph traced while it allocates them is recompiled at the next call).

        With ``capture`` (the static backend's CUDA graphs), the compiled prefill runs through it, keyed by its shape
        ``(fed columns, window columns)``: a graph captured once per shape and replayed (a compiled forward over 64
        columns launches its few hundred kernels from the host in about 15 ms on the H200, TinyLlama shape, against
        1.9 ms of kernel time). What it runs reads only tensors kept between calls (the columns' buffers, the cache,
        ``seen``, the window's index), so a replay computes the new call's prefill."""
        self.prompt_argmax = None
        if width <= 0:
            self.rewind(0)
            return
        if self.compiled and not all(layer.is_initialized for layer in self.cache.layers):
            self._prefill(columns, width, None, window)
        self._prefill(columns, width, self.compiled_prefill, window, capture if self.compiled else None)

    def _prefill(self, columns: Columns, width: int, call: Callable | None, window: range | None,
                 capture: Capture | None = None) -> None:
        """One prefill of ``width`` columns through ``call`` (over :func:`prefill_width` columns) or eagerly,
        through ``capture`` if given."""
        self.rewind(0)
        fed = prefill_width(width, columns.capacity) if call else width
        keep = self._keep(window)

        def run() -> torch.Tensor:  # [B, W | 1, V_model]
            # [B, fed] each, row stride fed: a slice's is N, kept by .contiguous() at B = 1 (a one-row tensor counts
            # as contiguous), and a graph of dynamic width guards on whether the width is below it (torch 2.11:
            # a prefill as wide as its capacity compiled every model's prefill again, 65 s on an H100 on 2026-12-07)
            ids, positions = (t.clone(memory_format=torch.contiguous_format) for t in columns.read(0, fed))
            if self.max_token is not None:
                ids = ids.masked_fill(ids > self.max_token, 0)
            mask = columns.attention_mask_4d(self.seen, fed, self.dtype)  # [B, 1, fed, N]; seen is 0 here
            return self._call(ids, positions, mask, self.cache, keep, call)

        logits = run() if capture is None else capture((fed, 0 if window is None else len(window)), run)
        self._keep_argmax(logits, window)
        self.seen.fill_(width)

    def _keep(self, window: range | None) -> int | slice | torch.Tensor:
        """:meth:`Runner._keep`, a window's int64 ``[W]`` index in a tensor of the runner's own for each ``W``
        (refilled each call: a captured prefill reads it from the same memory)."""
        keep = super()._keep(window)
        if not isinstance(keep, torch.Tensor):
            return keep
        index = self.window_index.get(len(keep))
        if index is None:
            index = self.window_index[len(keep)] = torch.empty_like(keep)
        return index.copy_(keep)

    def _forward(self, columns, ids, positions, keep) -> torch.Tensor:
        """A step's forward (``w`` columns: up to γ + 1, or a draft's :attr:`behind` + γ - 1), its mask packed once
        for every layer (:meth:`_call`). Compiled, a forward keeping the last ``k`` columns' logits (an int ``k > 0``,
        or none: :data:`NO_LOGITS`, ``k = 0``) asks the model for the last ``min(w, max(min_keep, k))`` and returns
        the last ``min(k, w)`` of them, as the eager forward does: dynamo guards on ``logits_to_keep``'s type and on
        the value 1, so a draft model's wide forwards, keeping 1 column to catch up, γ to keep current with side
        evidence and none without, would otherwise compile a graph each on a set-up's first call. The price, untimed
        on a GPU: with side evidence every catch-up (one a drafting step) computes γ_max columns of the draft's head
        where it needs 1, and a keep-current forward without logits computes ``min_keep`` columns where it needs
        none, so it reads the head's ``[V, H]`` weight (about the bytes of the rest of a bundled draft). For a draft
        with a large vocabulary at a large batch the columns cost compute as well: a 0.5B draft's catch-up over 12
        columns with V = 151,936 at B = 64 and γ = 4 takes about 9% more FLOPs."""
        width = ids.shape[1]
        mask = columns.attention_mask_4d(self.seen, width, self.dtype)  # [B, 1, w, N]
        no_logits = isinstance(keep, slice) and keep == NO_LOGITS
        if self.compiled is None or not (no_logits or isinstance(keep, int) and keep > 0):
            return self._call(ids, positions, mask, self.cache, keep, self.compiled, pack_mask=True)
        wanted = 0 if no_logits else keep
        asked = min(width, max(self.min_keep, wanted))
        logits = self._call(ids, positions, mask, self.cache, asked, self.compiled, pack_mask=True)  # [B, asked, V]
        return logits[:, max(asked - wanted, 0) :]  # [B, min(keep, w), V_model], as the eager forward's

    def _call(self, ids, positions, mask, cache, keep, call=None, pack_mask: bool = False):
        """:meth:`Runner._call` with grouped-query attention packed (:mod:`flashspec_hf.attention`; every forward
        here passes a 4D mask). With ``pack_mask`` (a step's few columns; a prefill's mask may be too wide to pack)
        and packing in effect, the mask is packed here once for every layer
        (:func:`~flashspec_hf.attention.mask_groups`) rather than by each layer."""
        with packed_attention(self.configs) as packing:
            packs = pack_mask and packing and self.groups > 1
            extra = {PACKED_MASK: packed_mask(mask, self.groups)} if packs else {}  # [B, 1, n_rep·w, N]
            return super()._call(ids, positions, mask, cache, keep, call, **extra)


class EarlyExitRunner(StaticRunner):
    """The static runner of an early-exit draft (:func:`~flashspec_hf.target_parts.is_early_exit_of`): its cache
    layers read and write the target runner's first layers (:class:`SharedRowOffsetLayer`) at the draft's own
    offsets, so it holds no cache of its own and costs nothing on the steps it does not draft. The target's forwards
    write those layers for every column it reads, so the draft catches up with one column, the pending one, from
    the target's offsets. What it writes past them (the pending column and its drafts) the target's next forward
    overwrites before attending to it, so the target's keys, values and logits are those it computes alone; the
    draft reads keys and values the target computed for its layers (equal to its own up to rounding), and its
    draws are verified against what it computed, so the output distribution is unchanged.

    Args:
        model, vocab_size, batch_size, capacity, device, compile_options: see :class:`StaticRunner`.
        target: the target's runner, created first.
    """

    keeps_current = False

    def __init__(self, model: PreTrainedModel, vocab_size: int, batch_size: int, capacity: int, device: torch.device,
                 compile_options: dict | None, target: StaticRunner):
        self.target = target
        super().__init__(model, vocab_size, batch_size, capacity, device, compile_options)

    def _layer_maker(self, capacity: int) -> Callable[[], RowOffsetLayer]:
        sources = iter(self.target.cache.layers)
        return lambda: SharedRowOffsetLayer(next(sources), self.seen)

    def prefill(self, columns: Columns, width: int, window: range | None = None,
                capture: Capture | None = None) -> None:
        """Nothing to feed (the target's prefill wrote these layers' columns): start at the target's pending
        column. No :attr:`prompt_argmax`: that would take a forward of the draft over the prompt."""
        self.rewind(width)

    def rewind(self, length: int | torch.Tensor) -> None:
        """Back to the target's pending column, whatever ``length``: the columns before it are the target's, and a
        forward from anywhere earlier would overwrite them."""
        self.seen.copy_(self.target.seen)  # [B]

    def catch_up(self, columns: Columns) -> torch.Tensor:
        self.rewind(self.target.seen)
        return self.forward(columns, 1, keep=1)  # the pending column

    def keep_current(self, columns: Columns, gamma: int, logits: bool = False) -> None:
        """Nothing: the target's forward writes these layers for the step's columns."""


MIN_PREFILL_WIDTH = 64
"""The narrowest compiled prefill (columns)."""


PREFILL_STEP = 256
"""Past this width, compiled prefills are padded to a multiple of it (not to a power of two: at most this many
columns fed in vain)."""


def prefill_width(width: int, capacity: int) -> int:
    """Columns a compiled prefill of ``width`` columns feeds: the next power of two from :data:`MIN_PREFILL_WIDTH`
    up to :data:`PREFILL_STEP`, then the next multiple of it; at most ``capacity``."""
    padded = max(MIN_PREFILL_WIDTH, 1 << (width - 1).bit_length()) if width <= PREFILL_STEP else -(
        -width // PREFILL_STEP) * PREFILL_STEP
    return min(padded, capacity)


RECOMPILE_LIMIT = 64
"""Dynamo's recompile limit while a compiled forward runs. Its default, 8, counts the graphs kept for one code object
(two per model here, the steps' and the prefills': :func:`_model_forward_of_its_own`), and a model adds a graph per
width family and batch family (and, with ``CompileConfig(dynamic=False)``, per width)."""


def compiled_call(model: PreTrainedModel, options: dict, prefill: bool = False) -> Callable:
    """``torch.compile`` of ``model``'s forward, kept on the model per options while its parameters stay put
    (:func:`parameters_fingerprint`), without inductor's own CUDA graphs
    (``mode="max-autotune-no-cudagraphs"`` if the options asked for autotuning, else the default mode), run under
    :data:`RECOMPILE_LIMIT`. It runs in a static session's eager steps and captures (replays skip dynamo's
    guards; prefills too, and every call's where the backend does not capture them), so the number of kept graphs
    costs no step time. It compiles a copy of :func:`_model_forward` under a name of the model's own, on whose code
    dynamo keeps the model's graphs and what it learnt of their shapes. Compiling ``model.__call__`` kept them on the
    code of transformers' decorator around ``forward`` (seen on 5.24), which every model shares with stock
    ``generate``'s compiled forward (flashspec's graphs then used up stock's recompile limit); one function for all
    of flashspec's models let a draft's values make the target's graphs symbolic. With
    ``options={"freezing": True}`` (``CompileConfig(options=...)``) the weights are frozen into the graphs, which lets
    inductor concatenate the GEMMs that read one input (q/k/v, gate/up; the graphs then hold those weights a second
    time, and weights loaded in place later, by ``load_state_dict``, do not reach them: delete
    ``model._flashspec_compiled``). A ``prefill`` forward compiles on a code object of its own, and the width of its
    ``input_ids``, ``position_ids`` (dimension 1) and 4D ``attention_mask`` (dimension 2) is marked dynamic unless
    the options set ``dynamic``, so that one graph serves every prompt length of a batch size and capacity: a static
    width is one graph per prefill bucket, and ``dynamic=True`` gives equal sizes one symbol (a first prefill of 64
    columns and heads of 64 dimensions: the width is then tied to the heads', and a 128-column prefill recompiles)."""
    options = dict(options)
    mode = "max-autotune-no-cudagraphs" if "autotune" in str(options.pop("mode", "")) else None
    weights = parameters_fingerprint([model])
    kept_for, compiled = model.__dict__.get("_flashspec_compiled", (weights, {}))
    if kept_for != weights:  # a frozen graph holds the old weights as constants
        compiled = {}
    model.__dict__["_flashspec_compiled"] = weights, compiled
    key = repr((mode, sorted(options.items()), prefill))
    if key not in compiled:
        forward = torch.compile(_model_forward_of_its_own(), mode=mode, **options)
        freezing = bool((options.get("options") or {}).get("freezing"))
        widths = ({"input_ids": 1, "position_ids": 1, "attention_mask": 2}
                  if prefill and options.get("dynamic") is None else {})

        def call(**kwargs):
            for name, dim in widths.items():
                if kwargs.get(name) is not None:
                    torch._dynamo.maybe_mark_dynamic(kwargs[name], dim)
            with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT), _freezing(freezing):
                return forward(model, **kwargs)

        compiled[key] = call
    return compiled[key]


def parameters_fingerprint(models: list[PreTrainedModel]) -> tuple:
    """Address, dtype and device of every parameter and buffer (e.g. rotary frequencies) of ``models``: equal only
    while their tensors stay put. Values written in place (``load_state_dict``) keep it: graphs and compiled
    forwards then read the new values, except frozen ones (:func:`compiled_call`). Taken on every static call
    (its session and arm costs), so it walks the modules itself: ``model.parameters()`` names every module on the
    way, about twice the time (1.00 against 0.48 ms, medians of 7, for SmolLM2-135M and its three drafts on a
    2-core CPU)."""
    found = []
    for model in models:
        stack, seen = [model], set()
        while stack:
            module = stack.pop()
            if module is None or id(module) in seen:
                continue
            seen.add(id(module))
            tensors = itertools.chain(module._parameters.values(), module._buffers.values())
            found += [(t.data_ptr(), t.dtype, t.device) for t in tensors if t is not None]
            stack += module._modules.values()
    return tuple(found)


def _freezing(on: bool) -> contextlib.AbstractContextManager:
    """Inductor's freezing switched on while dynamo traces, which reads it from the global config (whether weights
    become constants; torch.compile's ``options`` reach inductor alone, too late), or nothing."""
    if not on:
        return contextlib.nullcontext()
    from torch._inductor import config

    return config.patch(freezing=True)


def _model_forward(model: PreTrainedModel, **kwargs):
    """``model(**kwargs)``: what :func:`compiled_call` compiles, a copy per model
    (:func:`_model_forward_of_its_own`)."""
    return model(**kwargs)


_copies = itertools.count()


def _model_forward_of_its_own() -> Callable:
    """A copy of :func:`_model_forward` under a name of its own. Dynamo keeps its graphs per code object and what its
    automatic dynamic shapes learnt per code *name* (``torch._dynamo.pgo.CodeId``: file, line, name): with one for
    every model, a value that differs between the target and a draft (an RMSNorm epsilon, seen on the CPU on
    2026-12-07) was made symbolic in the target's graphs too."""
    code = _model_forward.__code__.replace(co_name=f"_model_forward_{next(_copies)}")
    return types.FunctionType(code, _model_forward.__globals__, code.co_name)


def has_standard_static_layers(model: PreTrainedModel) -> bool:
    """True when every layer of the model's ``StaticCache`` is a plain :class:`StaticLayer` (no sliding window,
    no linear attention): what :class:`StaticRunner` supports. Asked of every model on every call that may run
    static (every CUDA call, and every ``cache_implementation="static"`` one); the answer is kept on the model for
    its config's attributes as they are and the transformers version that gave it, so a config changed in place, or a
    model unpickled under another version (whose cache layers may differ), is asked again. On a 2-core CPU
    (2026-12-07) building the cache took 1.1 ms for SmolLM2-135M and the attributes' ``repr`` 0.03 ms (0.6 ms for a
    composite config such as Gemma 3's, whose sub-configs print as JSON)."""
    described = transformers.__version__, repr(vars(model.config))
    kept = model.__dict__.get("_flashspec_standard_layers")
    if kept is None or kept[0] != described:
        layers = _new_cache(StaticCache, model.config, max_cache_len=8).layers
        kept = model.__dict__["_flashspec_standard_layers"] = described, all(type(la) is StaticLayer for la in layers)
    return kept[1]


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


def _new_cache(cache_class: type, config, layer=None, **kwargs):
    """``cache_class(config=config, **kwargs)``, its layers replaced by ``layer()`` ones if given, built on the host
    whatever the default device: transformers' cache layers create small host-side tensors (a static layer's write
    offset, a sliding layer's window size) on the default device and move them to the keys' device on first use,
    which fails under e.g. ``torch.set_default_device("meta")``."""
    with torch.device("cpu"):
        cache = cache_class(config=config, **kwargs)
        if layer is not None:
            cache.layers = [layer() for _ in cache.layers]
        return cache
