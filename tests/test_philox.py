"""The kernel's in-kernel randomness: the PyTorch twin reproduces Triton's Philox, the counter layout gives every draw
its own word, the conversions have the right laws, and verification repeats under ``torch.manual_seed``."""

import pytest
import torch
import triton
import triton.language as tl
from scipy import stats

from flashspec_hf.kernels.philox import (
    TILE_COUNTER,
    philox_bits,
    philox_noise,
    race_weight_tl,
    race_weight_torch,
    randint4_tl,
    randint4_torch,
    randint_tl,
    randint_torch,
    uniform_tl,
    uniform_torch,
)
from flashspec_hf.verification import verify

EDGE_WORDS = [0, 1, 2**24, 2**31 - 1, 2**31, 2**32 - 2**24, 2**32 - 129, 2**32 - 128, 2**32 - 1]


@triton.jit
def _draw_kernel(seed_ptr, offset_ptr, bits_ptr, uniform_ptr, weight_ptr, N, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = i < N
    bits = randint_tl(tl.load(seed_ptr), tl.load(offset_ptr + i, mask=mask, other=0))
    tl.store(bits_ptr + i, bits.to(tl.int64), mask=mask)
    tl.store(uniform_ptr + i, uniform_tl(bits), mask=mask)
    tl.store(weight_ptr + i, race_weight_tl(bits), mask=mask)


@triton.jit
def _convert_kernel(bits_ptr, uniform_ptr, weight_ptr, N, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    bits = tl.load(bits_ptr + i, mask=i < N, other=0).to(tl.uint32)
    tl.store(uniform_ptr + i, uniform_tl(bits), mask=i < N)
    tl.store(weight_ptr + i, race_weight_tl(bits), mask=i < N)


@pytest.mark.parametrize("seed", [0, 1, 2**32 + 5, 2**63 - 2])
def test_torch_twin_draws_what_triton_draws(seed):
    """Words equal the kernel's ``randint_tl``, uniforms bit for bit; race weights up to the last bits of ``log``
    (numpy vs torch)."""
    g = torch.Generator().manual_seed(seed % 2**32)
    offsets = torch.cat([torch.randint(2**63 - 1, (1000,), generator=g),  # any counter (lo, hi)
                         (torch.arange(24) << 32) + torch.arange(24),  # the layout's (index, 2b + stream)
                         torch.tensor([0, 2**32 - 1, 2**32, 2**63 - 1])])
    n = len(offsets)
    seed_t = torch.tensor([seed])
    bits, uniforms, weights = torch.empty(n, dtype=torch.int64), torch.empty(n), torch.empty(n)
    _draw_kernel[(triton.cdiv(n, 256),)](seed_t, offsets, bits, uniforms, weights, n, BLOCK=256)
    want = randint_torch(seed_t, offsets)
    assert torch.equal(bits, want)
    assert torch.equal(uniforms, uniform_torch(want))
    torch.testing.assert_close(weights, race_weight_torch(want), rtol=1e-6, atol=0)


@triton.jit
def _draw4_kernel(seed_ptr, offset_ptr, bits_ptr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    words = randint4_tl(tl.load(seed_ptr), tl.load(offset_ptr + i))  # [BLOCK, 4]
    tl.store(bits_ptr + 4 * i[:, None] + tl.arange(0, 4)[None, :], words.to(tl.int64))


@pytest.mark.parametrize("seed", [0, 2**63 - 2])
def test_torch_twin_draws_all_four_words_as_triton(seed):
    """The race's four words per counter, in order, equal the twin's (and the first is ``randint_tl``'s)."""
    offsets = torch.cat([torch.randint(2**63 - 1, (60,), generator=torch.Generator().manual_seed(seed % 97)),
                         torch.tensor([0, 2**32 - 1, 2**32, 2**63 - 1])])  # [64]
    seed_t = torch.tensor([seed])
    bits = torch.empty(64, 4, dtype=torch.int64)
    _draw4_kernel[(1,)](seed_t, offsets, bits, BLOCK=64)
    assert torch.equal(bits, randint4_torch(seed_t, offsets))
    assert torch.equal(bits[:, 0], randint_torch(seed_t, offsets))


def test_the_words_are_philox_4x32_10():
    """Random123's known-answer vector (key 0, counter 0 -> 6627e8d5 e169c58d bc57ac4c 9b00dbd8) and, where Triton's
    own ``tl.randint`` splits int64 offsets into two counter words (Triton >= 3.4), its words."""
    words = randint4_torch(torch.tensor([0]), torch.tensor([0]))[0].tolist()
    assert words == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    if tuple(int(x) for x in triton.__version__.split(".")[:2]) < (3, 4):
        return
    seed_t, offsets = torch.tensor([2**40 + 3]), (torch.arange(64) << 32) + torch.arange(64) * 977  # [1], [64]
    bits = torch.empty(64, dtype=torch.int64)
    _triton_randint_kernel[(1,)](seed_t, offsets, bits, BLOCK=64)
    assert torch.equal(bits, randint_torch(seed_t, offsets))


@triton.jit
def _triton_randint_kernel(seed_ptr, offset_ptr, bits_ptr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(bits_ptr + i, tl.randint(tl.load(seed_ptr), tl.load(offset_ptr + i)).to(tl.int64))


def test_conversions_at_the_edge_words():
    """Both implementations: U in (0, 1]; the race weight positive, finite and within float32 rounding of the
    float64 truth ``1 / -log U``, ``U = (x + 1/2) / 2^32``, in both tails (float32 ``U`` alone would give +inf at
    the top)."""
    words = torch.tensor(EDGE_WORDS)
    n = len(words)
    uniforms, weights = torch.empty(n), torch.empty(n)
    _convert_kernel[(1,)](words, uniforms, weights, n, BLOCK=16)
    exact_u = (words.double() + 0.5) / 2**32  # exact in float64
    truth = -1.0 / torch.log(exact_u)
    for u, w in [(uniforms, weights), (uniform_torch(words), race_weight_torch(words))]:
        assert (u > 0).all() and (u <= 1).all()
        torch.testing.assert_close(u.double(), exact_u, rtol=2**-24, atol=0)
        assert torch.isfinite(w).all() and (w > 0).all()
        torch.testing.assert_close(w.double(), truth, rtol=1e-6, atol=0)
    assert race_weight_torch(words).max() > 8e9  # the top word reaches the far tail (E = 1.2e-10)


def test_counter_layout_gives_every_draw_its_own_word():
    """No two (row, position) uniforms, (row, vocabulary index) or (row, tile) race weights of a step share a Philox
    word."""
    uniform_bits, weight_bits, tile_bits = philox_bits(torch.tensor([11]), 16, 16, 300, race_tile=8)
    assert tile_bits.shape == (16, 38)
    words = torch.cat([uniform_bits.flatten(), weight_bits.flatten(), tile_bits.flatten()])
    assert words.unique().numel() == words.numel()
    # for every V < 2^31: vocabulary counters (V / 4) stay below the tile counters, which stay below 2^32
    assert (2**31 + 3) // 4 <= int(TILE_COUNTER) and int(TILE_COUNTER) + 2**31 // 4 < 2**32


def test_noise_follows_its_laws():
    uniforms, weights, tile_weights = philox_noise(torch.tensor([5]), 64, 16, 4096, race_tile=16)
    assert stats.kstest(uniforms.flatten().double().numpy(), "uniform").pvalue > 0.01
    for w in (weights, tile_weights):
        assert stats.kstest((1.0 / w.double()).flatten().numpy(), "expon").pvalue > 0.01  # E ~ Exp(1)
    exponentials = 1.0 / weights.double()
    rows = exponentials[:, :1000]  # adjacent rows uncorrelated
    assert abs(torch.corrcoef(rows[:2])[0, 1]) < 0.15


def test_verification_repeats_under_manual_seed(monkeypatch):
    """Same ``torch.manual_seed``, same output; another seed, another output (64 rows that each sample one of 50
    equally likely tokens: equal outputs have probability 50^-64)."""
    monkeypatch.setenv("FLASHSPEC_VERIFIER", "triton")
    batch, gamma, vocab = 64, 2, 50
    target = torch.zeros(batch, gamma + 1, vocab)  # p uniform
    draft = torch.full((batch, gamma, vocab), float("-inf"))
    draft[..., 0] = 0.0  # q proposes token 0 with certainty: accepted with probability 1/50
    tokens = torch.zeros(batch, gamma, dtype=torch.int64)

    def run(seed):
        torch.manual_seed(seed)
        return verify(target, tokens, draft)

    first, again, other = run(0), run(0), run(1)
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])
    assert not torch.equal(first[0], other[0])
