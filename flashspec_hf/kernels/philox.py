"""Randomness of the Triton sampling verification: counter-based Philox drawn inside the kernel, and its PyTorch twin.

Generator: Philox 4x32-10 (Salmon et al. 2011, "Parallel random numbers: as easy as 1, 2, 3") through ``tl.philox``:
key = the 64-bit seed, counter = ``(offset mod 2^32, offset >> 32, 0, 0)``; :func:`randint_tl` keeps the first output
word (what ``tl.randint`` does with int64 offsets from Triton 3.4 on; written out, since older Triton runs 64-bit
Philox there), :func:`randint4_tl` all four. The seed is an int64 ``[1]`` tensor drawn by torch's generator on the
logits' device (:func:`draw_seed`), so ``torch.manual_seed`` makes runs repeatable, nothing is read back to the host
and the draw is CUDA-graph capturable.

Counter layout (:func:`stream_offset_tl` + index): row ``b`` draws the race weight of vocabulary index ``v`` from
word ``v mod 4`` of counter ``(v div 4, 2b, 0, 0)`` (one Philox evaluation per four columns), the weight of race tile
``t`` from the first word at ``(TILE_COUNTER + t, 2b, 0, 0)`` (past every vocabulary counter for ``V < 2^32``) and
the acceptance uniform of draft position ``i`` from the first word at ``(i, 2b + 1, 0, 0)``: no two draws of one
step share a word (``B < 2^31``). The weights serve the two-level exponential race
(:mod:`flashspec_hf.kernels.reference`): with ``E_v`` i.i.d. ``Exp(1)``, ``argmax_v r_v / E_v`` is a sample of
``r / sum(r)`` (the Gumbel-max trick without its logarithms: ``-log E_v`` is Gumbel noise); one row of ``V``
suffices per step, as each row samples one recovered or bonus token, and the kernel reads the weights of one tile.

Each 32-bit word ``x`` becomes ``U = (x + 1/2) / 2^32``, rounded to float32 (in ``(0, 1]``, never 0, so its log is
finite), and the race weight is ``1 / E`` with ``E = -log U ~ Exp(1)``, computed from the word's complement
``1 - U = (~x + 1/2) / 2^32`` when ``U > 1/2``: float32 cannot hold ``U`` near 1, where the race's winners over a
large vocabulary (small ``E``) live. ``E`` lies in ``[1.2e-10, 22.9]``, so the weight is positive and finite.

The ``*_tl`` functions run inside the kernel; their ``*_torch`` twins and :func:`philox_noise` repeat the same integer
and float32 arithmetic on int64 tensors holding uint32 values: the oracle the kernel is tested against (equal words
and uniforms; weights equal up to a few ulps, as the implementations of ``log`` differ, and the tiles' masses are
float32 sums taken in another order: kernel and reference then agree token for token unless two race values of a
row lie within that rounding, about once in 10^7 rows).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .reference import RACE_TILE

RACE_STREAM, UNIFORM_STREAM = tl.constexpr(0), tl.constexpr(1)  # counter high word 2b + stream
TILE_COUNTER = tl.constexpr(2**30)  # counter index of race tile 0 in the race stream (vocabulary counters: V / 4)
_TWO_POW_MINUS_32 = tl.constexpr(2.3283064365386963e-10)  # 2^-32, exact in float32
_M32 = 0xFFFFFFFF
_ROUND_A, _ROUND_B = 0xD2511F53, 0xCD9E8D57  # Philox 4x32 multipliers
_KEY_A, _KEY_B = 0x9E3779B9, 0xBB67AE85  # Weyl key increments


def draw_seed(device: torch.device) -> torch.Tensor:
    """int64 ``[1]`` Philox key from torch's generator on ``device``: a device op, no host sync."""
    return torch.randint(2**63 - 1, (1,), dtype=torch.int64, device=device)


@triton.jit
def randint_tl(seed, offsets):
    """uint32 first word of Philox 4x32-10 keyed by ``seed`` at counter ``(offsets mod 2^32, offsets >> 32, 0, 0)``
    for int64 ``offsets`` (any shape)."""
    word, _, _, _ = tl.philox(seed, *_counter_tl(offsets))
    return word


@triton.jit
def randint4_tl(seed, offsets):
    """All four uint32 words of Philox 4x32-10 at the counters of :func:`randint_tl`: int64 ``offsets [N]`` ->
    ``[N, 4]``, word ``j`` of counter ``n`` at ``[n, j]`` (a quarter of the rounds per word)."""
    w0, w1, w2, w3 = tl.philox(seed, *_counter_tl(offsets))
    return tl.reshape(tl.join(tl.join(w0, w2), tl.join(w1, w3)), [w0.shape[0], 4])  # [N, 2, 2] -> [N, 4]


@triton.jit
def _counter_tl(offsets):
    lo = (offsets & 0xFFFFFFFF).to(tl.uint32)
    hi = ((offsets >> 32) & 0xFFFFFFFF).to(tl.uint32)
    zero = tl.zeros_like(lo)
    return lo, hi, zero, zero


@triton.jit
def stream_offset_tl(b, STREAM: tl.constexpr):
    """int64 offset of index 0 of row ``b``'s stream: counter high word ``2b + STREAM``."""
    return (2 * b.to(tl.int64) + STREAM) << 32


@triton.jit
def uniform_tl(bits):
    """uint32 Philox word -> float32 ``(bits + 1/2) / 2^32`` in ``(0, 1]``."""
    return (bits.to(tl.float32) + 0.5) * _TWO_POW_MINUS_32


