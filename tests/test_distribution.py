"""Exactness of sampling through generate: chi-square goodness of fit of the joint law of the first three
generated tokens against the target's exact distribution (enumerated), 10,000 rows in one batched call."""

import itertools

import pytest
import torch
from scipy.stats import chisquare
from transformers.generation.logits_process import (
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

import flashspec_hf.decoding
from flashspec_hf import SELECTORS, FixedArm, PromptLookup, RoundRobin
from flashspec_hf.drafts import LookupOrDraft, draw

from .conftest import tiny_llama

VOCAB, NEW, SAMPLES, ALPHA = 8, 3, 10_000, 0.01
PROMPT = [3, 5, 1]


@pytest.fixture(scope="module")
def models():
    target = tiny_llama(layers=2, vocab=VOCAB, seed=11, peak=6.0, eos=None)
    drafts = [tiny_llama(layers=1, vocab=VOCAB, seed=s, peak=6.0, eos=None) for s in (12, 13)]
    return target, drafts


def _warpers(temperature, top_k, top_p):
    procs = [TemperatureLogitsWarper(temperature)]
    if top_k:
        procs.append(TopKLogitsWarper(top_k))
    if top_p < 1.0:
        procs.append(TopPLogitsWarper(top_p))
    return LogitsProcessorList(procs)


@torch.no_grad()
def _exact(target, warpers, prompt=PROMPT):
    """P(t1, t2, t3 | prompt) for all V^3 sequences, float64 [V^3], the processors applied as in stock sampling."""
    probs = torch.ones(1, dtype=torch.float64)
    for depth in range(NEW):
        prefixes = torch.tensor(list(itertools.product(range(VOCAB), repeat=depth)), dtype=torch.long)
        prefixes = prefixes.view(VOCAB**depth, depth)  # [V^depth, depth], lexicographic like the flat index
        ids = torch.cat([torch.tensor(prompt).expand(len(prefixes), -1), prefixes], dim=1)
        logits = target(ids).logits[:, -1].float()
        step = warpers(ids, logits).double().softmax(-1)  # [V^depth, V]
        probs = (probs.unsqueeze(-1) * step).flatten()
    return probs


def _sample_counts(target, drafts, temperature, top_k, top_p, gamma, selector=None, prompt=PROMPT, **kw):
    torch.manual_seed(2024)
    ids = torch.tensor(prompt).expand(SAMPLES, -1)
    out = target.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        do_sample=True,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        max_new_tokens=NEW,
        num_assistant_tokens=gamma,
        assistant_models=drafts,
        selector=selector or RoundRobin(),
        flashspec=True,
        **kw,
    )
    codes = (out[:, len(prompt):] * torch.tensor([VOCAB**2, VOCAB, 1])).sum(-1)
    return torch.bincount(codes, minlength=VOCAB**NEW)


def _p_value(counts, probs):
    expected = probs * SAMPLES
    assert counts[expected == 0].sum() == 0, "sampled a sequence the target gives probability 0"
    small = expected < 5  # pool rare cells so every bin expects >= 5
    obs = torch.cat([counts[~small].double(), counts[small].double().sum().view(1)])
    exp = torch.cat([expected[~small], expected[small].sum().view(1)])
    keep = exp > 0
    return chisquare(obs[keep].numpy(), exp[keep].numpy() * obs[keep].sum().item() / exp[keep].sum().item()).pvalue


@pytest.mark.parametrize(
    "temperature, top_k, top_p, gamma",
    [(1.0, 0, 1.0, 2), (0.7, 5, 1.0, 3), (1.3, 0, 0.8, 2)],
)
def test_joint_distribution_matches_target(models, temperature, top_k, top_p, gamma):
    target, drafts = models
    counts = _sample_counts(target, drafts, temperature, top_k, top_p, gamma)
    stats = target.flashspec_stats
    assert set(stats.step_arms[:2]) == {0, 1}, "the selector switches assistants every step"
    assert 0 < sum(map(sum, stats.step_accepted)) < SAMPLES * stats.steps * gamma, "ragged: some drafts rejected"
    assert _p_value(counts, _exact(target, _warpers(temperature, top_k, top_p))) > ALPHA


