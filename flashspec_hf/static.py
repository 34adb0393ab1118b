"""The static-shape speculative loop (``cache_implementation="static"``): no host synchronisation per step,
static KV caches, and CUDA graphs on the GPU.

Differences from the dynamic loop (:mod:`flashspec_hf.decoding`):

- every step appends exactly ``γ + 1`` columns (the drafts, rejected ones left as masked holes, then the recovered
  or bonus token), so the column count is known on the host without reading the device;
- no cache is ever cropped: each model's :class:`~transformers.StaticCache` holds the columns it has fed, in order,
  and a 4D attention mask built on the device hides the holes;
- the forwards of the steady state have fixed shapes: the target reads ``[B, γ + 1]``, the drafting assistant
  ``[B, 2]`` (its last draft and the new token) then ``[B, 1]`` per draft; on CUDA each shape is captured once as a
  CUDA graph and replayed (Python and launch overhead vanish); catch-ups of other lengths run eagerly;
- the selector's statistics and the loop's exit are read through non-blocking copies once the GPU has finished
  those steps (the host waits only when more than ``MAX_IN_FLIGHT`` steps are queued); the selector only ever
  uses past steps, so exactness is untouched. Finished rows emit nothing, so the steps queued after the last
  row finished cost time but change no output;
- caches and graphs are kept on the model between calls with the same batch size and capacity bucket
  (``CAPACITY_STEP`` columns; at most ``KEPT_RUNNERS`` per model), so repeated calls capture nothing; they are
  dropped when the model's parameters change (new tensors, dtype or device), since a graph replays the memory it
  captured. :func:`clear_static_runners` frees them.

Supports: greedy and sampling with context-free warpers (temperature, top-k, top-p, min-p, …), EOS and length
limits, model and prompt-lookup draft sources, bandit selectors. It is the default on CUDA when a call needs
nothing else (:func:`static_unsupported`); ``cache_implementation="static"`` asks for it (a ValueError names what
is unsupported), ``"dynamic"`` for the dynamic loop.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque

import torch
from transformers import PreTrainedModel, StaticCache
from transformers.cache_utils import StaticLayer

from .columns import _cache_kwarg
from .drafts import DraftContext, DraftSource, ModelDrafts, _draw
from .kernels.reference import PLACEHOLDER_TOKEN_ID
from .processing import LogitsProcessing, Sequences
from .selection import Selector
from .stats import FlashSpecStats
from .verification import verify

MAX_IN_FLIGHT = 3  # steps the host may queue ahead of the GPU before it waits for the oldest
CAPACITY_STEP = 1024  # cache capacities are rounded up to a multiple of this, so calls share caches and graphs
KEPT_RUNNERS = 4  # runners (cache + graphs) kept per model, least recently used dropped first
_step_guard = contextlib.nullcontext  # wraps each step's enqueueing; the GPU test makes it forbid synchronisation


class StaticColumns:
    """The shared column layout in preallocated buffers.

    Args:
        input_ids: int64 ``[B, L]`` left-padded prompt; ``attention_mask`` ``[B, L]`` or None.
        capacity: columns to allocate (prompt + ``(γ_max + 1)`` per step).
    """

    def __init__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, capacity: int):
        batch_size, self.length = input_ids.shape
        valid = torch.ones_like(input_ids) if attention_mask is None else attention_mask.long()  # [B, L]
        self.tokens = input_ids.new_zeros(batch_size, capacity)  # [B, N]
        self.valid = torch.zeros(batch_size, capacity, dtype=torch.bool, device=input_ids.device)  # [B, N]
        self.positions = input_ids.new_zeros(batch_size, capacity)  # [B, N]
        self.tokens[:, : self.length] = input_ids
        self.valid[:, : self.length] = valid.bool()
        self.positions[:, : self.length] = (valid.cumsum(-1) - 1).clamp(min=0)
        self.last_position = self.positions[:, self.length - 1].clone()  # [B] position of the pending token
        self.columns = torch.arange(capacity, device=input_ids.device)  # [N]

    def mask(self, start: int, width: int, dtype: torch.dtype) -> torch.Tensor:
        """Additive mask ``[B, 1, width, N]`` for queries at columns ``[start, start + width)``: 0 where the key
        column is valid and not after the query, the dtype's minimum elsewhere."""
        queries = self.columns[start : start + width].unsqueeze(-1)  # [w, 1]
        allowed = self.valid.unsqueeze(1) & (self.columns <= queries)  # [B, w, N]
        zero = torch.zeros((), dtype=dtype, device=allowed.device)
        return torch.where(allowed, zero, torch.finfo(dtype).min).unsqueeze(1)

    def write_drafts(self, drafts: torch.Tensor, offset: int = 0) -> None:
        """Place drafts int64 ``[B, k]`` (numbers ``offset … offset + k - 1`` of the step) at columns
        ``[T + offset, T + offset + k)``, valid for now, at consecutive positions after the pending token."""
        first, last = self.length + offset, self.length + offset + drafts.shape[1]
        steps = torch.arange(offset + 1, offset + drafts.shape[1] + 1, device=drafts.device)  # [k]
        self.tokens[:, first:last] = drafts
        self.valid[:, first:last] = True
        self.positions[:, first:last] = self.last_position.unsqueeze(1) + steps

    def commit(self, output: torch.Tensor, num_accepted: torch.Tensor) -> None:
        """After verification: drafts past each row's accepted count become holes; the recovered or bonus token
        (``output`` int64 ``[B, γ + 1]``) is the new pending column. Appends ``γ + 1`` columns."""
        gamma = output.shape[1] - 1
        pending = self.length + gamma
        self.valid[:, self.length : pending] = torch.arange(gamma, device=output.device) < num_accepted.unsqueeze(1)
        self.tokens[:, pending] = output.gather(1, num_accepted.unsqueeze(1)).squeeze(1)
        self.valid[:, pending] = True
        self.last_position = self.last_position + num_accepted + 1
        self.positions[:, pending] = self.last_position
        self.length = pending + 1


