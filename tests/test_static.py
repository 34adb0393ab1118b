"""cache_implementation="static": the static-shape loop (no per-step sync, static caches, CUDA graphs on GPU) is
exact like the dynamic one: greedy equals stock token for token, sampling passes the chi-square gate."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from flashspec_hf import Hedge, PromptLookup, RoundRobin

from .conftest import tiny_llama
from .test_distribution import ALPHA, _exact, _p_value, _sample_counts, _warpers
from .test_distribution import models  # noqa: F401  (fixture)
from .test_greedy import PROMPTS, _flash, _stock

STATIC = dict(cache_implementation="static")


@pytest.mark.parametrize("gamma", [1, 3, [2, 5]])
def test_ragged_batch_equals_stock(target, assistants, gamma):
    rows = PROMPTS + [[9, 10, 11, 9, 10, 11, 9, 10]]
    got = _flash(target, [*assistants, PromptLookup()], rows, max_new_tokens=24, num_assistant_tokens=gamma,
                 selector=RoundRobin(), **STATIC)
    assert any(len(set(step)) > 1 for step in target.flashspec_stats.accepted), "acceptance was ragged"
    for row, out in zip(rows, got):
        want = _stock(target, row, max_new_tokens=24)
        assert torch.equal(out[: len(want)], want)


def test_eos_and_max_new_tokens_inside_blocks(target):
    row = PROMPTS[0]
    plain = _stock(target, row, max_new_tokens=30)
    eos = int(plain[5])
    want = _stock(target, row, max_new_tokens=30, eos_token_id=eos)
    got = _flash(target, [target], [row, PROMPTS[1]], max_new_tokens=30, num_assistant_tokens=4, eos_token_id=eos,
                 **STATIC)
    assert torch.equal(got[0, : len(want)], want) and (got[0, len(want) :] == 0).all()
    for n in (1, 7):
        got = _flash(target, [target], PROMPTS, max_new_tokens=n, num_assistant_tokens=5, **STATIC)
        assert got.shape[1] == n
        for row, out in zip(PROMPTS, got):
            assert torch.equal(out, _stock(target, row, max_new_tokens=n))


@settings(max_examples=10, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 9), min_size=1, max_size=4),
    gamma=st.integers(1, 6),
    vocab=st.sampled_from([33, 64, 97]),
    seed=st.integers(0, 1000),
)
def test_random_shapes_equal_stock(lengths, gamma, vocab, seed):
    target = tiny_llama(layers=2, vocab=vocab, seed=seed, peak=4.0)
    drafts = [tiny_llama(layers=1, vocab=vocab + 3, seed=seed + 1, peak=4.0), PromptLookup()]
    g = torch.Generator().manual_seed(seed)
    rows = [torch.randint(3, vocab, (n,), generator=g).tolist() for n in lengths]
    got = _flash(target, drafts, rows, max_new_tokens=10, num_assistant_tokens=gamma, **STATIC)
    for row, out in zip(rows, got):
        want = _stock(target, row, max_new_tokens=10)
        assert torch.equal(out[: len(want)], want)


@pytest.mark.parametrize("temperature, top_k, top_p, gamma", [(1.0, 0, 1.0, 2), (0.7, 5, 1.0, [1, 3])])
def test_joint_distribution_matches_target(models, monkeypatch, temperature, top_k, top_p, gamma):  # noqa: F811
    import flashspec_hf.integration

    target, drafts = models
    original = flashspec_hf.integration._static_cache
    monkeypatch.setattr(flashspec_hf.integration, "_static_cache", lambda kwargs: original(kwargs) or True)
    counts = _sample_counts(target, [*drafts, PromptLookup()], temperature, top_k, top_p, gamma)
    assert 0 < sum(map(sum, target.flashspec_stats.accepted))
    assert _p_value(counts, _exact(target, _warpers(temperature, top_k, top_p))) > ALPHA


@pytest.mark.parametrize(
    "kwargs, what",
    [
        (dict(repetition_penalty=1.3), "prefix-dependent logits processors"),
        (dict(selector=Hedge()), "full-information selector"),
        (dict(return_dict_in_generate=True, output_scores=True), "scores or logits"),
    ],
)
def test_unsupported_features_raise(target, assistants, kwargs, what):
    with pytest.raises(ValueError, match=what):
        _flash(target, assistants, [PROMPTS[0]], max_new_tokens=4, **STATIC, **kwargs)


def test_unknown_cache_implementation_raises(target, assistants):
    with pytest.raises(ValueError, match="cache_implementation='static'"):
        _flash(target, assistants, [PROMPTS[0]], max_new_tokens=4, cache_implementation="offloaded")


def test_the_gate_rejects_accept_all_in_the_static_loop(models, monkeypatch):  # noqa: F811
    """Negative control on this loop's own verification call."""
    import flashspec_hf.integration
    import flashspec_hf.static

    def accept_all(scores, drafts, draft_logits):
        return torch.cat([drafts, drafts[:, :1]], dim=1), torch.full((drafts.shape[0],), drafts.shape[1])

    original = flashspec_hf.integration._static_cache
    monkeypatch.setattr(flashspec_hf.integration, "_static_cache", lambda kwargs: original(kwargs) or True)
    monkeypatch.setattr(flashspec_hf.static, "verify", accept_all)
    target, drafts = models
    counts = _sample_counts(target, drafts, 1.0, 0, 1.0, 2)
    assert _p_value(counts, _exact(target, _warpers(1.0, 0, 1.0))) < ALPHA
