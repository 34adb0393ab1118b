"""Selectors on simulated acceptance: the learning ones beat round-robin, the discounted ones follow a shift."""

import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.regret import COSTS, SETTINGS, run
from flashspec_hf import Hedge, PromptLookup, ThompsonSampling, UCB1
from flashspec_hf.selection import SELECTORS, expected_accepted, make_selector

from .conftest import assert_rows_equal_stock, left_padded, tiny_llama


def _regret(setting, make, rounds, seeds=3, costs=None):
    return sum(run(setting, make, seed, rounds, costs)[0][-1] for seed in range(seeds)) / seeds


@pytest.mark.parametrize("make", [lambda s: UCB1(), lambda s: ThompsonSampling(seed=s)])
def test_learning_selectors_beat_round_robin(make):
    rr = _regret(SETTINGS["easy"], lambda s: SELECTORS["round_robin"](), 2000)
    assert _regret(SETTINGS["easy"], make, 2000) < 0.5 * rr


def test_discounting_follows_a_shifted_best_arm():
    plain = _regret(SETTINGS["shifting"], lambda s: ThompsonSampling(seed=s), 4000)  # the best arm changes at 2,000
    discounted = _regret(SETTINGS["shifting"], lambda s: ThompsonSampling(seed=s, discount=0.998), 4000)
    assert discounted < 0.7 * plain


def test_every_named_selector_builds():
    for name in SELECTORS:
        selector = make_selector(name)
        selector.ensure(3)
        assert 0 <= selector.select() < 3


