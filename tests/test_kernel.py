"""The Triton kernel equals the PyTorch reference given the same random numbers (the kernel's in-kernel Philox
stream, reproduced in PyTorch); the reference is exact."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

from flashspec_hf.kernels.philox import philox_noise
from flashspec_hf.kernels.reference import (
    PLACEHOLDER_TOKEN_ID,
    draw_noise,
    verify_greedy_reference,
    verify_sampling_reference,
)
from flashspec_hf.kernels.rejection_sampler import verify_triton

from .conftest import two_token_law_p_value

DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def _case(batch, gamma, vocab, dtype, seed, agreement):
    """Random target/draft logits; ``agreement`` in [0, 1] pulls the draft towards the target."""
    g = torch.Generator().manual_seed(seed)
    target = torch.randn(batch, gamma + 1, vocab, generator=g) * 3
    noise = torch.randn(batch, gamma, vocab, generator=g) * 3
    draft = agreement * target[:, :-1] + (1 - agreement) * noise
    return target.to(dtype), draft.to(dtype), g


SHAPES = dict(  # hypothesis strategies shared by the kernel tests: odd vocabularies, γ 1..16, vocabulary splits
    batch=st.integers(1, 4),
    gamma=st.integers(1, 16),
    vocab=st.integers(2, 300),
    dtype=st.sampled_from(DTYPES),
    seed=st.integers(0, 2**16),
    splits=st.integers(1, 4),
)


@settings(max_examples=25, deadline=None)
@given(**SHAPES, agreement=st.sampled_from([0.0, 0.9, 1.0]), race_splits=st.integers(1, 4),
       race_tile=st.sampled_from([4, 16, 64, 1024]))
def test_sampling_kernel_matches_reference(batch, gamma, vocab, dtype, seed, agreement, splits, race_splits,
                                           race_tile):
    target, draft, g = _case(batch, gamma, vocab, dtype, seed, agreement)
    tokens = torch.multinomial(draft.float().softmax(-1).view(-1, vocab), 1, generator=g).view(batch, gamma)
    seed = torch.randint(2**63 - 1, (1,), generator=g)
    noise = philox_noise(seed, batch, gamma, vocab, race_tile)  # [B, γ], [B, V], [B, tiles]
    want = verify_sampling_reference(target, tokens, draft, *noise, race_tile=race_tile)
    got = verify_triton(target, tokens, draft, seed, block_size=32, num_splits=splits, sample_splits=race_splits,
                        race_tile=race_tile)
    assert torch.equal(got[1], want[1]), "accepted counts differ"
    assert torch.equal(got[0], want[0]), "output tokens differ"


@settings(max_examples=25, deadline=None)
@given(**SHAPES, accept_first=st.integers(0, 16))
def test_greedy_kernel_matches_reference(batch, gamma, vocab, dtype, seed, accept_first, splits):
    target, _, g = _case(batch, gamma, vocab, dtype, seed, 0.0)
    tokens = torch.randint(0, vocab, (batch, gamma), generator=g)
    n = min(accept_first, gamma)
    tokens[:, :n] = target[:, :n].float().argmax(-1)  # the first n drafts agree with the target
    want = verify_greedy_reference(target, tokens)
    got = verify_triton(target, tokens, block_size=32, num_splits=splits)
    assert torch.equal(got[1], want[1]) and torch.equal(got[0], want[0])
    assert (want[1] >= n).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_greedy_ties_pick_the_first_index_like_torch_argmax(dtype):
    target = torch.zeros(2, 3, 257, dtype=dtype)
    target[:, :, [5, 37, 77, 200]] = 1.0  # ties in one tile slot (5, 37: tiles of 32) and across vocabulary chunks
    tokens = torch.tensor([[5, 5], [77, 5]])
    out, n = verify_triton(target, tokens, block_size=32, num_splits=4)
    assert n.tolist() == [2, 0]
    assert out.tolist() == [[5, 5, 5], [5, PLACEHOLDER_TOKEN_ID, PLACEHOLDER_TOKEN_ID]]


@pytest.mark.parametrize("verify", ["reference", "triton"])
def test_sampling_edge_cases(verify):
    """All accepted (draft = target), all rejected (draft mass where p = 0), first-token rejection."""
    vocab, gamma = 50, 3
    target = torch.full((3, gamma + 1, vocab), float("-inf"))
    target[..., :10] = torch.randn(3, gamma + 1, 10)
    draft = target[:, :-1].clone()
    tokens = torch.full((3, gamma), 3)
    draft[1] = float("-inf")
    draft[1, :, 40] = 0.0  # row 1 proposes token 40, which the target never emits
    tokens[1] = 40
    draft[2, 0] = float("-inf")
    draft[2, 0, 45] = 0.0  # row 2: first draft impossible for the target, the rest identical
    tokens[2, 0] = 45
    seed = torch.tensor([7])
    if verify == "reference":
        out, n = verify_sampling_reference(target, tokens, draft, *draw_noise(3, gamma, vocab, torch.device("cpu")))
    else:
        out, n = verify_triton(target, tokens, draft, seed, block_size=16, num_splits=2)
    assert n.tolist() == [gamma, 0, 0]
    assert out[0, :gamma].tolist() == [3] * gamma and 0 <= out[0, gamma] < 10  # bonus from p
    assert 0 <= out[1, 0] < 10 and 0 <= out[2, 0] < 10  # recovered tokens come from the target's support
    assert (out[1:, 1:] == PLACEHOLDER_TOKEN_ID).all()


@pytest.mark.parametrize("draw", ["torch", "philox"])
def test_noise_is_never_degenerate(draw):
    if draw == "torch":
        uniforms, weights, tile_weights = draw_noise(64, 16, 4096, torch.device("cpu"))
    else:
        uniforms, weights, tile_weights = philox_noise(torch.tensor([3]), 64, 16, 4096)
        assert (weights > 0).all() and (tile_weights > 0).all()
    assert (uniforms > 0).all() and (uniforms <= 1).all() and tile_weights.shape == (64, 4)
    assert torch.isfinite(weights).all() and (weights >= 0).all()
    assert torch.isfinite(tile_weights).all() and (tile_weights >= 0).all()


def _reference_step(sampler):
    """``sampler`` as a two-token-law step: it is given CPU noise over three race tiles of two columns."""

    def step(target, tokens, draft):
        noise = draw_noise(tokens.shape[0], tokens.shape[1], target.shape[-1], torch.device("cpu"), race_tile=2)
        return sampler(target, tokens, draft, *noise, race_tile=2)[0]

    return step


def _broken_sampler(target, tokens, draft, uniforms, weights, tile_weights, race_tile):
    """Accepts every draft: outputs follow the draft, not the target (the gate must catch this)."""
    out = torch.cat([tokens, tokens[:, :1]], dim=1)
    return out, torch.full((tokens.shape[0],), tokens.shape[1])


@pytest.mark.parametrize("sampler, passes", [(verify_sampling_reference, True), (_broken_sampler, False)])
def test_reference_joint_distribution_chi_square(sampler, passes):
    """Joint law of two output tokens = p1(a) p2(b) (:func:`~tests.conftest.two_token_law_p_value`)."""
    torch.manual_seed(1234)
    p_logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, float("-inf")])
    q_logits = torch.tensor([0.5, 0.0, 0.0, 1.0, 0.5, 0.5])  # mass where p has none; residual over tokens 0, 1, 2
    assert (two_token_law_p_value(_reference_step(sampler), p_logits, q_logits, 20_000) > 0.01) == passes


RACE_R = torch.tensor([0.45, 0.25, 0.15, 0.1, 0.05, 0.0])  # unnormalised r; the last entry can never win


@pytest.mark.parametrize("noise, inverted", [("torch", False), ("philox", False), ("philox", True)])
def test_the_race_samples_r_normalised(noise, inverted):
    """The two-level race over 20,000 rows of race weights (the CPU path's and the kernel's Philox twin's; tiles of
    two columns, so three tiles) follows ``r / sum(r)`` (chi-square, α = 0.01); a race with its weights inverted
    (``r / w``) must fail the same gate."""
    from flashspec_hf.kernels.reference import _two_level_race

    rows = 20_000
    if noise == "torch":
        torch.manual_seed(99)
        _, weights, tile_weights = draw_noise(rows, 1, len(RACE_R), torch.device("cpu"), race_tile=2)  # [N, 6], [N, 3]
    else:
        _, weights, tile_weights = philox_noise(torch.tensor([99]), rows, 1, len(RACE_R), race_tile=2)
    if inverted:
        weights, tile_weights = 1 / weights, 1 / tile_weights
    r = RACE_R.expand(rows, -1)
    counts = torch.bincount(_two_level_race(r, r, weights, tile_weights, 2), minlength=len(RACE_R))
    assert counts[-1] == 0
    p_value = chisquare(counts[:-1].double().numpy(), (RACE_R[:-1].double() * rows).numpy()).pvalue
    assert (p_value > 0.01) != inverted


# logits, and how far p(8) sits below q(8), for which each implementation's own float32 rounding leaves
# max(0, p - q) = 0 everywhere while still rejecting token 8 at u = 1 (found by search)
EMPTY_RESIDUAL = {
    "reference": ([0.1227012425661087, -0.5663174986839294, 0.3731146454811096], 6e-8),
    "triton": ([0.40334683656692505, 0.8380263447761536, -0.7192575931549072], 3e-8),
}


@pytest.mark.parametrize("verify, race_splits", [("reference", None), ("triton", 1), ("triton", 3)])
def test_empty_residual_falls_back_to_p(verify, race_splits):
    """Rejected with no residual mass (rounding, p = q): the recovered token must come from p's support (the race
    over p is read at its own offset in the race's partials, whatever their split count)."""
    vocab, gamma = 40, 1
    logits, below = EMPTY_RESIDUAL[verify]
    target = torch.full((1, gamma + 1, vocab), float("-inf"))
    target[..., 7:10] = torch.tensor(logits)
    draft = target[:, :1].clone()
    target[0, 0, 8] -= below
    tokens = torch.tensor([[8]])
    seed = torch.tensor([36_842_616])  # found by search: the kernel's uniform at row 0, position 0 is 1.0
    uniforms, weights, tile_weights = philox_noise(seed, 1, gamma, vocab, race_tile=8)  # 5 tiles, p's in 0 and 1
    assert uniforms.item() == 1.0
    if verify == "reference":
        out, n = verify_sampling_reference(target, tokens, draft, uniforms, weights, tile_weights, race_tile=8)
    else:
        out, n = verify_triton(target, tokens, draft, seed, block_size=16, num_splits=2, sample_splits=race_splits,
                               race_tile=8)
    assert n.item() == 0 and 7 <= out[0, 0].item() < 10