class StaticRunner:
    """One model over the columns with a static KV cache; fixed-shape forwards are CUDA graphs on the GPU.

    Args:
        model: the target or an assistant.
        capacity: ``N``, columns of the cache.
        vocab_size: the target's ``V`` (ids beyond the model's embeddings are fed as 0, as in the dynamic loop).
        graph_shapes: ``(width, logits kept)`` forwards to capture as CUDA graphs (CUDA only).
    """

    def __init__(self, model: PreTrainedModel, capacity: int, vocab_size: int, graph_shapes: set[tuple[int, int]]):
        self.model = model
        self.cache = StaticCache(config=model.config, max_cache_len=capacity)
        self.seen = 0  # columns fed so far
        embeddings = model.get_input_embeddings().num_embeddings
        self.max_token = embeddings - 1 if embeddings < vocab_size else None
        limit = getattr(model.config.get_text_config(), "max_position_embeddings", None)
        self.max_position = limit - 1 if limit else 2**62  # positions are clamped to it
        self.dtype = model.get_input_embeddings().weight.dtype
        self.graph_shapes = graph_shapes if _on_one_gpu(model) else set()
        self.graphs = {}  # (width, keep) -> (graph, ids, positions, mask, logits)

    @classmethod
    def for_model(cls, model: PreTrainedModel, capacity: int, vocab_size: int, graph_shapes: set, batch_size: int):
        """The runner kept on ``model`` for this batch size, capacity and graph shapes (new if none), reset to
        no columns seen. All kept runners are dropped first if the model's parameters changed."""
        fingerprint = tuple((p.data_ptr(), p.dtype, p.device) for p in model.parameters())
        if model.__dict__.get("_flashspec_static_fingerprint") != fingerprint:
            clear_static_runners(model)
            model.__dict__["_flashspec_static_fingerprint"] = fingerprint
        runners = model.__dict__.setdefault("_flashspec_static_runners", {})
        key = (batch_size, capacity, frozenset(graph_shapes))
        runner = runners.pop(key, None) or cls(model, capacity, vocab_size, graph_shapes)
        runners[key] = runner  # most recently used last
        while len(runners) > KEPT_RUNNERS:
            runners.pop(next(iter(runners)))
        runner.seen = 0
        for layer in runner.cache.layers:
            if layer.is_initialized:
                layer.cumulative_length.zero_()
        return runner

    def forward(self, columns: StaticColumns, width: int, keep: int) -> torch.Tensor:
        """Feed columns ``[seen, seen + width)``; logits ``[B, keep, V_model]`` of the last ``keep`` of them."""
        start = self.seen
        ids = columns.tokens[:, start : start + width]  # [B, w]
        if self.max_token is not None:
            ids = ids.masked_fill(ids > self.max_token, 0)
        positions = columns.positions[:, start : start + width].clamp(max=self.max_position)  # [B, w]
        # (only drafts past the length limit and finished rows reach the clamp; their tokens are never emitted)
        mask = columns.mask(start, width, self.dtype)  # [B, 1, w, N]
        self.seen += width
        shape = (width, keep)
        if shape not in self.graph_shapes or not all(layer.is_initialized for layer in self.cache.layers):
            return self._call(ids, positions, mask, keep)
        if shape not in self.graphs:
            self.graphs[shape] = self._capture(ids, positions, mask, keep)
        graph, *inputs, logits = self.graphs[shape]
        for buffer, value in zip(inputs, (ids, positions, mask), strict=True):
            buffer.copy_(value)
        graph.replay()
        return logits.clone()  # the graph's output buffer is overwritten by its next replay

    def _call(self, ids, positions, mask, keep) -> torch.Tensor:
        device = self.model.device
        out = self.model(
            input_ids=ids.to(device),
            position_ids=positions.to(device),
            attention_mask=mask.to(device),
            use_cache=True,
            logits_to_keep=keep,
            **{_cache_kwarg(type(self.model)): self.cache},
        )
        return out.logits

    def _capture(self, ids, positions, mask, keep) -> tuple:
        """Capture one forward as a CUDA graph on static copies of its inputs; the cache's write offsets are
        restored afterwards (the warm-up run advanced them)."""
        inputs = [ids.clone(), positions.clone(), mask.clone()]
        offsets = [layer.cumulative_length.clone() for layer in self.cache.layers]
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            self._call(*inputs, keep)  # warm-up: lazy initialisations happen outside the capture
        torch.cuda.current_stream().wait_stream(stream)
        for layer, offset in zip(self.cache.layers, offsets, strict=True):
            layer.cumulative_length.copy_(offset)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            logits = self._call(*inputs, keep)
        for layer, offset in zip(self.cache.layers, offsets, strict=True):
            layer.cumulative_length.copy_(offset)
        return graph, *inputs, logits