def test_a_selector_says_when_other_arms_make_it_forget():
    """A selector kept across calls starts over when a call brings other arms; it warns only when that forgets
    steps it learnt from (not on first use, nor for the same arms again)."""
    import warnings

    selector = ThompsonSampling(seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        selector.ensure(3, [4, 4, 0])  # first use
        selector.update(selector.select(), [2], 4)
        selector.ensure(3, [4, 4, 0])  # the same arms: it keeps what it learnt
    assert sum(selector.pulls) == 1
    forgot = r"learnt over 3 arms .* this call has 4 \(γ \[4, 4, 4, 0\]\): it starts over"
    with pytest.warns(UserWarning, match=forgot):
        selector.ensure(4, [4, 4, 4, 0])
    assert sum(selector.pulls) == 0


@pytest.mark.parametrize("make, learnt", [(lambda: ThompsonSampling(seed=0), ("successes", "failures")),
                                          (lambda: UCB1(), ("reward_sum", "weight"))])
def test_a_selector_keeps_the_shared_arms_when_only_the_mixed_arms_come_or_go(make, learnt):
    """Batch 1 has no mixed arms, batch > 1 appends them: what the selector learnt of the arms every batch size has
    (``shared``) is kept both ways without a warning, the mixed arms start fresh; another pool still starts over."""
    import warnings

    selector = make()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        selector.ensure(3, [4, 4, 0], shared=3)  # batch 1: two sources and the plain arm
        selector.set_costs([2.0, 3.0, 1.0])
        for _ in range(5):
            selector.update(0, [3], 4)
        before = {name: list(getattr(selector, name)) for name in ("pulls", "chosen", "costs", *learnt)}
        assert any(before[name][0] for name in learnt), "the statistics compared are not all zero"
        selector.ensure(5, [4, 4, 0, 4, 4], shared=3)  # batch 8: two mixed arms follow
        for name, values in before.items():
            assert getattr(selector, name)[:3] == values, name
        assert selector.pulls == [5, 0, 0, 0, 0] and selector.gammas == [4, 4, 0, 4, 4] and selector.plain == 2
        selector.update(4, [2], 4)
        selector.ensure(3, [4, 4, 0], shared=3)  # batch 1 again
    assert selector.pulls == [5, 0, 0] and selector.num_arms == 3
    with pytest.warns(UserWarning, match="it starts over"):
        selector.ensure(4, [4, 4, 4, 0], shared=4)  # another pool
    assert sum(selector.pulls) == 0


@pytest.mark.parametrize("name", [n for n in SELECTORS if not make_selector(n).full_information])
def test_every_per_arm_list_of_a_selector_is_kept_or_per_call(name):
    """A per-arm list left out of ``arm_state`` would be reset while ``pulls`` is kept."""
    selector = make_selector(name)
    selector.ensure(5, [4, 4, 4, 0, 4], shared=4)
    selector.update(selector.choose(), [2], 4)
    per_arm = {n for n, v in vars(selector).items() if isinstance(v, list) and len(v) == 5}
    assert per_arm - {"gammas", "empty", "reported", "allowed"} <= set(selector.arm_state)


def test_a_full_information_selector_or_a_bad_shared_count_is_never_kept_in_part():
    hedge = Hedge(seed=0)
    hedge.ensure(3, [4, 4, 0], shared=3)
    hedge.update(0, [3], 4)
    with pytest.warns(UserWarning, match="it starts over"):
        hedge.ensure(4, [4, 4, 0, 4], shared=3)
    with pytest.raises(ValueError, match="shared counts leading arms"):
        ThompsonSampling().ensure(3, [4, 4, 0], shared=0)


def test_a_kept_selector_carries_what_it_learnt_between_batch_sizes(target):
    """generate at batch 1, then 2 (which adds the mixed arms), then 1 again, with one selector: no warning, and the
    steps it learnt from at batch 1 still count at batch 2."""
    import warnings

    draft = tiny_llama(layers=1, seed=0, peak=8.0)
    draft.load_state_dict(target.state_dict(), strict=False)
    selector = ThompsonSampling(seed=0, cost_aware=True)
    kw = dict(do_sample=False, assistant_models=[draft, PromptLookup()], flashspec=True, selector=selector,
              max_new_tokens=12)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        target.generate(torch.tensor([[5, 17, 33, 8]]), **kw)
        shared, before = selector.num_arms, list(selector.pulls)
        ids, mask = left_padded([[5, 17, 33, 8], [12, 60, 12]])
        target.generate(ids, attention_mask=mask, **kw)
        assert selector.num_arms > shared and selector.shared == shared
        assert all(after >= b for after, b in zip(selector.pulls, before)) and sum(before) > 0
        target.generate(torch.tensor([[5, 17, 33, 8]]), **kw)
    assert selector.num_arms == shared and sum(selector.pulls) > sum(before)


def test_hedge_full_information_beats_the_bandits_on_the_hard_setting():
    hedge = _regret(SETTINGS["hard"], lambda s: Hedge(seed=s), 3000)
    assert hedge < _regret(SETTINGS["hard"], lambda s: UCB1(), 3000)


def test_cost_aware_selection_prefers_tokens_per_second():
    """The most accepting arm is the slowest: acceptance alone picks it, the cost-aware selector does not."""
    costs = COSTS["costly"]
    plain = _regret(SETTINGS["costly"], lambda s: ThompsonSampling(seed=s), 3000, costs=costs)
    aware = _regret(SETTINGS["costly"], lambda s: ThompsonSampling(seed=s, cost_aware=True), 3000, costs=costs)
    assert aware < 0.2 * plain


def test_gamma_arms_are_valued_by_tokens_per_step():
    """Same acceptance, γ = 2 or 8: with α = 0.9 the longer draft yields more tokens per step, and is chosen."""
    selector = ThompsonSampling(seed=0)
    selector.reset(2, [2, 8])
    for _ in range(200):
        arm = selector.select()
        gamma = selector.gammas[arm]
        selector.update(arm, [min(gamma, 6)], gamma)  # accepts 6 of 8, or all of 2
    assert selector.pulls[1] > 150


@pytest.mark.parametrize(
    "row, gamma, want, matched",
    [
        ([1, 2, 3, 9, 1, 2], 6, [3, 9, 1, 2, 3, 9], 2),  # "1 2" seen before: what followed, then periodically
        ([4, 5, 6, 4, 5, 7, 4, 5], 3, [7, 4, 5], 2),  # the latest match wins
        ([8, 1, 2, 3, 7, 2, 3], 2, [7, 2], 2),  # longest n first: "2 3" beats the later "3"
        ([1, 2, 3, 2], 2, [3, 2], 1),  # only "2" matches
        ([1, 2, 3, 4], 3, [4, 4, 4], 0),  # no match: the last token repeated
    ],
)
def test_prompt_lookup_proposals(row, gamma, want, matched):
    lookup = PromptLookup(max_ngram=3)
    buffer = torch.tensor([[0, 0] + row + [0, 0, 0]])  # left padding, then the unused tail of the buffer
    got, length = lookup.lookup(buffer, torch.tensor([2 + len(row)]), gamma)
    assert got.tolist() == [want] and length.tolist() == [matched]


def _lookup_by_definition(row: list[int], end: int, gamma: int, max_ngram: int, min_ngram: int):
    """Prompt lookup as its docstring defines it, one n-gram length at a time, in plain Python."""
    for n in range(max_ngram, min_ngram - 1, -1):
        starts = [j for j in range(end - n) if row[j: j + n] == row[end - n: end]]  # the match ends before `end`
        if starts:
            follow = starts[-1] + n
            return [row[follow + i % (end - follow)] for i in range(gamma)], n
    return [row[end - 1]] * gamma, 0


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_prompt_lookup_equals_its_definition(data):
    """All n-gram lengths matched at once equal the longest-first, latest-match definition, row by row, on rows of a
    small alphabet (n-grams repeat; negative ids included), any end, γ and n-gram range."""
    batch, size = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 20))
    tokens = st.integers(-2, 3)  # negative ids too (a pad id of -1): no value may stand for "outside the row"
    rows = data.draw(st.lists(st.lists(tokens, min_size=size, max_size=size), min_size=batch, max_size=batch))
    ends = data.draw(st.lists(st.integers(1, size), min_size=batch, max_size=batch))
    gamma, max_ngram = data.draw(st.integers(1, 6)), data.draw(st.integers(1, 4))
    min_ngram = data.draw(st.integers(1, max_ngram))
    got, matched = PromptLookup(max_ngram, min_ngram).lookup(torch.tensor(rows), torch.tensor(ends), gamma)
    want = [_lookup_by_definition(row, end, gamma, max_ngram, min_ngram) for row, end in zip(rows, ends)]
    assert got.tolist() == [w for w, _ in want] and matched.tolist() == [n for _, n in want]