@triton.jit
def race_weight_tl(bits):
    """uint32 Philox word -> float32 race weight ``1 / E``, ``E = -log U ~ Exp(1)``, accurate in both tails."""
    u = uniform_tl(bits)
    c = uniform_tl(~bits)  # 1 - U
    y = 1.0 - c
    d = y - 1.0  # exact
    low = u <= 0.5
    log_v = tl.log(tl.where(low, u, y))  # one log serves both tails
    # E = -log_v below 1/2; above, -log(1 - c) = log(y) * c / (y - 1) (Kahan's log1p), = c where y rounds to 1
    num = tl.where(low, -1.0, tl.where(d == 0.0, 1.0, d))
    den = tl.where(low, log_v, tl.where(d == 0.0, c, log_v * c))
    return tl.div_rn(num, den)


def philox_noise(seed: torch.Tensor, batch_size: int, gamma: int, vocab_size: int,
                 race_tile: int = RACE_TILE) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """What the kernel draws for ``seed``, in PyTorch: ``uniforms``, ``weights`` and ``tile_weights`` for
    ``verify_sampling_reference``.

    Args:
        seed: int64 ``[1]`` (any device), as from :func:`draw_seed`.
        batch_size, gamma, vocab_size: ``B``, ``γ`` and ``V``; race_tile: columns per race tile (the kernel's).

    Returns:
        uniforms: float32 ``[B, γ]`` in ``(0, 1]``; weights: float32 ``[B, V]`` and tile_weights: float32
        ``[B, ceil(V / race_tile)]``, positive and finite.
    """
    uniform_bits, weight_bits, tile_bits = philox_bits(seed, batch_size, gamma, vocab_size, race_tile)
    return uniform_torch(uniform_bits), race_weight_torch(weight_bits), race_weight_torch(tile_bits)


def philox_bits(seed: torch.Tensor, batch_size: int, gamma: int, vocab_size: int,
                race_tile: int = RACE_TILE) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The Philox words behind :func:`philox_noise`: uint32 values in int64 tensors ``[B, γ]``, ``[B, V]`` and
    ``[B, ceil(V / race_tile)]``."""
    rows = torch.arange(batch_size, device=seed.device).unsqueeze(1)  # [B, 1]
    positions = torch.arange(gamma, device=seed.device)  # [γ]
    counters = torch.arange((vocab_size + 3) // 4, device=seed.device)  # [ceil(V / 4)]: four vocabulary words each
    tiles = torch.arange(-(-vocab_size // race_tile), device=seed.device) + int(TILE_COUNTER)  # [ceil(V / tile)]
    race = stream_offset_torch(rows, RACE_STREAM)  # [B, 1]
    uniform_bits = randint_torch(seed, stream_offset_torch(rows, UNIFORM_STREAM) + positions)  # [B, γ]
    words = randint4_torch(seed, race + counters)  # [B, ceil(V / 4), 4]
    # [B, V]: index v is word v % 4 of counter v // 4; [B, tiles]: tile t is the first word of its counter
    return uniform_bits, words.flatten(1)[:, :vocab_size], randint_torch(seed, race + tiles)


def randint_torch(seed: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """:func:`randint_tl` in PyTorch: uint32 words held in int64, shape of ``offsets``."""
    return randint4_torch(seed, offsets)[..., 0]


def randint4_torch(seed: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """:func:`randint4_tl` in PyTorch: uint32 words held in int64, ``offsets.shape + (4,)``."""
    c0, c1 = offsets & _M32, (offsets >> 32) & _M32
    c2 = c3 = torch.zeros_like(c0)
    k0, k1 = seed & _M32, (seed >> 32) & _M32
    for _ in range(10):
        hi_b, lo_b = _mulhilo(_ROUND_B, c2)
        hi_a, lo_a = _mulhilo(_ROUND_A, c0)
        c0, c1, c2, c3 = hi_b ^ c1 ^ k0, lo_b, hi_a ^ c3 ^ k1, lo_a
        k0, k1 = (k0 + _KEY_A) & _M32, (k1 + _KEY_B) & _M32
    return torch.stack([c0, c1, c2, c3], dim=-1)


def _mulhilo(a: int, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """High and low 32-bit words of ``a * c`` (uint32 operands), in 16-bit halves so that int64 never overflows."""
    lo_part, hi_part = a * (c & 0xFFFF), a * (c >> 16)  # each < 2^48
    return (hi_part + (lo_part >> 16)) >> 16, (((hi_part & 0xFFFF) << 16) + lo_part) & _M32


def stream_offset_torch(b: torch.Tensor, stream: tl.constexpr) -> torch.Tensor:
    """:func:`stream_offset_tl` on int64 tensors."""
    return (2 * b + int(stream)) << 32


def uniform_torch(bits: torch.Tensor) -> torch.Tensor:
    """:func:`uniform_tl` on uint32 values held in int64."""
    return (bits.to(torch.float32) + 0.5) * _TWO_POW_MINUS_32.value


def race_weight_torch(bits: torch.Tensor) -> torch.Tensor:
    """:func:`race_weight_tl` on uint32 values held in int64, the same float32 operations in the same order."""
    u, c = uniform_torch(bits), uniform_torch(bits ^ _M32)
    y = 1.0 - c
    d = y - 1.0
    low = u <= 0.5
    log_v = torch.log(torch.where(low, u, y))
    num = torch.where(low, -1.0, torch.where(d == 0.0, 1.0, d))
    den = torch.where(low, log_v, torch.where(d == 0.0, c, log_v * c))
    return num / den
