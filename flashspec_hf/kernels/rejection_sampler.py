"""Triton verification kernel: greedy and speculative-sampling acceptance without a device-to-host sync.

Same inputs, outputs and vocabulary as :mod:`flashspec_hf.kernels.reference` (the oracle it is tested against
bit for bit on accepted counts and tokens). Three launches, none of which reads anything back to the host:

1. :func:`_vocab_stats_kernel`, grid ``(rows, NSPLIT)``: each program streams one vocabulary chunk of one logits
   row in ``BLOCK``-wide tiles and writes a partial ``(max, sum exp)`` (sampling) or ``(max, argmax)`` (greedy).
   Memory per program is ``O(BLOCK)``, independent of ``V``; splitting the vocabulary keeps the GPU busy at
   batch 1, where there are only ``γ + 1`` rows. A tile is ``[BLOCK / 8, 8]``: each thread's 8 contiguous columns
   share one running max, so the online softmax takes ``1 + 1/8`` exponentials per column, not 2.
2. :func:`_sample_kernel` (sampling only), grid ``(B, RSPLIT)``, its own vocabulary split (``B`` rows, not
   ``B·(γ+1)``, must fill the device): combines the partial log-sum-exps, tests
   ``log u_i <= log p_i(x_i) - log q_i(x_i)`` for every draft token, finds the first rejection ``k`` and streams
   its chunk of position ``k``, summing ``r = max(0, p_k - q_k)`` (or ``p_{γ+1}``) over each race tile of
   ``race_tile`` columns; the first level of the two-level exponential race (:mod:`~flashspec_hf.kernels.reference`)
   races the chunk's tiles, ``argmax(R_t · w_t)``, ``w = 1 / E``, ``E ~ Exp(1)``. No randomness per column here:
   the loop is two exponentials and two sums per column (21 PTX instructions per column for sm_90 against 101 for
   the one-level race it replaces, ``benchmarks/kernel_ptx.py``).
3. :func:`_finalize_kernel`, grid ``(B,)``: reduces the per-chunk winners; when sampling, races the columns of the
   winning tile (``race_tile`` columns per row) and writes the output row.

The uniforms ``u`` and the weights ``w`` are drawn where they are used, from a counter-based Philox keyed by a seed
tensor (:mod:`flashspec_hf.kernels.philox`; one Philox evaluation per four columns of the winning tile): no
``[B, V]`` noise tensor exists.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from .philox import (RACE_STREAM, TILE_COUNTER, UNIFORM_STREAM, race_weight_tl, randint4_tl, randint_tl,
                     stream_offset_tl, uniform_tl)
from .reference import PLACEHOLDER_TOKEN_ID, RACE_TILE

_BIG_INDEX = tl.constexpr(2**31 - 1)  # larger than any vocabulary index: loses every min()
# Launch defaults per mode, (tile columns, warps, programs per SM): the fastest of benchmarks/kernel_tune's sweep at
# B = 64, V = 262,144, bf16 on an H200 (benchmarks/results/h200_2026-12-02_kernel_qwen/kernel_tune.csv; timed with
# plain launches, so smaller shapes were hidden by host overhead). The vocabulary splits of both passes fill about
# "programs per SM" programs on every SM.
LAUNCH = {"greedy": (4096, 8, 16), "sampling": (1024, 4, 16)}
_VEC = 8  # columns per tile row in the statistics pass (and the smallest tile): one rescale per 8 columns


def verify_triton(
    target_logits: torch.Tensor,
    draft_tokens: torch.Tensor,
    draft_logits: torch.Tensor | None = None,
    seed: torch.Tensor | None = None,
    *,
    block_size: int | None = None,
    num_splits: int | None = None,
    sample_splits: int | None = None,
    num_warps: int | None = None,
    race_tile: int = RACE_TILE,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Verify one speculative step for a batch; greedy when ``draft_logits`` is None, else speculative sampling.

    Args:
        target_logits: ``[B, γ + 1, V]`` fp32/bf16/fp16 processed target logits; the vocabulary axis contiguous.
        draft_tokens: int64 ``[B, γ]``.
        draft_logits: ``[B, γ, V]`` processed draft logits (sampling) or None (greedy).
        seed: int64 ``[1]`` Philox key on the logits' device (sampling), from
            :func:`flashspec_hf.kernels.philox.draw_seed`; the kernel draws what
            :func:`~flashspec_hf.kernels.philox.philox_noise` returns for it.
        block_size: vocabulary tile per loop iteration (a power of two, at least 8); default from :data:`LAUNCH`.
        num_splits: vocabulary chunks per logits row in the statistics pass (``B·(γ+1)`` rows); default fills the
            device (:data:`LAUNCH`'s programs per SM).
        sample_splits: vocabulary chunks per batch row in the sampling race (``B`` rows); default fills the device
            the same way. It never changes the result (the noise is keyed by tile and column, ties go to the lowest
            tile, then column); ``num_splits`` and ``block_size`` change only the float32 rounding of the log-sum-exp
            partials.
        num_warps: warps per program; default from :data:`LAUNCH`.
        race_tile: columns per tile of the two-level race (a power of two, at least 4); it defines the draw, so the
            reference must be given the same (:data:`~flashspec_hf.kernels.reference.RACE_TILE` for both by default).

    Returns:
        output_tokens: int64 ``[B, γ + 1]`` (accepted, then recovered/bonus, then -1); num_accepted: int64 ``[B]``.

    Raises:
        ValueError: on shape or vocabulary mismatches between the arguments, or launch parameters out of range.
    """
    if any(n is not None and n < 1 for n in (num_splits, sample_splits, num_warps)) or (
            block_size is not None and (block_size < _VEC or block_size & (block_size - 1))) or (
            race_tile < 4 or race_tile & (race_tile - 1)):
        raise ValueError(f"num_splits, sample_splits and num_warps must be >= 1, block_size a power of two >= {_VEC} "
                         f"and race_tile one >= 4, got {num_splits}, {sample_splits}, {num_warps}, {block_size}, "
                         f"{race_tile}")
    batch_size, positions, vocab_size = target_logits.shape
    gamma = positions - 1
    greedy = draft_logits is None
    if draft_tokens.shape != (batch_size, gamma):
        raise ValueError(f"draft_tokens must be [B, γ] = {[batch_size, gamma]}, got {list(draft_tokens.shape)}")
    if not greedy and (draft_logits.shape != (batch_size, gamma, vocab_size) or seed is None or seed.numel() != 1
                       or seed.dtype != torch.int64 or seed.device != target_logits.device):
        raise ValueError("sampling needs draft_logits [B, γ, V] and an int64 seed [1] on the logits' device")
    target_logits = _vocab_contiguous(target_logits)
    device = target_logits.device
    rows = batch_size * positions
    default_block, default_warps, programs_per_sm = LAUNCH["greedy" if greedy else "sampling"]
    block_size, num_warps = block_size or default_block, num_warps or default_warps
    num_splits, chunk = _split(
        num_splits or _default_splits(rows, vocab_size, block_size, programs_per_sm, device), vocab_size, block_size
    )
    meta = dict(NSPLIT=num_splits, BLOCK=block_size, num_warps=num_warps)
    draft_tokens = draft_tokens.contiguous()
    out = torch.empty(batch_size, positions, dtype=torch.int64, device=device)  # [B, γ+1]
    num_accepted = torch.empty(batch_size, dtype=torch.int64, device=device)  # [B]
    t_max = torch.empty(rows, num_splits, dtype=torch.float32, device=device)  # [B*(γ+1), NSPLIT]
    t_aux = torch.empty(rows, num_splits, dtype=torch.float32 if not greedy else torch.int32, device=device)
    _vocab_stats_kernel[(rows, num_splits)](
        target_logits, t_max, t_aux, positions, vocab_size, *target_logits.stride()[:2], chunk, VEC=_VEC,
        GREEDY=greedy, **meta,
    )
    gamma_block = triton.next_power_of_2(positions)
    split_block = triton.next_power_of_2(num_splits)
    if greedy:
        win_val, win_idx = t_max, t_aux  # unused by the greedy finalize
    else:
        draft_logits = _vocab_contiguous(draft_logits)
        d_max = torch.empty(batch_size * gamma, num_splits, dtype=torch.float32, device=device)  # [B*γ, NSPLIT]
        d_sum = torch.empty_like(d_max)
        _vocab_stats_kernel[(batch_size * gamma, num_splits)](
            draft_logits, d_max, d_sum, gamma, vocab_size, *draft_logits.stride()[:2], chunk, VEC=_VEC, GREEDY=False,
            **meta,
        )
        # per chunk, the race winner over the residual and over p (fallback when the residual is empty)
        race_splits, race_chunk = _split(
            sample_splits or _default_splits(batch_size, vocab_size, race_tile, programs_per_sm, device),
            vocab_size, race_tile,
        )
        win_val = torch.empty(2, batch_size, race_splits, dtype=torch.float32, device=device)  # [2, B, RSPLIT]
        win_idx = torch.empty(2, batch_size, race_splits, dtype=torch.int32, device=device)  # [2, B, RSPLIT]
        lse = torch.empty(batch_size, 2, dtype=torch.float32, device=device)  # [B, 2]
        _sample_kernel[(batch_size, race_splits)](
            target_logits, draft_logits, draft_tokens, seed,
            t_max, t_aux, d_max, d_sum, win_val, win_idx, num_accepted, lse,
            gamma, batch_size, vocab_size, *target_logits.stride()[:2], *draft_logits.stride()[:2], race_chunk,
            NSPLIT=num_splits, BLOCK=race_tile, GAMMA_BLOCK=gamma_block, SPLIT_BLOCK=split_block, RSPLIT=race_splits,
            NT=triton.next_power_of_2(race_chunk // race_tile), num_warps=num_warps,
        )
    final_splits = num_splits if greedy else race_splits  # the chunks whose winners finalize reduces
    sampled = (target_logits, target_logits, t_max, t_max) if greedy else (target_logits, draft_logits, seed, lse)
    d_strides = target_logits.stride()[:2] if greedy else draft_logits.stride()[:2]
    _finalize_kernel[(batch_size,)](
        draft_tokens, t_max, t_aux, win_val, win_idx, out, num_accepted, *sampled, gamma, batch_size, vocab_size,
        *target_logits.stride()[:2], *d_strides,
        NSPLIT=final_splits, GAMMA_BLOCK=gamma_block, SPLIT_BLOCK=triton.next_power_of_2(final_splits),
        TILE=race_tile, GREEDY=greedy, PLACEHOLDER=PLACEHOLDER_TOKEN_ID,
    )
    return out, num_accepted


def _vocab_contiguous(logits: torch.Tensor) -> torch.Tensor:
    """The kernels index ``b * stride_b + i * stride_p + v``: the vocabulary axis must have stride 1."""
    return logits if logits.stride(-1) == 1 else logits.contiguous()


@functools.cache
def _sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 1


def _default_splits(rows: int, vocab_size: int, block_size: int, programs_per_sm: int, device: torch.device) -> int:
    """About ``programs_per_sm`` programs per SM over ``rows`` rows, never a chunk smaller than one tile."""
    wanted = triton.cdiv(programs_per_sm * _sm_count(device), rows)
    return max(1, min(wanted, triton.cdiv(vocab_size, block_size)))


def _split(num_splits: int, vocab_size: int, block_size: int) -> tuple[int, int]:
    """(splits, chunk columns): chunks are whole tiles and every chunk holds at least one valid column."""
    chunk = triton.cdiv(triton.cdiv(vocab_size, num_splits), block_size) * block_size
    return triton.cdiv(vocab_size, chunk), chunk


@triton.jit
def _vocab_stats_kernel(
    logits_ptr,  # [B, P, V], vocabulary contiguous
    max_ptr,  # [B*P, NSPLIT] float32
    aux_ptr,  # [B*P, NSPLIT] float32 sum of exp(x - max) (sampling) | int32 argmax (greedy)
    P,
    V,
    stride_b,
    stride_p,
    chunk,
    NSPLIT: tl.constexpr,
    BLOCK: tl.constexpr,
    VEC: tl.constexpr,  # columns per tile row: the sampling pass rescales its running sum once per VEC columns
    GREEDY: tl.constexpr,
):
    tl.static_assert(BLOCK % VEC == 0)
    row = tl.program_id(0)
    split = tl.program_id(1)
    base = logits_ptr + (row // P).to(tl.int64) * stride_b + (row % P) * stride_p
    start = split * chunk
    lanes = tl.arange(0, BLOCK // VEC)[:, None] * VEC + tl.arange(0, VEC)[None, :]  # [BLOCK/VEC, VEC] column in a tile
    best = tl.full([BLOCK // VEC, VEC], float("-inf"), tl.float32)  # greedy: running max per column slot
    best_idx = start + lanes  # greedy: its column
    row_max = tl.full([BLOCK // VEC], float("-inf"), tl.float32)  # sampling: running max per tile row
    row_sum = tl.zeros([BLOCK // VEC], tl.float32)  # sampling: running sum of exp(x - row_max)
    for off in range(start, start + chunk, BLOCK):
        cols = off + lanes
        x = tl.load(base + cols, mask=cols < V, other=float("-inf")).to(tl.float32)  # [BLOCK/VEC, VEC]
        if GREEDY:
            better = x > best  # strict: the earliest column wins ties, as torch.argmax
            best_idx = tl.where(better, cols, best_idx)
            best = tl.where(better, x, best)
        else:  # one exp per column plus one per VEC columns (online softmax, Milakov & Gimelshein 2018)
            new_max = tl.maximum(row_max, tl.max(x, axis=1))
            shift = tl.where(new_max > float("-inf"), new_max, 0.0)  # an all -inf row stays at sum 0, never NaN
            row_sum = row_sum * tl.exp(row_max - shift) + tl.sum(tl.exp(x - shift[:, None]), axis=1)
            row_max = new_max
    if GREEDY:
        m = tl.max(tl.max(best, axis=1), axis=0)
        tl.store(max_ptr + row * NSPLIT + split, m)
        first = tl.min(tl.min(tl.where(best == m, best_idx, _BIG_INDEX), axis=1), axis=0)
        tl.store(aux_ptr + row * NSPLIT + split, first)
    else:
        m = tl.max(row_max, axis=0)
        tl.store(max_ptr + row * NSPLIT + split, m)
        scale = tl.where(row_max > float("-inf"), tl.exp(row_max - m), 0.0)
        tl.store(aux_ptr + row * NSPLIT + split, tl.sum(row_sum * scale, axis=0))


@triton.jit
def _combine_lse(max_ptr, sum_ptr, rows, row_mask, splits, NSPLIT: tl.constexpr):
    """log-sum-exp per row from the partials of its chunks: rows ``[G]``, splits ``[S]`` -> ``[G]``."""
    mask = row_mask[:, None] & (splits[None, :] < NSPLIT)
    offs = rows[:, None] * NSPLIT + splits[None, :]
    pm = tl.load(max_ptr + offs, mask=mask, other=float("-inf"))  # [G, S]
    ps = tl.load(sum_ptr + offs, mask=mask, other=0.0)  # [G, S]
    m = tl.max(pm, axis=1)  # [G]
    m_safe = tl.where(m > float("-inf"), m, 0.0)
    s = tl.sum(tl.where(pm > float("-inf"), ps * tl.exp(pm - m_safe[:, None]), 0.0), axis=1)
    return m_safe + tl.log(s)


@triton.jit
def _sample_kernel(
    target_ptr,  # [B, γ+1, V]
    draft_ptr,  # [B, γ, V]
    draft_tokens_ptr,  # [B, γ] int64
    seed_ptr,  # [1] int64 Philox key
    t_max_ptr,  # [B*(γ+1), NSPLIT]
    t_sum_ptr,  # [B*(γ+1), NSPLIT]
    d_max_ptr,  # [B*γ, NSPLIT]
    d_sum_ptr,  # [B*γ, NSPLIT]
    win_val_ptr,  # [2, B, RSPLIT] float32 best tile race value per chunk (0: none): over the residual, over p
    win_idx_ptr,  # [2, B, RSPLIT] int32 its tile
    num_accepted_ptr,  # [B] int64
    lse_ptr,  # [B, 2] float32: log-sum-exp of the target's and the draft's logits at position k
    gamma,
    B,
    V,
    t_stride_b,
    t_stride_p,
    d_stride_b,
    d_stride_p,
    chunk,
    NSPLIT: tl.constexpr,  # chunks of the statistics pass
    BLOCK: tl.constexpr,  # the race tile
    GAMMA_BLOCK: tl.constexpr,
    SPLIT_BLOCK: tl.constexpr,
    RSPLIT: tl.constexpr,  # chunks of this race (program_id(1) < RSPLIT)
    NT: tl.constexpr,  # tiles per chunk, rounded up to a power of two
):
    b = tl.program_id(0)
    split = tl.program_id(1)
    g = tl.arange(0, GAMMA_BLOCK)  # position
    s = tl.arange(0, SPLIT_BLOCK)
    is_draft = g < gamma
    t_lse = _combine_lse(t_max_ptr, t_sum_ptr, b * (gamma + 1) + g, g <= gamma, s, NSPLIT)  # [G]
    d_lse = _combine_lse(d_max_ptr, d_sum_ptr, b * gamma + g, is_draft, s, NSPLIT)  # [G]
    x = tl.load(draft_tokens_ptr + b * gamma + g, mask=is_draft, other=0)  # [G]
    t_base = target_ptr + b.to(tl.int64) * t_stride_b
    d_base = draft_ptr + b.to(tl.int64) * d_stride_b
    log_p = tl.load(t_base + g * t_stride_p + x, mask=is_draft, other=0.0).to(tl.float32) - t_lse
    log_q = tl.load(d_base + g * d_stride_p + x, mask=is_draft, other=0.0).to(tl.float32) - d_lse
    seed = tl.load(seed_ptr)
    log_u = tl.log(uniform_tl(randint_tl(seed, stream_offset_tl(b, UNIFORM_STREAM) + g)))  # [G], u in (0, 1]
    rejected = is_draft & (log_u > log_p - log_q)
    k = tl.min(tl.where(rejected, g, gamma), axis=0)  # first rejection, γ if all accepted
    t_lse_k = tl.sum(tl.where(g == k, t_lse, 0.0), axis=0)
    d_lse_k = tl.sum(tl.where(g == k, d_lse, 0.0), axis=0)
    is_bonus = k == gamma
    draft_vocab = tl.where(is_bonus, 0, V)  # no draft row at the bonus position: q = 0
    start = split * chunk
    limit = tl.minimum(start + chunk, V)  # columns of this chunk: [start, limit)
    t = tl.arange(0, NT)  # tile of the chunk
    mass = tl.zeros([NT], tl.float32)  # per tile: sum of the residual (of p at the bonus position)
    mass_p = tl.zeros([NT], tl.float32)  # per tile: sum of p (the race over p is used if the residual is empty)
    for i in range(0, NT):  # the chunk's tiles; those past it (NT is a power of two) load nothing
        cols = start + i * BLOCK + tl.arange(0, BLOCK)
        p = tl.exp(tl.load(t_base + k * t_stride_p + cols, mask=cols < limit, other=float("-inf")).to(tl.float32)
                   - t_lse_k)
        lq = tl.load(d_base + k * d_stride_p + cols, mask=cols < tl.minimum(limit, draft_vocab), other=float("-inf"))
        r = tl.where(is_bonus, p, tl.maximum(p - tl.exp(lq.to(tl.float32) - d_lse_k), 0.0))
        mass = tl.where(t == i, tl.sum(r, axis=0), mass)
        mass_p = tl.where(t == i, tl.sum(p, axis=0), mass_p)
    tiles = start // BLOCK + t  # [NT] vocabulary tile index
    weight = race_weight_tl(randint_tl(seed, stream_offset_tl(b, RACE_STREAM) + TILE_COUNTER + tiles))  # [NT]
    slot = b * RSPLIT + split
    race = mass * weight  # 0 for an empty tile
    best = tl.max(race, axis=0)
    tl.store(win_val_ptr + slot, best)
    tl.store(win_idx_ptr + slot, tl.min(tl.where(race == best, tiles, _BIG_INDEX), axis=0))  # earliest on ties
    race_p = mass_p * weight
    best_p = tl.max(race_p, axis=0)
    tl.store(win_val_ptr + B * RSPLIT + slot, best_p)
    tl.store(win_idx_ptr + B * RSPLIT + slot, tl.min(tl.where(race_p == best_p, tiles, _BIG_INDEX), axis=0))
    if split == 0:
        tl.store(num_accepted_ptr + b, k.to(tl.int64))
        tl.store(lse_ptr + 2 * b, t_lse_k)
        tl.store(lse_ptr + 2 * b + 1, d_lse_k)


@triton.jit
def _finalize_kernel(
    draft_tokens_ptr,  # [B, γ] int64
    t_max_ptr,  # [B*(γ+1), NSPLIT] float32 (greedy: per-chunk max)
    t_arg_ptr,  # [B*(γ+1), NSPLIT] int32 (greedy: per-chunk argmax)
    win_val_ptr,  # [2, B, NSPLIT] float32 (sampling: NSPLIT is the race's split count)
    win_idx_ptr,  # [2, B, NSPLIT] int32 (sampling: tiles)
    out_ptr,  # [B, γ+1] int64
    num_accepted_ptr,  # [B] int64: written (greedy) or read (sampling)
    target_ptr,  # [B, γ+1, V] (sampling)
    draft_ptr,  # [B, γ, V] (sampling)
    seed_ptr,  # [1] int64 (sampling)
    lse_ptr,  # [B, 2] float32 (sampling)
    gamma,
    B,
    V,
    t_stride_b,
    t_stride_p,
    d_stride_b,
    d_stride_p,
    NSPLIT: tl.constexpr,
    GAMMA_BLOCK: tl.constexpr,
    SPLIT_BLOCK: tl.constexpr,
    TILE: tl.constexpr,  # the race tile (sampling)
    GREEDY: tl.constexpr,
    PLACEHOLDER: tl.constexpr,
):
    b = tl.program_id(0)
    g = tl.arange(0, GAMMA_BLOCK)
    s = tl.arange(0, SPLIT_BLOCK)
    is_draft = g < gamma
    x = tl.load(draft_tokens_ptr + b * gamma + g, mask=is_draft, other=PLACEHOLDER)  # [G]
    if GREEDY:
        mask = (g[:, None] <= gamma) & (s[None, :] < NSPLIT)
        offs = (b * (gamma + 1) + g[:, None]) * NSPLIT + s[None, :]
        pm = tl.load(t_max_ptr + offs, mask=mask, other=float("-inf"))  # [G, S]
        pi = tl.load(t_arg_ptr + offs, mask=mask, other=_BIG_INDEX)  # [G, S]
        m = tl.max(pm, axis=1)
        argmax = tl.min(tl.where(pm == m[:, None], pi, _BIG_INDEX), axis=1).to(tl.int64)  # [G]
        k = tl.min(tl.where(is_draft & (x != argmax), g, gamma), axis=0)
        extra = tl.sum(tl.where(g == k, argmax, 0), axis=0)
        tl.store(num_accepted_ptr + b, k.to(tl.int64))
    else:  # the tile that won the race over the chunks, then the race over its columns
        pv = tl.load(win_val_ptr + b * NSPLIT + s, mask=s < NSPLIT, other=0.0)
        pi = tl.load(win_idx_ptr + b * NSPLIT + s, mask=s < NSPLIT, other=_BIG_INDEX)
        pv_p = tl.load(win_val_ptr + (B + b) * NSPLIT + s, mask=s < NSPLIT, other=0.0)
        pi_p = tl.load(win_idx_ptr + (B + b) * NSPLIT + s, mask=s < NSPLIT, other=_BIG_INDEX)
        residual_empty = tl.max(pv, axis=0) == 0.0
        pv = tl.where(residual_empty, pv_p, pv)
        pi = tl.where(residual_empty, pi_p, pi)
        tile = tl.min(tl.where(pv == tl.max(pv, axis=0), pi, _BIG_INDEX), axis=0)  # the earliest tile among ties
        tile = tl.minimum(tile, (V - 1) // TILE)  # NaN logits: every race value NaN, no tile won; stay in the row
        k = tl.load(num_accepted_ptr + b).to(tl.int32)
        cols = tile * TILE + tl.arange(0, TILE)  # [TILE]
        t_row = target_ptr + b.to(tl.int64) * t_stride_b + k * t_stride_p
        p = tl.exp(tl.load(t_row + cols, mask=cols < V, other=float("-inf")).to(tl.float32) - tl.load(lse_ptr + 2 * b))
        is_bonus = k == gamma
        d_row = draft_ptr + b.to(tl.int64) * d_stride_b + k * d_stride_p
        lq = tl.load(d_row + cols, mask=cols < tl.where(is_bonus, 0, V), other=float("-inf")).to(tl.float32)
        r = tl.where(is_bonus, p, tl.maximum(p - tl.exp(lq - tl.load(lse_ptr + 2 * b + 1)), 0.0))
        counters = stream_offset_tl(b, RACE_STREAM) + tile * (TILE // 4) + tl.arange(0, TILE // 4)  # [TILE/4]
        weight = tl.reshape(race_weight_tl(randint4_tl(tl.load(seed_ptr), counters)), [TILE])  # column c: word c % 4
        values = tl.where(residual_empty, p, r)  # [TILE], 0 outside the vocabulary
        race = values * weight
        race = tl.where(tl.max(race, axis=0) > 0.0, race, values)  # every product underflowed: the largest entry
        extra = tl.min(tl.where(race == tl.max(race, axis=0), cols, _BIG_INDEX), axis=0)
        extra = tl.minimum(extra, V - 1).to(tl.int64)  # NaN logits: no column won; stay in the vocabulary
    row = tl.where(g < k, x, tl.where(g == k, extra, PLACEHOLDER))
    tl.store(out_ptr + b * (gamma + 1) + g, row, mask=g <= gamma)