def test_prompt_lookup_rejects_bad_ngram_lengths():
    with pytest.raises(ValueError, match="min_ngram <= max_ngram"):
        PromptLookup(max_ngram=1, min_ngram=2)
    with pytest.raises(ValueError, match="mix_min_match >= 1"):
        PromptLookup(mix_min_match=0)
    assert PromptLookup(max_ngram=1).mix_min_match == 1


def _calls_regret(selector, seed, calls=24, steps=15, gamma=4):
    """Regret (expected tokens lost against the best arm) over a stream of calls whose domain switches every three
    calls: arm 0 accepts 85% on chat and 10% on code, arm 1 the reverse."""
    rng = torch.Generator().manual_seed(seed)
    alphas = {"chat": [0.85, 0.10], "code": [0.10, 0.85]}
    selector.ensure(2, [gamma, gamma])
    regret = 0.0
    for call in range(calls):
        domain = alphas["chat" if call // 3 % 2 == 0 else "code"]
        selector.begin_call()
        for _ in range(steps):
            arm = selector.choose()
            draws = torch.rand(gamma, generator=rng) < domain[arm]
            accepted = int(draws.long().cumprod(0).sum())
            selector.update(arm, [accepted], gamma)
            regret += expected_accepted(max(domain), gamma) - expected_accepted(domain[arm], gamma)
    return regret


def test_call_memory_follows_a_domain_switch_between_calls():
    """One selector kept across calls: capping each arm's evidence when a call starts loses less after a switch."""
    kept = sum(_calls_regret(ThompsonSampling(seed=s, discount=0.99), s) for s in range(3))
    capped = sum(_calls_regret(ThompsonSampling(seed=s, discount=0.99, call_memory=8), s) for s in range(3))
    assert capped < 0.7 * kept


def test_begin_call_scales_counts_down_to_call_memory():
    selector = ThompsonSampling(call_memory=8)
    selector.ensure(3, [4, 4, 4])
    for accepted in ([4], [3], [4], [1]):
        selector.update(0, accepted, 4)
    selector.update(1, [0], 4)
    selector.begin_call()
    assert selector.successes[0] + selector.failures[0] == pytest.approx(8)
    assert selector.successes[0] / selector.failures[0] == pytest.approx(12 / 2)  # 12 accepted, 2 rejections
    assert (selector.successes[1], selector.failures[1]) == (0, 1)  # under the cap: kept
    assert (selector.successes[2], selector.failures[2]) == (0, 0)


def test_generate_starts_each_call_with_begin_call(target, assistants):
    class Counting(ThompsonSampling):
        calls = 0

        def begin_call(self):
            Counting.calls += 1

    selector = Counting()
    for _ in range(2):
        target.generate(torch.tensor([[3, 9, 27]]), max_new_tokens=4, do_sample=False, flashspec=True,
                        assistant_models=assistants, selector=selector)
    assert Counting.calls == 2


class _PromptRecording(ThompsonSampling):
    """Thompson sampling that records the prompt evidence it is given and the first arm it chooses."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.seen, self.first = None, None

    def prior(self, successes, trials):
        self.seen = (list(successes), list(trials))
        super().prior(successes, trials)

    def choose(self, arm=None):
        arm = super().choose(arm)
        self.first = arm if self.first is None else self.first
        return arm


@pytest.mark.parametrize("cache_implementation", ["dynamic", "static"])
def test_prompt_agreement_scores_the_real_prompt_columns(target, cache_implementation):
    """A copy of the target guesses every prompt token the target would, an unrelated draft does not; padding is not
    scored. Rows of 40 and 10 tokens: the window is columns [6, 38) (32 before T0 - 2), of which the short row has
    8 real ones. Outputs stay equal to stock's."""
    import copy

    pool = [tiny_llama(layers=1, vocab=101, seed=5, peak=8.0), copy.deepcopy(target)]
    rows = [[3 + (7 * i) % 90 for i in range(40)], [5 + (3 * i) % 80 for i in range(10)]]
    ids, mask = left_padded(rows)
    selector = _PromptRecording(prompt_weight=16)
    out = target.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False, flashspec=True,
                          assistant_models=pool, selector=selector, cache_implementation=cache_implementation)
    successes, trials = selector.seen
    assert trials == [40, 40] and successes[1] == 40 and successes[0] < 30
    assert_rows_equal_stock(target, rows, out[:, ids.shape[1]:], 8)