@pytest.mark.parametrize("launch", [dict(num_splits=0), dict(sample_splits=-1), dict(num_warps=0), dict(block_size=24),
                                    dict(block_size=4), dict(race_tile=2), dict(race_tile=24)])
def test_launch_parameters_out_of_range_are_refused(launch):
    target, draft, _ = _case(1, 2, 64, torch.float32, 0, 0.5)
    with pytest.raises(ValueError, match="power of two"):
        verify_triton(target, torch.zeros(1, 2, dtype=torch.int64), draft, torch.tensor([1]), **launch)


@settings(max_examples=200, deadline=None)
@given(splits=st.integers(1, 600), vocab=st.integers(1, 300_000), log_block=st.integers(4, 12))
def test_vocabulary_chunks_are_whole_tiles_and_never_empty(splits, vocab, log_block):
    from flashspec_hf.kernels.rejection_sampler import _split

    block = 2**log_block
    got, chunk = _split(splits, vocab, block)
    assert chunk % block == 0 and 1 <= got <= splits
    assert (got - 1) * chunk < vocab <= got * chunk  # every chunk holds a valid column; together they cover V


@pytest.mark.parametrize("race_splits", [1, 2])
def test_sampling_kernel_matches_reference_over_default_tiles(race_splits):
    """V = 2,500 in the default tiles of 1,024 columns: three tiles, a chunk padded to a power of two of tiles."""
    batch, gamma, vocab = 3, 2, 2500
    target, draft, g = _case(batch, gamma, vocab, torch.float32, 7, 0.5)
    tokens = torch.multinomial(draft.softmax(-1).view(-1, vocab), 1, generator=g).view(batch, gamma)
    for seed in range(4):
        seed = torch.tensor([1000 + seed])
        want = verify_sampling_reference(target, tokens, draft, *philox_noise(seed, batch, gamma, vocab))
        got = verify_triton(target, tokens, draft, seed, num_splits=2, sample_splits=race_splits)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_an_underflowing_tile_never_gives_a_token_without_mass():
    """Residual mass of ~1e-45 (p = q but for rounding), so every ``r · w`` underflows: the token is still one with
    mass (column 1 or 5 of two tiles of four), never the winning tile's first column (the kernel's finalize takes
    the same branch)."""
    from flashspec_hf.kernels.reference import _two_level_race

    r = torch.tensor([0.0, 2e-45, 0.0, 0.0, 0.0, 1e-45, 0.0, 0.0]).expand(2_000, -1)
    _, weights, tile_weights = philox_noise(torch.tensor([17]), 2_000, 1, 8, race_tile=4)
    assert set(_two_level_race(r, r, weights, tile_weights, 4).tolist()) <= {1, 5}


def test_reference_refuses_tile_weights_of_another_tile_size():
    target, draft, g = _case(1, 1, 6, torch.float32, 0, 0.5)
    tokens = torch.zeros(1, 1, dtype=torch.long)
    with pytest.raises(ValueError, match="race_tile"):
        verify_sampling_reference(target, tokens, draft, *draw_noise(1, 1, 6, torch.device("cpu")), race_tile=2)
