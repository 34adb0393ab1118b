"""Greedy flashspec output equals stock generate token for token (fp32), whatever the drafts propose."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import transformers
from packaging.version import Version

from flashspec_hf import SELECTORS, FixedArm, PromptLookup, RoundRobin
from flashspec_hf.runners import SLIDING_WINDOW_MIN_VERSION

from .conftest import left_padded, tiny_llama

PROMPTS = [[5, 17, 33, 8, 90, 41, 7], [12, 60], [77, 3, 51, 51, 9]]


def _stock(model, row, **kw):
    ids = torch.tensor([row])
    return model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, **kw)[0, len(row):]


def _flash(model, drafts, rows, **kw):
    ids, mask = left_padded(rows)
    out = model.generate(ids, attention_mask=mask, do_sample=False, assistant_models=drafts, flashspec=True, **kw)
    return out[:, ids.shape[1]:]


@pytest.mark.parametrize("gamma", [1, 3, 6])
def test_batch_one_equals_stock(target, assistants, gamma):
    for row in PROMPTS:
        want = _stock(target, row, max_new_tokens=24)
        got = _flash(target, assistants, [row], max_new_tokens=24, num_assistant_tokens=gamma, selector=RoundRobin())
        assert torch.equal(got[0], want)


def test_padded_batch_rows_equal_each_row_alone(target, assistants):
    got = _flash(target, assistants, PROMPTS, max_new_tokens=24, selector=RoundRobin())
    accepted = target.flashspec_stats.step_accepted
    assert any(len(set(step)) > 1 for step in accepted), "acceptance was ragged across rows"
    for row, out in zip(PROMPTS, got):
        want = _stock(target, row, max_new_tokens=24)
        assert torch.equal(out[: len(want)], want)


def test_self_draft_accepts_everything(target):
    got = _flash(target, [target], PROMPTS, max_new_tokens=20, num_assistant_tokens=4)
    assert target.flashspec_stats.tau == 5.0
    for row, out in zip(PROMPTS, got):
        assert torch.equal(out[:20], _stock(target, row, max_new_tokens=20))


def test_eos_inside_an_accepted_block_ends_the_row_there(target):
    """The target itself drafts (all γ accepted); EOS is a token it emits mid-block. Tokens after it are dropped."""
    row = PROMPTS[0]
    plain = _stock(target, row, max_new_tokens=30)
    eos = int(plain[5])  # a token greedy decoding emits at the 6th position, inside the second block of 4
    first = int((plain == eos).nonzero()[0])
    want = _stock(target, row, max_new_tokens=30, eos_token_id=eos)
    got = _flash(target, [target], [row, PROMPTS[1]], max_new_tokens=30, num_assistant_tokens=4, eos_token_id=eos)
    assert torch.equal(want[: first + 1], plain[: first + 1]) and len(want) == first + 1
    assert torch.equal(got[0, : first + 1], want) and (got[0, first + 1 :] == 0).all()


@pytest.mark.parametrize("max_new_tokens", [1, 2, 7, 13])
def test_max_new_tokens_inside_a_block(target, max_new_tokens):
    got = _flash(target, [target], PROMPTS, max_new_tokens=max_new_tokens, num_assistant_tokens=5)
    assert got.shape[1] == max_new_tokens
    for row, out in zip(PROMPTS, got):
        assert torch.equal(out, _stock(target, row, max_new_tokens=max_new_tokens))


def test_processors_apply_per_position_like_stock(target, assistants):
    kw = dict(max_new_tokens=20, repetition_penalty=1.3, no_repeat_ngram_size=2, min_new_tokens=4)
    got = _flash(target, assistants, [PROMPTS[0]], num_assistant_tokens=3, **kw)
    assert torch.equal(got[0], _stock(target, PROMPTS[0], **kw))


def test_min_new_tokens_per_row_in_a_ragged_batch(target):
    """EOS is masked until each row has min_new_tokens, counted per row (rows advance at different speeds)."""
    eos = int(_stock(target, PROMPTS[1], max_new_tokens=3)[1])  # row 1 would end at its 2nd token
    got = _flash(target, [target], PROMPTS, max_new_tokens=12, min_new_tokens=6, eos_token_id=eos)
    for row, out in zip(PROMPTS, got):
        want = _stock(target, row, max_new_tokens=12, min_new_tokens=6, eos_token_id=eos)
        assert torch.equal(out[: len(want)], want)


@settings(max_examples=20, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 9), min_size=1, max_size=4),
    gamma=st.integers(1, 6),
    vocab=st.sampled_from([33, 64, 97]),
    seed=st.integers(0, 1000),
    loop=st.sampled_from(["dynamic", "static"]),
)
def test_random_shapes_equal_stock(lengths, gamma, vocab, seed, loop):
    target = tiny_llama(layers=2, vocab=vocab, seed=seed, peak=4.0)
    drafts = [tiny_llama(layers=1, vocab=vocab + 3, seed=seed + 1, peak=4.0), PromptLookup()]
    g = torch.Generator().manual_seed(seed)
    rows = [torch.randint(3, vocab, (n,), generator=g).tolist() for n in lengths]
    got = _flash(target, drafts, rows, max_new_tokens=10, num_assistant_tokens=gamma, cache_implementation=loop)
    for row, out in zip(rows, got):
        want = _stock(target, row, max_new_tokens=10)
        assert torch.equal(out[: len(want)], want)


def test_triton_kernel_in_the_loop(target, assistants, monkeypatch):
    monkeypatch.setenv("FLASHSPEC_VERIFIER", "triton")
    got = _flash(target, assistants, PROMPTS[:2], max_new_tokens=12)
    for row, out in zip(PROMPTS, got):
        want = _stock(target, row, max_new_tokens=12)
        assert torch.equal(out[: len(want)], want)


def test_prefix_processors_in_a_ragged_batch_equal_stock(target, assistants):
    """Repetition penalty and n-gram bans see each row's own tokens, not alignment padding (equal-length prompts:
    stock batched generate equals each row alone, so flashspec must too)."""
    rows = [[5, 17, 33, 8], [12, 60, 61, 62], [77, 3, 51, 9]]
    kw = dict(max_new_tokens=20, repetition_penalty=3.0, no_repeat_ngram_size=2, pad_token_id=56)
    got = _flash(target, assistants, rows, num_assistant_tokens=3, **kw)
    assert any(len(set(step)) > 1 for step in target.flashspec_stats.step_accepted), "acceptance was ragged"
    for row, out in zip(rows, got):
        assert torch.equal(out, _stock(target, row, **kw))


def test_draft_with_a_smaller_padded_vocabulary(target):
    """Tokens the draft has no embedding for are fed to it as 0; its missing logits are probability 0."""
    small = tiny_llama(layers=1, vocab=90, seed=3, peak=8.0)
    rows = [[93, 95, 94, 96], [5, 17]]  # ids above the draft's vocabulary
    got = _flash(target, [small], rows, max_new_tokens=16)
    for row, out in zip(rows, got):
        want = _stock(target, row, max_new_tokens=16)
        assert torch.equal(out[: len(want)], want)


def test_sliding_window_target_batch_one_and_clear_error_for_batches():
    from transformers import MistralConfig, MistralForCausalLM

    torch.manual_seed(0)
    config = MistralConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, sliding_window=8, pad_token_id=0,
                           bos_token_id=1, eos_token_id=2)
    model = MistralForCausalLM(config).eval()
    row = PROMPTS[0]
    if Version(transformers.__version__) < SLIDING_WINDOW_MIN_VERSION:
        with pytest.raises(NotImplementedError, match="upgrade transformers"):
            _flash(model, [model], [row], max_new_tokens=20)
        return
    got = _flash(model, [model], [row], max_new_tokens=20, num_assistant_tokens=3)
    assert torch.equal(got[0], _stock(model, row, max_new_tokens=20))  # past the 8-token window
    with pytest.raises(NotImplementedError, match="batch size 1"):
        _flash(model, [model], PROMPTS, max_new_tokens=4)


@pytest.mark.parametrize("loop", ["dynamic", "static"])
@pytest.mark.parametrize("selector", sorted(SELECTORS))
def test_every_selector_with_prompt_lookup_and_several_gammas_equals_stock(target, assistants, selector, loop,
                                                                           cheap_drafts):
    """Arms = (source, γ) pairs over two models and prompt lookup; any selector, ragged batch, both loops (the
    static one runs Hedge's full-information selection nowhere: it refuses it): still stock output."""
    if loop == "static" and SELECTORS[selector]().full_information:
        pytest.skip("the static loop refuses full-information selectors (tests/test_static.py)")
    rows = PROMPTS + [[9, 10, 11, 9, 10, 11, 9, 10]]  # a repeating row, where prompt lookup drafts well
    got = _flash(target, [*assistants, PromptLookup()], rows, max_new_tokens=24, num_assistant_tokens=[2, 5],
                 selector=selector, cache_implementation=loop)
    stats = target.flashspec_stats
    assert any(len(set(step)) > 1 for step in stats.step_accepted), "acceptance was ragged"
    plain = [0] if SELECTORS[selector]().cost_aware else []  # cost-aware selectors get the plain-decoding arm
    mixed = [] if SELECTORS[selector]().full_information else [2, 5] * 2  # lookup + each model
    assert stats.arm_gammas == [2, 5] * 3 + plain + mixed
    for row, out in zip(rows, got):
        want = _stock(target, row, max_new_tokens=24)
        assert torch.equal(out[: len(want)], want)


@pytest.mark.parametrize("loop", ["dynamic", "static"])
@pytest.mark.parametrize("arm", [3, 4])
def test_mixed_arms_equal_stock(target, assistants, arm, loop):
    """Each mixed arm (lookup on the rows whose last two tokens occurred before, a draft model on the others) alone,
    over a ragged batch where both kinds of rows occur, in both loops: stock output. Offered at batch > 1 only."""
    rows = PROMPTS + [[9, 10, 11, 9, 10, 11, 9, 10]]
    got = _flash(target, [*assistants, PromptLookup()], rows, max_new_tokens=24, num_assistant_tokens=3,
                 selector=FixedArm(arm), cache_implementation=loop)
    stats = target.flashspec_stats
    assert stats.arm_names == ["assistant_0", "assistant_1", "prompt_lookup", "prompt_lookup+assistant_0",
                               "prompt_lookup+assistant_1"]
    assert any(len(set(step)) > 1 for step in stats.step_accepted), "acceptance was ragged"
    for row, out in zip(rows, got):
        want = _stock(target, row, max_new_tokens=24)
        assert torch.equal(out[: len(want)], want)
    _flash(target, [*assistants, PromptLookup(mix_min_match=None)], rows, max_new_tokens=2)
    assert len(target.flashspec_stats.arm_names) == 3
    _flash(target, [*assistants, PromptLookup()], rows[:1], max_new_tokens=2)  # batch 1: rows cannot differ
    assert len(target.flashspec_stats.arm_names) == 3


@pytest.mark.parametrize("loop", ["dynamic", "static"])
def test_mixed_arm_keeps_its_draft_model_current(target, assistants, loop, monkeypatch):
    """The mixed arm's draft model forgets its own drafts where lookup's were taken: at every catch-up its logits
    equal a fresh forward of the draft over the row's committed tokens (a stale cache would differ), and the dynamic
    runner catches up on at most the step's emitted tokens and the pending column (no re-feeding of what it saw)."""
    from flashspec_hf.drafts import ModelDrafts

    rows = [[9, 10, 11, 9, 10, 11, 9, 10], [5, 17, 33, 8, 90, 41, 7, 11]]  # lookup's row, the model's row
    gamma, new_tokens, checked, original = 3, 24, [], ModelDrafts.propose

    def propose(self, ctx, gamma):
        runner, seq = self.runner, ctx.sequences
        catch_up = runner.catch_up

        def checked_catch_up(columns):
            fed = None if isinstance(runner.seen, torch.Tensor) else columns.host_length - runner.seen
            logits = catch_up(columns)  # [B, 1, V_draft]
            for b in range(len(rows)):
                if seq.num_new[b] == new_tokens:
                    continue  # a finished row: its columns go on, its sequence does not
                committed = seq.buffer[b, : seq.prompt_length + int(seq.num_new[b])]
                fresh = runner.model(committed.unsqueeze(0)).logits[0, -1]
                torch.testing.assert_close(logits[b, 0], fresh, atol=1e-4, rtol=1e-4)
            checked.append(fed)
            return logits

        runner.catch_up = checked_catch_up
        try:
            return original(self, ctx, gamma)
        finally:
            del runner.catch_up

    monkeypatch.setattr(ModelDrafts, "propose", propose)
    got = _flash(target, [*assistants, PromptLookup()], rows, max_new_tokens=new_tokens, num_assistant_tokens=gamma,
                 selector=FixedArm(4), cache_implementation=loop)
    assert len(checked) >= target.flashspec_stats.steps > 2  # the static loop runs a few steps past the end
    if loop == "dynamic":
        assert max(checked[1:]) <= gamma + 1
    for row, out in zip(rows, got):
        assert torch.equal(out, _stock(target, row, max_new_tokens=new_tokens))


def test_prompt_lookup_alone_accepts_on_a_repeating_output(target):
    """The target repeats itself at some point under greedy decoding; prompt lookup then drafts what follows."""
    row = PROMPTS[0]
    want = _stock(target, row, max_new_tokens=60)
    got = _flash(target, [PromptLookup()], [row], max_new_tokens=60, num_assistant_tokens=3)
    assert torch.equal(got[0], want)
    assert sum(map(sum, target.flashspec_stats.step_accepted)) > 0