def test_prompt_prior_drafts_with_the_agreeing_arm_first(target):
    """With the prompt's evidence the first step goes to the draft that agrees with the target, for every seed (a
    selector without it picks from flat posteriors, a coin flip per seed)."""
    import copy

    pool = [tiny_llama(layers=1, vocab=101, seed=5, peak=8.0), copy.deepcopy(target)]
    prompt = torch.tensor([[3 + (7 * i) % 90 for i in range(24)]])
    firsts = []
    for seed in range(6):
        selector = _PromptRecording(seed=seed, prompt_weight=16)
        target.generate(prompt, max_new_tokens=4, do_sample=False, flashspec=True, assistant_models=pool,
                        selector=selector)
        firsts.append(selector.first)
    assert firsts == [1] * 6


def test_an_arm_the_backend_warms_up_drafts_before_the_selector_is_asked(target, assistants, monkeypatch):
    """While the backend has an arm to warm up (the static one on CUDA: arms without a captured step), the step
    drafts with it; the selector counts it as chosen, and the output stays stock's."""
    from flashspec_hf import FixedArm
    from flashspec_hf.backends import DynamicBackend

    forced = iter([1, 1])
    monkeypatch.setattr(DynamicBackend, "warming_arm", lambda self, selector: next(forced, None))
    selector = FixedArm(0)
    rows = [[5, 17, 33, 8, 90, 41, 7], [12, 60]]
    ids, mask = left_padded(rows)
    out = target.generate(ids, attention_mask=mask, max_new_tokens=16, do_sample=False, flashspec=True,
                          assistant_models=assistants, selector=selector)
    assert selector.chosen[1] == 2 and selector.chosen[0] > 0
    assert_rows_equal_stock(target, rows, out[:, ids.shape[1]:], 16)
    assert selector.candidates() == [0] and SELECTORS["thompson"]().candidates() == []  # no arms yet


def test_prior_adds_the_prompt_as_weighted_counts():
    """Each scored arm gets 16 tested tokens at its agreement rate; the unscored arm (an early exit, the plain arm)
    keeps its posterior."""
    selector = ThompsonSampling(prompt_weight=16)
    assert selector.wants_prior and not ThompsonSampling().wants_prior
    selector.ensure(3, [4, 4, 0])
    selector.update(0, [2], 4)  # 2 accepted, 1 rejection
    selector.prior([5, 8, 0], [20, 20, 0])
    assert selector.successes == pytest.approx([2 + 4, 6.4, 0])
    assert selector.failures == pytest.approx([1 + 12, 9.6, 0])