def clear_static_runners(model: PreTrainedModel) -> None:
    """Free the static caches and CUDA graphs flashspec keeps on ``model`` (they are rebuilt when needed)."""
    model.__dict__.pop("_flashspec_static_runners", None)
    model.__dict__.pop("_flashspec_static_fingerprint", None)


def _on_one_gpu(model: PreTrainedModel) -> bool:
    """True when every weight of ``model`` lives on one CUDA device (no CPU or disk offload): CUDA graphs apply."""
    placements = {str(p) for p in getattr(model, "hf_device_map", {}).values()} or {str(model.device)}
    placements = {f"cuda:{p}" if p.isdigit() else p for p in placements}  # accelerate writes GPU 0 as 0
    return len(placements) == 1 and placements.pop().startswith("cuda")


def static_unsupported(model, sources, processing: LogitsProcessing, criteria, streamer, want_outputs, selector):
    """The first requested feature the static loop does not support (a phrase), or None."""
    problems = {
        "prefix-dependent logits processors (repetition penalty, n-gram bans, min length, …)": processing.contextual,
        "stopping criteria other than EOS and length (stop strings, custom criteria)": len(criteria) > 0,
        "a streamer": streamer is not None,
        "return_dict_in_generate with scores or logits": want_outputs,
        "a full-information selector (Hedge)": selector.full_information,
    }
    models = [model] + [s.cache.model for s in sources if isinstance(s, ModelDrafts)]
    problems["sliding-window, linear-attention or other non-standard cache layers"] = any(
        any(type(layer) is not StaticLayer for layer in StaticCache(config=m.config, max_cache_len=8).layers)
        for m in models
    )
    return next((what for what, present in problems.items() if present), None)