@pytest.mark.parametrize("selector", sorted(SELECTORS))
def test_every_selector_over_models_prompt_lookup_and_two_gammas_is_exact(models, selector, cheap_drafts):
    """Arms (source, γ) over two models and prompt lookup (one-hot q), every named selector: the same gate. At
    10,000 rows on a CPU plain decoding is the cheapest arm; cost-aware selectors are given costs that make the
    drafts worth it (``cheap_drafts``), so that drafted steps are what the gate tests."""
    target, drafts = models
    counts = _sample_counts(target, [*drafts, PromptLookup()], 1.0, 0, 1.0, [1, 2], selector)
    stats = target.flashspec_stats
    assert 0 < sum(map(sum, stats.step_accepted)) < sum(len(s) * stats.arm_gammas[a] for a, s in zip(stats.step_arms, stats.step_accepted))
    assert _p_value(counts, _exact(target, _warpers(1.0, 0, 1.0))) > ALPHA


class _MixedKeepingTheModelsScores(LookupOrDraft):
    """A broken mixed arm: lookup's rows are verified against the model's ``q``, not lookup's one-hot scores."""

    def propose(self, ctx, gamma):
        kept, model_propose = {}, self.model.propose

        def keep_scores(ctx, gamma):
            drafts, q = model_propose(ctx, gamma)
            kept["q"] = q.clone()  # before the mixed arm writes lookup's one-hot rows into it
            return drafts, q

        self.model.propose = keep_scores
        try:
            return super().propose(ctx, gamma)[0], kept["q"]
        finally:
            del self.model.propose


@pytest.mark.parametrize("mixed, passes", [(LookupOrDraft, True), (_MixedKeepingTheModelsScores, False)])
def test_mixed_arm_is_exact(models, mixed, passes, monkeypatch):
    """The mixed arm alone (prompt lookup on rows whose last token occurred before, one-hot q; the draft model on the
    others): the prompt ends with a repeated token, so the first step drafts by lookup, and rows whose recovered
    token is new draft with the model next: a step verifies both kinds of rows. The same gate; a mixed arm that
    verifies lookup's rows against the model's scores must fail it."""
    monkeypatch.setattr(flashspec_hf.decoding, "LookupOrDraft", mixed)
    target, drafts = models
    prompt = [3, 5, 1, 5]
    counts = _sample_counts(target, [drafts[0], PromptLookup(max_ngram=1, mix_min_match=1)], 1.0, 0, 1.0, 2,
                            FixedArm(2), prompt=prompt)
    stats = target.flashspec_stats
    assert stats.arm_names[2] == "prompt_lookup+assistant_0" and stats.steps > 1
    assert (_p_value(counts, _exact(target, _warpers(1.0, 0, 1.0), prompt)) > ALPHA) == passes


def test_the_gate_rejects_a_sampler_that_skips_verification(models, monkeypatch):
    """Negative control: accepting every draft gives the drafts' law, which the same gate must reject."""

    def accept_all(scores, drafts, draft_logits):
        return torch.cat([drafts, drafts[:, :1]], dim=1), torch.full((drafts.shape[0],), drafts.shape[1])

    monkeypatch.setattr(flashspec_hf.decoding, "verify", accept_all)
    target, drafts = models
    counts = _sample_counts(target, drafts, 1.0, 0, 1.0, 2)
    with pytest.raises(AssertionError):
        assert _p_value(counts, _exact(target, _warpers(1.0, 0, 1.0))) > ALPHA


def test_draft_draws_among_few_candidates_follow_the_draft_scores():
    """On the CPU a draft token is drawn among the finite scores alone when warpers left few (top-k, top-p): one
    batch whose rows keep three candidates or one (the draw's sparse path); the first rows' draws follow
    softmax(q) (chi-square), the others always give their one candidate."""
    vocab, rows = 64, SAMPLES
    q = torch.full((rows, vocab), float("-inf"))
    q[: rows // 2, [3, 17, 40]] = torch.tensor([0.5, -1.0, 1.5])
    q[rows // 2 :, 60] = 0.0
    torch.manual_seed(2024)
    tokens = draw(q, do_sample=True)[:, 0]  # [rows]
    assert torch.all(tokens[rows // 2 :] == 60)
    counts = torch.bincount(tokens[: rows // 2], minlength=vocab)[[3, 17, 40]]
    assert counts.sum() == rows // 2
    expected = torch.tensor([0.5, -1.0, 1.5], dtype=torch.float64).softmax(-1) * (rows // 2)
    assert chisquare(counts.double().numpy(), expected.numpy()).pvalue > ALPHA