def test_prior_weight_is_at_most_the_scored_positions():
    """A prompt of 4 scored positions counts for 4 tested tokens, not 16."""
    selector = ThompsonSampling(prompt_weight=16)
    selector.ensure(2, [4, 4])
    selector.prior([2, 1], [4, 4])
    assert (selector.successes, selector.failures) == ([2, 1], [2, 3])


@pytest.mark.parametrize("batch, length, want", [(1, 100, range(66, 98)), (16, 100, range(82, 98)),
                                                 (2, 10, range(0, 8)), (1, 2, None), (300, 100, None)])
def test_prompt_window_is_the_last_columns_within_the_position_budget(batch, length, want):
    """W = min(32, 256 // B, T0 - 2) columns ending at T0 - 2; none for a two-column prompt or B > 256."""
    from types import SimpleNamespace

    from flashspec_hf.drafts import prompt_window

    assert prompt_window(SimpleNamespace(start_length=length, tokens=torch.zeros(batch, length + 8))) == want


def test_reduced_draft_head_guesses_map_to_token_ids():
    """A draft whose head covers a subset of the vocabulary (``draft_vocab_ids``) guesses indices of that subset;
    its prompt guesses are the token ids they stand for."""
    from types import SimpleNamespace

    from flashspec_hf.drafts import DraftContext, ModelDrafts

    model = SimpleNamespace(draft_vocab_ids=torch.tensor([7, 3, 50, 9]), config=SimpleNamespace(name_or_path="d"))
    drafts = ModelDrafts(SimpleNamespace(model=model, prompt_argmax=torch.tensor([[2, 0, 3]])), vocab_size=97)
    ctx = DraftContext(SimpleNamespace(tokens=torch.zeros(1, 5, dtype=torch.long)), None, None, 97, False)
    assert drafts.prompt_guesses(ctx, range(0, 3)).tolist() == [[50, 7, 9]]


@settings(max_examples=40, deadline=None)
@given(batch=st.integers(1, 3), gamma=st.integers(1, 5), draft_vocab=st.sampled_from([40, 97, 120]),
       reduced=st.booleans(), seed=st.integers(0, 2**16))
def test_plain_greedy_drafts_are_the_argmax_of_the_scores_it_skips(batch, gamma, draft_vocab, reduced, seed):
    """Greedy with no processors (``DraftContext.plain_greedy``), a draft model's tokens are the argmax of its own
    logits mapped to token ids, without its scores on the target's vocabulary: the same tokens as the argmax of
    those scores, for a smaller, padded (entries past ``V`` large: they must never win) or reduced head
    (``draft_vocab_ids``, not in order). Distinct logits: no ties."""
    from types import SimpleNamespace

    from flashspec_hf.drafts import DraftContext, ModelDrafts

    vocab, generator = 97, torch.Generator().manual_seed(seed)
    ids = torch.randperm(vocab, generator=generator)[:draft_vocab] if reduced and draft_vocab < vocab else None
    logits = torch.randperm(batch * gamma * draft_vocab, generator=generator).float().view(gamma, batch, 1, -1)
    if ids is None and draft_vocab > vocab:
        logits[..., vocab:] += logits.numel()  # padding entries above every real one
    proposed = []
    for plain in (True, False):
        steps = iter(logits)  # [B, 1, V_draft] per forward
        runner = SimpleNamespace(model=SimpleNamespace(config=SimpleNamespace(name_or_path="d")),
                                 catch_up=lambda columns: next(steps), forward=lambda columns, w, keep: next(steps))
        if ids is not None:
            runner.model.draft_vocab_ids = ids
        columns = SimpleNamespace(tokens=torch.zeros(batch, 8, dtype=torch.long), write_drafts=lambda t, slots: None,
                                  draft_slots=lambda k: torch.zeros(batch, k, dtype=torch.long))
        ctx = DraftContext(columns, None, lambda q, drafted: q, vocab, False, plain_greedy=plain)
        proposed.append(ModelDrafts(runner, vocab).propose(ctx, gamma)[0])  # [B, γ]
    assert proposed[0].tolist() == proposed[1].tolist()
    assert bool((proposed[0] < vocab).all())


@pytest.mark.parametrize("device_map, kept", [(None, torch.Tensor), ({"": "cpu"}, torch.Tensor),
                                              ({"model.layers.0": 0, "lm_head": 1}, slice)])