def static_decode(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    processing: LogitsProcessing,
    eos: torch.Tensor | None,
    max_new_tokens: int,
    pad_token_id: int,
    sources: list[DraftSource],
    arms: list[tuple[int, int]],
    selector: Selector,
    do_sample: bool,
    stats: FlashSpecStats,
) -> Sequences:
    """Run the static-shape loop (module docstring); returns the filled :class:`Sequences` and fills ``stats``.

    Args:
        input_ids: int64 ``[B, L]`` left-padded prompts, ``attention_mask`` ``[B, L]`` or None.
        processing: generate's processors (context-free warpers only).
        eos: int64 ``[E]`` EOS ids or None; ``max_new_tokens``: per row.
        sources, arms, selector: the draft sources, ``(source, γ)`` per arm, and the selector.
    """
    from .decoding import _cut_block  # the same per-row cut as the dynamic loop

    batch_size, prompt_length = input_ids.shape
    device = input_ids.device
    vocab_size = model.config.get_text_config().vocab_size
    gammas = sorted({g for _, g in arms})
    needed = prompt_length + 1 + max_new_tokens * (max(gammas) + 1)
    capacity = -(-needed // CAPACITY_STEP) * CAPACITY_STEP
    columns = StaticColumns(input_ids, attention_mask, capacity)
    sequences = Sequences(input_ids, max_new_tokens, max(gammas), pad_token_id)

    def warp(logits: torch.Tensor, drafts: torch.Tensor) -> torch.Tensor:
        return processing(logits, sequences, [], drafts, drafts[:, :0]) if not processing.is_identity else logits.float()

    ctx = DraftContext(columns, sequences, warp, vocab_size, do_sample)  # prompt lookup reads ctx.sequences only
    target = StaticRunner.for_model(model, capacity, vocab_size, {(g + 1, g + 1) for g in gammas}, batch_size)
    runners = {
        i: StaticRunner.for_model(s.cache.model, capacity, vocab_size, {(2, 1), (1, 1)}, batch_size)
        for i, s in enumerate(sources)
        if isinstance(s, ModelDrafts)
    }
    if prompt_length > 1:
        target.forward(columns, prompt_length - 1, 1)  # prefill; the pending column is read with the drafts
    finished = torch.zeros(batch_size, dtype=torch.bool, device=device)  # [B]
    records = deque()  # per step in flight: (arm, γ, host copy of [3, B], end event or None, timer)
    done = False
    for _ in range(max_new_tokens):
        done = _read(records, MAX_IN_FLIGHT, selector, stats) or done
        if done:
            break
        with _step_guard():  # enqueues the whole step; nothing here waits for the device
            timer = _Timer(device)
            arm = selector.choose()
            source, gamma = arms[arm]
            if source in runners:
                drafts, draft_logits = _draft(runners[source], sources[source], columns, gamma, ctx)
            else:
                drafts, draft_logits = sources[source].propose(ctx, gamma)  # [B, γ], [B, γ, V] | None
                columns.write_drafts(drafts)
            logits = target.forward(columns, gamma + 1, gamma + 1).to(device)  # [B, γ+1, V]
            scores = warp(logits, drafts[:, :0])  # [B, γ+1, V] fp32 (context-free warpers only)
            output, num_accepted = verify(scores, drafts, draft_logits)  # [B, γ+1], [B]
            output = output.masked_fill(output == PLACEHOLDER_TOKEN_ID, pad_token_id)
            was_finished = finished
            num_emitted, finished = _cut_block(
                output, num_accepted, scores, finished, sequences, [], [], eos, max_new_tokens
            )
            sequences.append(output, num_emitted)
            columns.commit(output, num_accepted)
            counts = torch.stack([num_accepted, was_finished.long(), finished.long()])  # [3, B]
            records.append((arm, gamma, *timer.stop(counts)))
    _read(records, 0, selector, stats)
    sequences.sync_counts()
    return sequences


def _draft(runner: StaticRunner, source: ModelDrafts, columns: StaticColumns, gamma: int, ctx: DraftContext):
    """Catch ``runner`` up to the pending column and draft γ tokens: int64 ``[B, γ]`` and ``q`` ``[B, γ, V]`` or None."""
    logits = runner.forward(columns, columns.length - runner.seen, 1)  # [B, 1, V_draft]
    drafts = columns.tokens.new_empty(columns.tokens.shape[0], 0)  # [B, i]
    scores = []
    for i in range(gamma):
        q = ctx.process(source._fit(logits, ctx.vocab_size).to(columns.tokens.device), drafts)  # [B, 1, V]
        token = _draw(q[:, 0], ctx.do_sample)  # [B, 1]
        columns.write_drafts(token, offset=i)  # column T + i
        drafts = torch.cat([drafts, token], dim=1)
        scores.append(q)
        if i + 1 < gamma:
            logits = runner.forward(columns, 1, 1)
    return drafts, torch.cat(scores, dim=1) if ctx.do_sample else None


class _Timer:
    """Step time without a synchronisation: CUDA events read later, or host wall time on CPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.start_time = time.perf_counter()
        if self.cuda:
            self.start = torch.cuda.Event(enable_timing=True)
            self.start.record()

    def stop(self, counts: torch.Tensor) -> tuple:
        """Start a non-blocking copy of ``counts``; returns ``(host copy, end event or None, timer)``."""
        if not self.cuda:
            self.end_time = time.perf_counter()
            return counts, None, self
        host = torch.empty(counts.shape, dtype=counts.dtype, pin_memory=True)
        host.copy_(counts, non_blocking=True)
        end = torch.cuda.Event(enable_timing=True)
        end.record()
        return host, end, self

    def seconds(self, end) -> float:
        if end is None:
            return self.end_time - self.start_time
        return self.start.elapsed_time(end) / 1000


def _read(records: deque, in_flight: int, selector: Selector, stats: FlashSpecStats) -> bool:
    """Hand the finished steps to the selector and stats, waiting for the oldest while more than ``in_flight``
    are queued (0: all); True once a step read shows every row finished."""
    done = False
    while records and (len(records) > in_flight or records[0][3] is None or records[0][3].query()):
        arm, gamma, host, end, timer = records.popleft()
        if end is not None:
            end.synchronize()  # already complete unless more than `in_flight` steps were queued
        accepted, was_finished, finished = host.tolist()
        active = [n for n, f in zip(accepted, was_finished, strict=True) if not f]
        seconds = timer.seconds(end)
        if active:
            selector.update(arm, active, gamma, seconds)
            stats.record(arm, active, seconds)
        done = all(finished)
    return done