def test_prefill_keeps_the_window_by_a_slice_on_a_split_model(device_map, kept):
    """Index tensor on one device; a slice when accelerate spread the model over several (its hooks would move a
    tensor to the first device, away from the last hidden states)."""
    from flashspec_hf.runners import DynamicRunner

    model = tiny_llama(vocab=97)
    if device_map is not None:
        model.hf_device_map = device_map
    keep = DynamicRunner(model, vocab_size=97)._keep(range(3, 7))
    assert isinstance(keep, kept)
    assert torch.arange(97)[keep].tolist() == [3, 4, 5, 6]


def test_prompt_weight_set_after_construction_turns_the_prior_on_and_off():
    """What ``benchmarks.selector_from_spec("default:prompt_weight=16")`` relies on: ``prompt_weight`` may be set after
    construction; the default does not read the prompt."""
    selector = SELECTORS["cost_aware_discounted_thompson"]()
    assert not selector.wants_prior
    selector.prompt_weight = 16.0
    assert selector.wants_prior
    selector.prompt_weight = 0.0
    assert not selector.wants_prior


def test_prompt_argmax_ignores_a_padded_head():
    """A model whose head is wider than the target's V (padded entries) never guesses an id >= V."""
    from flashspec_hf.runners import DynamicRunner

    runner = DynamicRunner(tiny_llama(vocab=97), vocab_size=90)
    logits = torch.zeros(1, 2, 97)
    logits[0, :, 95] = 9.0  # a padded entry wins the full argmax
    logits[0, 0, 4] = logits[0, 1, 89] = 1.0
    runner._keep_argmax(logits, range(0, 2))
    assert runner.prompt_argmax.tolist() == [[4, 89]]


def test_prompt_lookup_guesses_a_periodic_prompt():
    """Prompt lookup's guess of each prompt token from the tokens before it: exact once the period has been seen."""
    from flashspec_hf.drafts import DraftContext

    tokens = torch.tensor([[9, 4, 5, 6, 4, 5, 6, 4, 5, 6, 4, 5]])

    class _Columns:
        pass

    columns = _Columns()
    columns.tokens = tokens
    ctx = DraftContext(columns, None, None, 10, False)
    guesses = PromptLookup().prompt_guesses(ctx, range(4, 10))  # guesses of columns 5 … 10
    assert guesses.tolist() == [tokens[0, 5:11].tolist()]


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_prompt_lookup_batched_guesses_equal_one_lookup_per_column(data):
    """:meth:`PromptLookup.prompt_guesses` and :meth:`~PromptLookup.predict` look every column up at once; each
    equals a lookup of that column alone, on left-padded rows of a small alphabet (so n-grams repeat)."""
    from types import SimpleNamespace

    from flashspec_hf.drafts import DraftContext

    batch, length = data.draw(st.integers(1, 3)), data.draw(st.integers(3, 24))
    tokens = torch.tensor(data.draw(st.lists(st.lists(st.integers(0, 4), min_size=length, max_size=length),
                                             min_size=batch, max_size=batch)))
    start = data.draw(st.integers(0, length - 2))
    stop = data.draw(st.integers(start + 1, length - 1))
    lookup = PromptLookup(max_ngram=data.draw(st.integers(1, 3)))
    ctx = DraftContext(SimpleNamespace(tokens=tokens), None, None, 5, False)
    prompt = tokens[:, : stop + 1]
    want = torch.cat([lookup.lookup(prompt, torch.full((batch,), end), 1)[0] for end in range(start + 1, stop + 1)], 1)
    assert torch.equal(lookup.prompt_guesses(ctx, range(start, stop)), want)
    width = data.draw(st.integers(1, 3))
    ends = torch.tensor(data.draw(st.lists(st.integers(1, length - width + 1), min_size=batch, max_size=batch)))
    sequences = SimpleNamespace(buffer=tokens, prompt_end=ends, num_new=None)
    want = torch.cat([lookup.lookup(tokens, ends + i, 1)[0] for i in range(width)], dim=1)
    got = lookup.predict(DraftContext(None, sequences, None, 5, False), torch.zeros_like(ends), width)
    assert torch.equal(got, want)


def _simulated_call(selector, alphas, costs, steps, seed=0):
    """One call of ``steps`` steps on simulated acceptance (the plain arm last, α 0); returns the arms and, after
    each step, the call's tokens per row over the tokens plain decoding gives in the same step seconds."""
    rng = random.Random(seed)
    selector.ensure(len(alphas), [4] * (len(alphas) - 1) + [0])
    selector.begin_call()
    selector.set_costs(costs)
    arms, ratios, tokens, seconds = [], [], 0, 0.0
    for _ in range(steps):
        arm = selector.choose()
        n = 0
        while n < selector.gammas[arm] and rng.random() < alphas[arm]:
            n += 1
        selector.update(arm, [n], selector.gammas[arm])
        tokens, seconds = tokens + 1 + n, seconds + costs[arm]
        arms.append(arm)
        ratios.append(tokens / (seconds / costs[-1]))
    return arms, ratios


@settings(max_examples=30, deadline=None)
@given(st.floats(0.05, 0.2), st.lists(st.floats(1.5, 3.0), min_size=1, max_size=4), st.integers(0, 10**6))
def test_a_conservative_selector_keeps_its_floor_when_no_draft_is_accepted(delta, draft_costs, seed):
    """Drafts that accept nothing yield their worst case, 1 token a step: every prefix of the call keeps 1 - δ of
    plain decoding's tokens per calibrated second (the plain arm's cost 1)."""
    selector = ThompsonSampling(seed=seed, cost_aware=True, conservative=delta)
    alphas, costs = [0.0] * (len(draft_costs) + 1), [*draft_costs, 1.0]
    arms, ratios = _simulated_call(selector, alphas, costs, 60, seed)
    assert min(ratios) >= 1 - delta - 1e-9
    assert any(arm != len(costs) - 1 for arm in arms)  # it does explore, with what the plain steps saved


@pytest.mark.parametrize("seed", range(3))
def test_unguarded_exploration_falls_below_the_floor(seed):
    """The same call without the guard: exploring three drafts that accept nothing costs more than δ = 0.1."""
    _, ratios = _simulated_call(ThompsonSampling(seed=seed, cost_aware=True), [0.0] * 4, [2.0, 2.0, 2.0, 1.0], 60)
    assert min(ratios) < 0.9


@pytest.mark.parametrize("make", [
    lambda: ThompsonSampling(seed=0, cost_aware=True, conservative=0.05),
    lambda: UCB1(exploration=0.5, cost_aware=True, conservative=0.05),
])
def test_a_conservative_selector_still_finds_the_paying_draft(make):
    """A draft accepting α = 0.9 at twice plain's step cost is found within the call and drafts most of it."""
    arms, ratios = _simulated_call(make(), [0.2, 0.9, 0.0], [2.0, 2.0, 1.0], 200)
    assert arms[100:].count(1) > 80
    assert ratios[-1] > 1.5


def test_a_proven_arm_drafts_from_a_calls_first_step():
    """Evidence kept across calls (call_memory) is a lower confidence bound above the floor: no plain steps first."""
    selector = ThompsonSampling(seed=0, cost_aware=True, call_memory=8, conservative=0.05)
    _simulated_call(selector, [0.9, 0.0], [1.5, 1.0], 100)
    arms, _ = _simulated_call(selector, [0.9, 0.0], [1.5, 1.0], 5, seed=1)
    assert arms[0] == 0


def test_an_unaffordable_choice_falls_to_the_best_affordable_arm():
    """A costly draft that accepted 6 of 7 is the selection, but too little is known of it to afford it at a call's
    first step; a cheap draft that accepts little is affordable and worth more than the plain arm: it drafts."""
    selector = ThompsonSampling(seed=0, cost_aware=True, conservative=0.05)
    selector.ensure(3, [4, 4, 0])
    selector.set_costs([2.5, 1.02, 1.0])
    selector.successes, selector.failures = [6.0, 2.0, 0.0], [1.0, 40.0, 0.0]  # α about 0.78 and 0.07
    assert selector.select() == 0  # about 3.3 tokens at cost 2.5, against 1.07 at cost 1.02 and plain's 1 at 1
    assert not selector.affordable(0)
    assert selector.affordable(1)
    assert selector.choose() == 1


def test_below_the_floor_the_plain_arm_decodes():
    """A proven draft that stops accepting takes the call below its floor: the plain arm decodes until it recovers."""
    selector = ThompsonSampling(seed=0, cost_aware=True, conservative=0.05)
    selector.ensure(2, [4, 0])
    selector.set_costs([4.0, 1.0])
    selector.successes, selector.failures = [400.0, 0.0], [10.0, 0.0]  # pessimistic tokens 4.7 for 4 seconds
    assert selector.choose() == 0
    selector.update(0, [0], 4)  # 1 token for 4 seconds: below the floor of 0.95 tokens a second
    assert not selector.affordable(0)
    assert [selector.choose() for _ in range(3)] == [1, 1, 1]


def test_conservative_must_be_a_fraction_of_a_cost_aware_selector():
    with pytest.raises(ValueError, match=r"in \[0, 1\)"):
        ThompsonSampling(cost_aware=True, conservative=1.0)
    with pytest.raises(ValueError, match="needs cost_aware=True"):
        UCB1(conservative=0.05)


@pytest.mark.parametrize("cache_implementation", ["dynamic", "static"])
def test_prompt_lookup_without_a_match_decodes_a_plain_step(target, cache_implementation):
    """The dynamic backend turns a lookup step where no row has a match into a plain step: one target column, and
    no draft token tested for α; the static backend's steps keep their shapes (the last token repeated). Greedy
    output equals stock's either way."""
    from flashspec_hf import FixedArm

    ids, mask = left_padded([[5, 6, 7, 8, 9, 10]])  # distinct tokens: nothing to match at the first step
    widths = []
    hook = target.register_forward_pre_hook(lambda _, args, kwargs: widths.append(kwargs["input_ids"].shape[1]),
                                            with_kwargs=True)
    try:
        want = target.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=10)
        stock, widths[:] = list(widths), []
        out = target.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=10, flashspec=True,
                              assistant_models=[PromptLookup()], selector=FixedArm(0),
                              cache_implementation=cache_implementation)
    finally:
        hook.remove()
    assert torch.equal(out, want)
    stats = target.flashspec_stats
    if cache_implementation == "dynamic":  # this output never repeats a token: every step is plain, as stock's
        assert stats.step_gammas == [0] * 10 and widths == stock == [6] + [1] * 9
        assert "prompt_lookup" not in stats.alpha  # no draft token tested
    else:
        assert set(stats.step_gammas) == {4}


def test_sampling_through_empty_lookup_steps_equals_the_plain_arm(target):
    """A lookup step without a match is a plain step in sampling too: with the same seed, the same tokens as the
    plain-decoding arm's (one-hot scores of no draft, then the bonus token drawn from the target's distribution)."""
    from flashspec_hf import FixedArm

    class PlainOnly(ThompsonSampling):
        def select(self) -> int:
            return self.gammas.index(0)

    ids, mask = left_padded([[5, 6, 7, 8, 9, 10]])
    kw = dict(attention_mask=mask, do_sample=True, max_new_tokens=4, flashspec=True, assistant_models=[PromptLookup()])
    torch.manual_seed(3)
    lookup = target.generate(ids, selector=FixedArm(0), **kw)
    assert target.flashspec_stats.step_gammas == [0] * 4
    torch.manual_seed(3)
    assert torch.equal(target.generate(ids, selector=PlainOnly(cost_aware=True), **kw), lookup)


@pytest.mark.parametrize("make", [
    lambda: ThompsonSampling(seed=0, cost_aware=True),
    lambda: UCB1(exploration=0.5, cost_aware=True),
])
def test_an_arm_whose_steps_draft_nothing_is_worth_a_plain_step(make):
    """Prompt lookup that never matches (every step reported with γ 0) is valued as the plain step it runs: the
    selector still finds the draft that pays (UCB1 once waited on such an arm forever), and an empty step costs the
    call plain's seconds."""
    selector = make()
    selector.ensure(3, [4, 4, 0])
    selector.begin_call()
    selector.set_costs([1.2, 2.0, 1.0])  # lookup, a draft model, plain
    rng, arms = random.Random(0), []
    for _ in range(200):
        arm = selector.choose()
        seconds = selector.call_seconds
        if arm == 0:
            selector.update(0, [0], 0)
            assert selector.call_seconds == pytest.approx(seconds - 0.2)  # charged 1.2, a plain step's 1.0 kept
        else:
            gamma = selector.gammas[arm]
            n = 0
            while n < gamma and rng.random() < 0.8:
                n += 1
            selector.update(arm, [n], gamma)
        arms.append(arm)
    assert arms[100:].count(1) > 80
    assert selector.drafting_rate(0) < 0.5 and selector.drafting_rate(1) == 1.0
