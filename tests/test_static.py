"""cache_implementation="static": the static-shape loop (no per-step sync, static caches, CUDA graphs on GPU) is
exact like the dynamic one: greedy equals stock token for token (here and, for ragged batches, every selector and
hypothesis shapes, in tests/test_greedy.py), sampling passes the chi-square gate."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from flashspec_hf import FixedArm, Hedge, PromptLookup, RoundRobin, Selector
from flashspec_hf.backends import KEEP_CURRENT_EVERY, MAX_IN_FLIGHT
from flashspec_hf.buffers import Buffers
from flashspec_hf.columns import Columns

from .conftest import assert_rows_equal_stock, left_padded, tiny_llama
from .test_distribution import ALPHA, _exact, _p_value, _sample_counts, _warpers
from .test_distribution import models  # noqa: F401  (fixture)
from .test_greedy import PROMPTS, _flash, _stock

STATIC = dict(cache_implementation="static")


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


@pytest.mark.parametrize("temperature, top_k, top_p, gamma", [(1.0, 0, 1.0, 2), (0.7, 5, 1.0, [1, 3])])
def test_joint_distribution_matches_target(models, monkeypatch, temperature, top_k, top_p, gamma):  # noqa: F811
    import flashspec_hf.integration

    target, drafts = models
    original = flashspec_hf.integration._static_cache
    monkeypatch.setattr(flashspec_hf.integration, "_static_cache", lambda kwargs: original(kwargs) or True)
    counts = _sample_counts(target, [*drafts, PromptLookup()], temperature, top_k, top_p, gamma)
    assert 0 < sum(map(sum, target.flashspec_stats.step_accepted))
    assert _p_value(counts, _exact(target, _warpers(temperature, top_k, top_p))) > ALPHA


@pytest.mark.parametrize(
    "kwargs, what",
    [
        (dict(repetition_penalty=1.3), "logits processors other than"),
        (dict(selector=Hedge()), "full-information selector"),
        (dict(return_dict_in_generate=True, output_scores=True), "scores or logits"),
    ],
)
def test_unsupported_features_raise(target, assistants, kwargs, what):
    with pytest.raises(ValueError, match=what):
        _flash(target, assistants, [PROMPTS[0]], max_new_tokens=4, **STATIC, **kwargs)


def test_a_config_changed_in_place_is_checked_again():
    """Whether a model's cache layers are standard is kept on the model (it is asked on every call that may run
    static) for its config as it is: a sliding window set afterwards is refused, not run on the kept answer."""
    from transformers import MistralConfig, MistralForCausalLM

    torch.manual_seed(0)
    config = MistralConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, sliding_window=None, pad_token_id=0)
    model = MistralForCausalLM(config).eval()
    row = PROMPTS[0]
    got = _flash(model, [model], [row], max_new_tokens=6, **STATIC)
    assert torch.equal(got[0], _stock(model, row, max_new_tokens=6))
    model.config.sliding_window = 8
    with pytest.raises(ValueError, match="sliding-window"):
        _flash(model, [model], [row], max_new_tokens=6, **STATIC)


def test_a_model_from_another_transformers_version_is_checked_again(monkeypatch):
    """The kept answer names the transformers version that gave it: a model unpickled under another version (whose
    cache layers may differ) is asked again, not run on an answer about the old version's layers."""
    import transformers
    from transformers import MistralConfig, MistralForCausalLM

    from flashspec_hf import runners

    config = MistralConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, sliding_window=8, pad_token_id=0)
    model = MistralForCausalLM(config).eval()
    assert not runners.has_standard_static_layers(model)
    described = model.__dict__["_flashspec_standard_layers"][0]
    model.__dict__["_flashspec_standard_layers"] = described, True  # an answer this version would keep as it is
    assert runners.has_standard_static_layers(model)
    monkeypatch.setattr(transformers, "__version__", "0.0.0")  # the model now runs under another version
    assert not runners.has_standard_static_layers(model)


@pytest.mark.parametrize("warper", [dict(eta_cutoff=3e-4), dict(top_h=0.5)])
def test_warpers_a_captured_step_cannot_run_are_refused(target, assistants, warper):
    """Top-h and eta check a Categorical's arguments on the host: a CUDA graph cannot capture that read."""
    ids, mask = left_padded(PROMPTS)
    with pytest.raises(ValueError, match="top-h, eta"):
        target.generate(ids, attention_mask=mask, do_sample=True, max_new_tokens=4, assistant_models=assistants,
                        flashspec=True, **warper, **STATIC)


def test_unknown_cache_implementation_raises(target, assistants):
    with pytest.raises(ValueError, match="cache_implementation='static'"):
        _flash(target, assistants, [PROMPTS[0]], max_new_tokens=4, cache_implementation="offloaded")


def test_the_gate_rejects_accept_all_in_the_static_loop(models, monkeypatch):  # noqa: F811
    """Negative control on this loop's own verification call."""
    import flashspec_hf.integration
    import flashspec_hf.decoding

    def accept_all(scores, drafts, draft_logits):
        return torch.cat([drafts, drafts[:, :1]], dim=1), torch.full((drafts.shape[0],), drafts.shape[1])

    original = flashspec_hf.integration._static_cache
    monkeypatch.setattr(flashspec_hf.integration, "_static_cache", lambda kwargs: original(kwargs) or True)
    monkeypatch.setattr(flashspec_hf.decoding, "verify", accept_all)
    target, drafts = models
    counts = _sample_counts(target, drafts, 1.0, 0, 1.0, 2)
    assert _p_value(counts, _exact(target, _warpers(1.0, 0, 1.0))) < ALPHA


class _StaleFirst(Selector):
    """Draft 1 on all steps but every ``KEEP_CURRENT_EVERY``-th, draft 0 on those: draft 0 then drafts after missing
    the ``K - 1`` steps before, where the others are kept current (as far behind as a draft model can fall when
    those steps accept every draft)."""

    def begin_call(self):
        super().begin_call()
        self.step = -1  # the call's step

    def select(self):
        self.step += 1
        return 0 if self.step % KEEP_CURRENT_EVERY == KEEP_CURRENT_EVERY - 1 else 1


@pytest.mark.parametrize("selector", [FixedArm(0), RoundRobin(), _StaleFirst()])
def test_static_loop_drafts_as_well_as_the_dynamic_loop(target, assistants, selector):
    """Same arms, same acceptance, step by step: a static-loop drafting bug (wrong feed, position or mask; a draft
    model that catches up on too few of the columns it missed) that keeps outputs exact would still lower
    acceptance."""
    kw = dict(max_new_tokens=24, num_assistant_tokens=3, selector=selector)
    rows = PROMPTS
    _flash(target, assistants, rows, cache_implementation="dynamic", **kw)
    dynamic = (target.flashspec_stats.step_arms, target.flashspec_stats.step_accepted)
    _flash(target, assistants, rows, **STATIC, **kw)
    assert (target.flashspec_stats.step_arms, target.flashspec_stats.step_accepted) == dynamic


def test_draft_models_that_do_not_draft_are_fed_on_every_kth_step_only(target, assistants, monkeypatch):
    """The keep-current forwards (the cost a pool's other draft models add to a step) run on every
    ``KEEP_CURRENT_EVERY``-th step of a call, once per draft model that did not draft it, and on no other step."""
    from flashspec_hf import backends, runners

    kinds, fed = [], []
    step = backends.StaticBackend.step
    keep_current = runners.StaticRunner.keep_current
    monkeypatch.setattr(backends.StaticBackend, "step",
                        lambda self, arm, run_step: (kinds.append(self.keeps_current), step(self, arm, run_step))[1])
    monkeypatch.setattr(runners.StaticRunner, "keep_current",
                        lambda self, *a, **k: (fed.append(len(kinds) - 1), keep_current(self, *a, **k))[1])
    _flash(target, assistants, PROMPTS[:1], max_new_tokens=24, num_assistant_tokens=3, selector=FixedArm(0), **STATIC)
    assert len(kinds) > 2 * KEEP_CURRENT_EVERY
    assert kinds == [i % KEEP_CURRENT_EVERY == KEEP_CURRENT_EVERY - 1 for i in range(len(kinds))]
    assert fed == [i for i, kept in enumerate(kinds) if kept]  # the one other draft model, on those steps


def test_a_draft_that_missed_the_most_columns_catches_up_on_all_of_them(target):
    """Two copies of the target as drafts (every draft accepted: each step commits γ + 1 columns), the first drafting
    after missing ``K - 1`` such steps: it catches up on every column it missed, so it drafts as in the dynamic loop
    and every draft is accepted; a catch-up one column short would draft from a cache with a hole."""
    import copy

    drafts = [copy.deepcopy(target), copy.deepcopy(target)]
    kw = dict(max_new_tokens=40, num_assistant_tokens=3, selector=_StaleFirst())
    rows = PROMPTS
    _flash(target, drafts, rows, cache_implementation="dynamic", **kw)
    dynamic = target.flashspec_stats.step_accepted
    _flash(target, drafts, rows, **STATIC, **kw)
    assert target.flashspec_stats.step_accepted == dynamic
    full = [n == 3 for step in dynamic for n in step]
    assert sum(full) > 0.9 * len(full), "the copies' drafts are accepted: the steps advance γ + 1 columns"


def test_kept_runners_follow_changed_weights_and_dtype(assistants):
    """Caches (and, on CUDA, graphs) kept on the model are dropped when its parameters change."""
    model = tiny_llama(layers=2, seed=4, peak=8.0)
    _flash(model, assistants, PROMPTS, max_new_tokens=8, **STATIC)
    with torch.no_grad():
        model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.flip(0))
    got = _flash(model, assistants, [PROMPTS[0]], max_new_tokens=12, **STATIC)
    assert torch.equal(got[0], _stock(model, PROMPTS[0], max_new_tokens=12))
    model.to(torch.float64)
    drafts = [a.to(torch.float64) for a in [tiny_llama(layers=1, seed=5, peak=8.0)]]
    got = _flash(model, drafts, [PROMPTS[0]], max_new_tokens=12, **STATIC)
    assert torch.equal(got[0], _stock(model, PROMPTS[0], max_new_tokens=12))


def test_static_sessions_are_kept_per_set_up_and_dropped_when_parameters_change(assistants):
    """A static call reuses the session (state buffers, caches, captured steps) kept on the target for its set-up,
    also when calls alternate between pools of other draft models; new parameter tensors, dtype or device of a draft
    model rebuild the sessions that use it, of the target every session, since a graph replays the memory it
    captured."""
    from flashspec_hf.backends import KEPT_SESSIONS

    model = tiny_llama(layers=2, seed=4, peak=8.0)

    def sessions():
        return list(model.__dict__["_flashspec_static_sessions"].values())

    _flash(model, assistants, PROMPTS, max_new_tokens=8, **STATIC)
    (first,) = sessions()
    _flash(model, assistants, PROMPTS, max_new_tokens=8, **STATIC)
    assert sessions() == [first]
    assert len(first.runners) == 1 + len(assistants), "the second call reused the first call's runners"
    _flash(model, assistants[:1], PROMPTS, max_new_tokens=8, **STATIC)  # another pool: another set-up
    _flash(model, assistants, PROMPTS, max_new_tokens=8, **STATIC)
    alone, pool = sessions()[0], sessions()[1]
    assert pool is first and len(sessions()) == 2, "alternating pools kept both sessions"
    _flash(model, assistants, PROMPTS[:2], max_new_tokens=8, **STATIC)  # another batch size: another set-up
    assert len(sessions()) == 3
    with torch.no_grad():  # a new tensor in the second draft, which only the pool uses
        assistants[1].lm_head.weight = torch.nn.Parameter(assistants[1].lm_head.weight.clone())
    _flash(model, assistants, PROMPTS, max_new_tokens=8, **STATIC)
    _flash(model, assistants[:1], PROMPTS, max_new_tokens=8, **STATIC)
    assert first not in sessions() and sessions()[-1] is alone, "rebuilt only where the draft's weights changed"
    with torch.no_grad():
        model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.flip(0))
    _flash(model, assistants, PROMPTS, max_new_tokens=8, **STATIC)
    assert len(sessions()) == 1 and not {first, alone} & set(sessions())
    for gamma in range(1, KEPT_SESSIONS + 3):
        _flash(model, assistants, PROMPTS, max_new_tokens=8, num_assistant_tokens=gamma, **STATIC)
    assert len(sessions()) == KEPT_SESSIONS


def test_compiled_forwards_are_kept_until_the_parameters_change():
    """A model's compiled forward is kept per options while its parameters and buffers stay put, and made anew when
    they change (a frozen graph holds the weights as constants)."""
    from flashspec_hf.runners import compiled_call

    model, other = tiny_llama(layers=1, seed=4), tiny_llama(layers=1, seed=5)
    first = compiled_call(model, {"backend": "eager"})
    assert compiled_call(other, {"backend": "eager"}) is not first
    assert compiled_call(model, {"backend": "eager"}) is first
    assert compiled_call(model, {"backend": "eager", "dynamic": False}) is not first
    with torch.no_grad():
        model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.clone())
    again = compiled_call(model, {"backend": "eager"})
    assert again is not first and compiled_call(model, {"backend": "eager"}) is again
    rotary = model.model.rotary_emb
    rotary.inv_freq = rotary.inv_freq.clone()  # a new buffer: graphs would read the old one's memory
    assert compiled_call(model, {"backend": "eager"}) is not again


@pytest.mark.parametrize("cache_implementation", ["dynamic", "static"])
def test_drafts_past_the_position_limit(cache_implementation):
    """GPT-2 has learned positions up to n_positions: drafts beyond the generation's end must not index past them."""
    from transformers import GPT2Config, GPT2LMHeadModel

    def gpt2(layers, seed):
        torch.manual_seed(seed)
        config = GPT2Config(vocab_size=97, n_positions=32, n_embd=32, n_layer=layers, n_head=4, pad_token_id=0,
                            eos_token_id=2, bos_token_id=1)
        model = GPT2LMHeadModel(config).eval()
        model.generation_config.pad_token_id = 0
        return model

    target, draft = gpt2(2, 0), gpt2(1, 1)
    row = [5, 17, 33, 8, 90, 41, 7, 9]
    got = _flash(target, [draft], [row], max_new_tokens=24, num_assistant_tokens=4,
                 cache_implementation=cache_implementation)
    assert torch.equal(got[0], _stock(target, row, max_new_tokens=24))


@pytest.mark.parametrize("cache_implementation", ["dynamic", "static"])
def test_rope_target_continues_past_max_position_embeddings_like_stock(cache_implementation):
    """RoPE has no position table: stock generates past ``max_position_embeddings``, and so must flashspec (positions
    were once clamped to the limit, which changed the tokens). Sharp attention makes the output position-sensitive."""
    target = tiny_llama(layers=2, seed=0, peak=8.0)
    target.config.max_position_embeddings = 32
    with torch.no_grad():
        for layer in target.model.layers:
            layer.self_attn.q_proj.weight.mul_(20)
            layer.self_attn.k_proj.weight.mul_(20)
    row = torch.randint(3, 97, (28,), generator=torch.Generator().manual_seed(3)).tolist()
    got = _flash(target, [tiny_llama(layers=1, seed=5, peak=8.0)], [row], max_new_tokens=20, num_assistant_tokens=4,
                 cache_implementation=cache_implementation)
    assert torch.equal(got[0], _stock(target, row, max_new_tokens=20))


@pytest.mark.parametrize("cache_implementation", ["dynamic", "static"])
def test_learned_positions_past_their_table_raise_like_stock(cache_implementation):
    """GPT-2 with ``n_positions=32``, 28 prompt tokens and 10 new: stock raises, so must flashspec (not return
    tokens computed at clamped positions)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=97, n_positions=32, n_embd=32, n_layer=1, n_head=4, pad_token_id=0,
                        eos_token_id=None, bos_token_id=1)
    target = GPT2LMHeadModel(config).eval()
    row = (PROMPTS[0] * 8)[:28]
    with pytest.raises(IndexError):
        _stock(target, row, max_new_tokens=10)
    with pytest.raises(IndexError):
        _flash(target, [target], [row], max_new_tokens=10, num_assistant_tokens=4,
               cache_implementation=cache_implementation)


def test_linear_attention_models_are_refused_by_the_static_loop():
    from transformers import Lfm2Config, Lfm2ForCausalLM

    config = Lfm2Config(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, full_attn_idxs=[1], pad_token_id=0,
                        eos_token_id=2, bos_token_id=1)
    model = Lfm2ForCausalLM(config).eval()
    with pytest.raises(ValueError, match="linear-attention"):
        _flash(model, [tiny_llama(layers=1, seed=5)], [PROMPTS[0]], max_new_tokens=4, **STATIC)


def test_selectors_see_their_own_choices_while_outcomes_are_in_flight():
    """The static loop reads outcomes up to 3 steps late (on CUDA): round-robin must still rotate and UCB1 try
    each arm once, from the choices already made."""
    rr = RoundRobin()
    rr.reset(3)
    assert [rr.choose() for _ in range(6)] == [0, 1, 2, 0, 1, 2]
    from flashspec_hf import UCB1

    ucb = UCB1()
    ucb.reset(3)
    assert [ucb.choose() for _ in range(4)] == [0, 1, 2, 0]  # no outcome yet: the least chosen waiting arm


@pytest.mark.parametrize("drafts, gamma", [("self", 4), ("assistants", 3)])
def test_a_call_ending_at_its_length_queues_no_step_past_its_last(target, assistants, monkeypatch, drafts, gamma):
    """Reports are read early near the length limit (:func:`~flashspec_hf.reports.may_end`): every step the static
    loop launches emits tokens (it launched ``MAX_IN_FLIGHT`` = 3 more before), yet a long call keeps
    ``MAX_IN_FLIGHT`` steps unread until then (reads that came too early would make every step wait), and the rows
    still equal stock."""
    import flashspec_hf.decoding
    from flashspec_hf.reports import StepReports

    launched, unread = [], []
    step, read = flashspec_hf.decoding.speculative_step, StepReports.read
    monkeypatch.setattr(flashspec_hf.decoding, "speculative_step", lambda *a: launched.append(a[1]) or step(*a))
    monkeypatch.setattr(StepReports, "read", lambda self, n: (read(self, n), unread.append(len(self.queue)))[0])
    models = [target] if drafts == "self" else assistants
    got = _flash(target, models, PROMPTS, max_new_tokens=40, num_assistant_tokens=gamma, eos_token_id=None, **STATIC)
    assert got.shape[1] == 40
    assert_rows_equal_stock(target, PROMPTS, got, 40)
    assert len(launched) == target.flashspec_stats.steps > 0
    assert max(unread) == MAX_IN_FLIGHT


@pytest.mark.parametrize("left, unread, ends", [
    (15, [4, 4, 4], True), (16, [4, 4, 4], False), (1, [0], True), (2, [0], False), (7, [0, 5], True),
    (8, [0, 5], False), (1, [], False), (0, [], True),
])
def test_unread_steps_may_end_a_call_when_their_most_tokens_reach_what_is_left(left, unread, ends):
    """Each unread step emits at most γ + 1 tokens a row."""
    from flashspec_hf.reports import may_end

    assert may_end(left, unread) is ends


def test_a_kept_session_reads_the_same_state_tensors_every_call(assistants, monkeypatch):
    """A captured step replays on the memory it captured: every state tensor a step reads (columns, sequences,
    limits, flags) must be the session's kept one, the same in every call of the set-up."""
    import flashspec_hf.decoding

    seen = []
    original = flashspec_hf.decoding.Stopping

    def recording(*args, **kwargs):
        stopping = original(*args, **kwargs)
        seen.append((stopping.limit, stopping.eos))
        return stopping

    monkeypatch.setattr(flashspec_hf.decoding, "Stopping", recording)
    model = tiny_llama(layers=2, seed=4, peak=8.0)
    for rows in (PROMPTS, [row[::-1] for row in PROMPTS]):  # other prompts, same shapes: the same session
        _flash(model, assistants, rows, max_new_tokens=8, **STATIC)
    (session,) = model.__dict__["_flashspec_static_sessions"].values()
    kept = session.buffers.kept
    assert all(limit is kept["stopping.limit"] and eos is kept["stopping.eos"] for limit, eos in seen)


def test_returned_sequences_outlive_the_next_call(target, assistants):
    """The kept session refills its buffers on the next call: a returned tensor must not be a view of them."""
    first = _flash(target, assistants, PROMPTS, max_new_tokens=8, **STATIC)
    kept = first.clone()
    _flash(target, assistants, [row[::-1] for row in PROMPTS], max_new_tokens=8, **STATIC)
    assert torch.equal(first, kept)


def test_a_draft_whose_weights_change_gets_a_new_session(assistants):
    model = tiny_llama(layers=2, seed=4, peak=8.0)
    draft = tiny_llama(layers=1, seed=5, peak=8.0)
    _flash(model, [draft], PROMPTS, max_new_tokens=8, **STATIC)
    draft.to(torch.float64)  # same set-up, new draft weights: the kept runner's cache no longer fits
    got = _flash(model, [draft], PROMPTS, max_new_tokens=8, **STATIC)
    assert torch.equal(got[0], _stock(model, PROMPTS[0], max_new_tokens=8))


@settings(max_examples=60, deadline=None)
@given(batch=st.integers(1, 4), prompt=st.integers(1, 6), gamma=st.integers(0, 4), data=st.data())
def test_dense_columns_hold_each_rows_committed_tokens_and_nothing_else(batch, prompt, gamma, data):
    """The static backend's layout: after any sequence of ragged steps (frozen rows included), row b's first
    length[b] columns are its prompt, then its accepted drafts and pending tokens, valid, at consecutive positions;
    the capacity bound holds (writes past it would raise). A frozen row's pending column takes each later step's
    token (never emitted), so it is left out for them."""
    max_new = data.draw(st.integers(1, 12))
    capacity = 1 + prompt + max_new + 2 * gamma  # StaticBackend.capacity off CUDA
    ids = torch.randint(0, 50, (batch, prompt))  # [B, L]
    columns = Columns(ids, None, capacity, max_new, Buffers(torch.device("cpu")), track_host_length=False,
                      lead=max(0, 2 - prompt), dense=True)
    lead = columns.start_length - prompt
    expected = [ids[b].tolist() for b in range(batch)]
    new = [0] * batch
    for _ in range(max_new):
        drafts = torch.randint(0, 50, (batch, gamma))  # [B, γ]
        columns.write_drafts(drafts)
        accepted = torch.tensor([data.draw(st.integers(0, gamma)) for _ in range(batch)])  # [B]
        output = torch.cat([drafts, torch.randint(0, 50, (batch, 1))], dim=1)  # [B, γ + 1]
        output.scatter_(1, accepted.unsqueeze(1), torch.randint(50, 60, (batch, 1)))  # the recovered / bonus token
        frozen = torch.tensor([n >= max_new for n in new])  # [B]
        columns.commit(output, accepted, gamma + 1, frozen=frozen)
        for b in range(batch):
            if not frozen[b]:
                expected[b] += output[b, : accepted[b] + 1].tolist()
                new[b] += int(accepted[b]) + 1
    for b in range(batch):
        end = int(columns.length[b])
        assert end == lead + len(expected[b])
        kept = end - int(frozen[b])
        assert columns.tokens[b, lead:kept].tolist() == expected[b][: kept - lead]
        assert bool(columns.valid[b, lead:end].all())
        positions = columns.positions[b, lead:end]
        limit = prompt - 1 + max_new
        assert positions.tolist() == [min(p, limit) for p in range(len(expected[b]))]


def test_compiled_forwards_equal_eager_ones_and_keep_their_graphs_off_module_call():
    """What CUDA's static loop captures, on the CPU: a target and an early-exit draft sharing its layers, compiled
    (compile options given) at the widths a step uses, give the eager logits; their graphs are not kept on the code of
    ``nn.Module.__call__`` or of the model's ``forward`` (transformers' decorator), whose recompile limit stock
    ``generate``'s compiled forward needs."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list
    from torch._dynamo.utils import counters

    from flashspec_hf.models import early_exit_assistants
    from flashspec_hf.runners import StaticRunner

    graphs = counters["stats"]["unique_graphs"]

    target = tiny_llama(layers=2, seed=0, peak=8.0)
    ids = torch.tensor([[5, 17, 33, 8, 90, 41, 7, 12, 60, 77, 3, 51], [12, 60, 77, 3, 51, 51, 9, 4, 4, 8, 1, 2]])
    for model in [target, *early_exit_assistants(target, (1,))]:
        logits = []
        for options in (None, {}):
            columns = Columns(ids, torch.ones_like(ids), 32, 8, Buffers(torch.device("cpu")), track_host_length=False,
                              dense=True)
            runner = StaticRunner(model, 97, 2, 32, torch.device("cpu"), options)
            runner.prefill(columns, 4)  # compiled: fed 32 columns (after an eager one that allocates the cache)
            with torch.no_grad():
                logits.append([runner.forward(columns, width, keep=1) for width in (2, 1, 5)])  # [B, 1, V] each
        for eager, compiled in zip(*logits):
            torch.testing.assert_close(compiled, eager, rtol=1e-4, atol=1e-4)
    assert counters["stats"]["unique_graphs"] > graphs, "the forwards were compiled"
    for code in (torch.nn.Module._wrapped_call_impl.__code__, type(target).forward.__code__):
        assert not _debug_get_cache_entry_list(code), f"graphs kept on {code.co_filename}:{code.co_firstlineno}"


@pytest.mark.parametrize("batch", [1, 2])
def test_a_compiled_prefill_reads_rows_as_wide_as_it_feeds(batch):
    """A compiled prefill's ``input_ids`` and ``position_ids`` have row stride = their width, whatever the capacity
    and at B = 1 too, where ``.contiguous()`` of the columns' slice kept the capacity's stride ``N`` (a one-row tensor
    counts as contiguous). Dynamo makes that stride a symbol and, on torch 2.11 with transformers 5.17, guarded on
    the width being below it: a prefill as wide as its capacity compiled every model's prefill again on the GPU (65 s
    on an H100, 2026-12-07); on this machine's versions the guard is not added, so the strides are checked."""
    from flashspec_hf.runners import StaticRunner

    capacity, fed = 96, []
    runner = StaticRunner(tiny_llama(layers=1, seed=1), 97, batch, capacity, torch.device("cpu"), {"backend": "eager"})
    compiled = runner.compiled_prefill

    def recording(**kwargs):
        fed.append([(tuple(kwargs[name].shape), kwargs[name].stride()) for name in ("input_ids", "position_ids")])
        return compiled(**kwargs)

    runner.compiled_prefill = recording
    for width in (10, 70):  # fed 64 columns, then 96: the capacity
        ids = torch.randint(3, 97, (batch, width))
        columns = Columns(ids, torch.ones_like(ids), capacity, 8, Buffers(torch.device("cpu")), track_host_length=False,
                          dense=True)
        with torch.no_grad():
            runner.prefill(columns, width)
    assert fed == [[((batch, w), (w, 1))] * 2 for w in (64, capacity)]


def test_a_draft_models_keeps_cost_no_compiled_graphs():
    """Compiled, a draft model's wide forwards in a static step keep logits of different columns: its last one to
    catch up, γ to keep current with side evidence, none without. Once the model has its graphs for one column and
    for wider ones, these add none (a graph per ``logits_to_keep`` value made 18 graphs a SmolLM2 call where 12 do,
    each compiled on a set-up's first call on the GPU); each gives the eager runner's logits, as does a forward
    keeping more columns than it feeds."""
    from flashspec_hf.runners import NO_LOGITS, StaticRunner

    graphs = []

    def counting(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    gamma, behind = 3, 2 + 2 * (3 + 1)  # the backend's `behind` for γ = 3, KEEP_CURRENT_EVERY = 3
    draft = tiny_llama(layers=1, seed=1, peak=8.0)
    ids = torch.tensor([[5, 17, 33, 8, 90, 41, 7, 12, 60, 77, 3, 51], [12, 60, 77, 3, 51, 51, 9, 4, 4, 8, 1, 2]])
    outputs, added = [], None
    for options in (None, {"backend": counting}):
        columns = Columns(ids, torch.ones_like(ids), 64, 8, Buffers(torch.device("cpu")), track_host_length=False,
                          dense=True)
        runner = StaticRunner(draft, 97, 2, 64, torch.device("cpu"), options, behind=behind, min_keep=gamma)
        with torch.no_grad():
            runner.prefill(columns, ids.shape[1] - 2)
            for width in (behind, 1, behind + gamma - 1):  # the shape families: one column, and wider
                runner.forward(columns, width, keep=1)
            before = len(graphs)
            caught = runner.catch_up(columns)  # [B, 1, V]
            drafted = runner.forward(columns, 1, keep=1)  # [B, 1, V]
            kept = runner.keep_current(columns, gamma, logits=True)  # [B, γ, V]
            none = runner.forward(columns, behind + gamma - 1, keep=NO_LOGITS)  # [B, 0, V]
            added = len(graphs) - before
            short = runner.forward(columns, 2, keep=gamma)  # [B, 2, V]: every column it feeds
        outputs.append((caught, drafted, kept, none, short))
    for eager, compiled in zip(*outputs):
        assert compiled.shape == eager.shape
        torch.testing.assert_close(compiled, eager, rtol=1e-4, atol=1e-4)
    assert outputs[1][3].shape[1] == 0 and outputs[1][4].shape[1] == 2
    assert graphs and added == 0, f"{added} more graphs"


def test_a_drafts_values_do_not_make_the_targets_graphs_symbolic():
    """Each model's compiled forward learns its own shapes: a draft whose RMSNorm epsilon differs from the target's
    (any float attribute) once made dynamo compile the target's next graph with a symbolic epsilon (shared automatic
    dynamic state), a slower graph on the GPU; the target's graphs take no float input whichever model ran before."""
    from flashspec_hf.runners import compiled_call

    floats = {}  # model name -> inputs of its graphs that are floats dynamo left unspecialised (0-d float64 tensors)

    def unspecialised(x) -> bool:
        return isinstance(x, (float, torch.SymFloat)) or (
            isinstance(x, torch.Tensor) and x.dim() == 0 and x.dtype == torch.float64)

    def recording(name):
        def backend(gm, example_inputs):
            floats.setdefault(name, []).extend(x for x in example_inputs if unspecialised(x))
            return gm.forward
        return backend

    target, draft = tiny_llama(layers=2, seed=0), tiny_llama(layers=1, seed=1)
    for module in draft.modules():
        if hasattr(module, "variance_epsilon"):
            module.variance_epsilon = 1e-5  # the target's are 1e-6
    runs = {"target": compiled_call(target, {"backend": recording("target")}),
            "draft": compiled_call(draft, {"backend": recording("draft")})}
    for name, width in [("target", 3), ("draft", 3), ("draft", 4), ("target", 4), ("target", 5)]:
        ids = torch.randint(3, 90, (1, width))
        runs[name](input_ids=ids, position_ids=torch.arange(width)[None], attention_mask=None, use_cache=False,
                   logits_to_keep=1)
    assert "target" in floats and floats["target"] == []


def test_freezing_compile_option_freezes_the_weights_into_the_graphs():
    """``CompileConfig(options={"freezing": True})`` reaches dynamo (which reads the flag when it traces, from the
    global config): the compiled forward gives the eager logits, and keeps them after the weights change in place
    (they were folded into the graph as constants), where the eager forward's change."""
    from flashspec_hf.runners import StaticRunner

    target = tiny_llama(layers=2, seed=0, peak=8.0)
    ids = torch.tensor([[5, 17, 33, 8, 90, 41, 7, 12], [12, 60, 77, 3, 51, 51, 9, 4]])
    columns = Columns(ids, torch.ones_like(ids), 32, 8, Buffers(torch.device("cpu")), track_host_length=False,
                      dense=True)
    runners = [StaticRunner(target, 97, 2, 32, torch.device("cpu"), options)
               for options in (None, {"options": {"freezing": True}})]  # eager, frozen

    def logits() -> list[torch.Tensor]:  # [B, 1, V] of columns [4, 6) from each runner
        for runner in runners:
            runner.prefill(columns, 4)
        return [runner.forward(columns, 2, keep=1) for runner in runners]

    with torch.no_grad():
        eager, frozen = logits()
        torch.testing.assert_close(frozen, eager, rtol=1e-4, atol=1e-4)
        target.model.layers[0].self_attn.q_proj.weight.mul_(3.0)
        changed, still = logits()
    assert not torch.allclose(changed, eager, rtol=1e-3, atol=1e-3), "the change moves the eager logits"
    torch.testing.assert_close(still, frozen, rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def layered():
    """A four-layer target and its early-exit drafts of 1, 2 and 3 layers (its own modules, shared)."""
    from flashspec_hf.models import early_exit_assistants

    target = tiny_llama(layers=4, seed=0, peak=8.0)
    return target, early_exit_assistants(target, (1, 2, 3))


@pytest.mark.parametrize("selector", [FixedArm(0), FixedArm(2), "round_robin", "thompson"])
def test_early_exit_drafts_read_and_write_the_targets_cache(layered, selector):
    """In the static loop an early-exit draft keeps no cache: its layers are views of the target's, and it costs
    nothing on steps it does not draft. Greedy output still equals stock row by row (ragged batch); with a
    deterministic arm order, every step accepts what the dynamic loop's drafts (each with its own cache) accept, so
    a wrong feed, offset or mask would show."""
    from flashspec_hf.runners import EarlyExitRunner

    from .conftest import assert_rows_equal_stock

    target, drafts = layered
    kw = dict(max_new_tokens=24, num_assistant_tokens=3, selector=selector)
    got = _flash(target, drafts, PROMPTS, **STATIC, **kw)
    static = (target.flashspec_stats.step_arms, target.flashspec_stats.step_accepted)
    assert_rows_equal_stock(target, PROMPTS, got, 24)
    session = next(reversed(target.__dict__["_flashspec_static_sessions"].values()))
    runners = session.runners
    for source, draft in enumerate(drafts):
        runner = runners[f"draft {source}"]
        assert isinstance(runner, EarlyExitRunner) and not runner.keeps_current
        theirs = runners["target"].cache.layers[: len(draft.model.layers)]
        drafted = source in static[0]  # arm i is source i here (one γ, no plain arm)
        for mine, target_layer in zip(runner.cache.layers, theirs, strict=True):  # the target's, once it drafted
            assert getattr(mine, "keys", None) is not None or not drafted
            assert getattr(mine, "keys", None) is None or (
                mine.keys is target_layer.keys and mine.values is target_layer.values
            )
    if selector != "thompson":  # a fresh round robin, or a fixed arm: the same arms in both loops
        _flash(target, drafts, PROMPTS, cache_implementation="dynamic", **kw)
        assert static == (target.flashspec_stats.step_arms, target.flashspec_stats.step_accepted)
    assert sum(map(sum, static[1])) > 0, "the early exits drafted tokens the target accepted"


def test_joint_distribution_with_early_exit_drafts_in_the_targets_cache(monkeypatch):
    """The chi-square gate with early-exit drafts that write the target's cache in the static loop (sampling)."""
    import flashspec_hf.integration
    from flashspec_hf.models import early_exit_assistants

    from .test_distribution import VOCAB

    target = tiny_llama(layers=3, vocab=VOCAB, seed=11, peak=6.0, eos=None)
    original = flashspec_hf.integration._static_cache
    monkeypatch.setattr(flashspec_hf.integration, "_static_cache", lambda kwargs: original(kwargs) or True)
    counts = _sample_counts(target, early_exit_assistants(target, (1, 2)), 1.0, 0, 1.0, 2)
    assert 0 < sum(map(sum, target.flashspec_stats.step_accepted))
    (session,) = target.__dict__["_flashspec_static_sessions"].values()
    assert [type(runner).__name__ for runner in session.runners.values()] == ["StaticRunner", *["EarlyExitRunner"] * 2]
    assert _p_value(counts, _exact(target, _warpers(1.0, 0, 1.0))) > ALPHA


@pytest.mark.parametrize("few_row_products", ["0", "1"])
def test_a_second_static_call_compiles_nothing(monkeypatch, few_row_products):
    """With compiled forwards and capacities rounded as on CUDA (CUDA's static loop, here on the CPU without graphs),
    every graph a set-up needs is compiled in its first call: prefills of the target and of a draft model with a
    cache of its own, early-exit and draft-model steps. A later call with longer prompts compiles nothing, in the same
    prefill bucket or in a wider one, at batch 3 and at batch 1 (prefills compile with a dynamic width; with a static
    one a wider bucket compiled a graph per model: 61 s on an H100 for SmolLM2-135M fp32 and its three drafts). With
    the CPU's few-row products on or off: compiled forwards keep stock's ``linear``, which inductor lowers (it cannot
    lower MKL's packed one)."""
    monkeypatch.setenv("FLASHSPEC_FEW_ROW_PRODUCTS", few_row_products)
    from torch._dynamo.utils import counters

    import flashspec_hf.backends
    from flashspec_hf.models import early_exit_assistants

    from .conftest import assert_rows_equal_stock

    backend = flashspec_hf.backends.StaticBackend
    monkeypatch.setattr(backend, "options_for", lambda self, model: {})
    rounded = backend.capacity
    monkeypatch.setattr(backend, "capacity", lambda self, *a: -(-rounded(self, *a) // 128) * 128)
    # heads of 64 dimensions, as SmolLM2's and TinyLlama's: the first prefill feeds as many columns
    target = tiny_llama(layers=3, seed=0, peak=8.0, hidden=256)
    drafts = [*early_exit_assistants(target, (1,)), tiny_llama(layers=1, vocab=101, seed=5, peak=8.0, hidden=256)]
    kw = dict(max_new_tokens=12, num_assistant_tokens=3, selector="round_robin", **STATIC)
    before = counters["stats"]["unique_graphs"]
    _flash(target, drafts, PROMPTS, **kw)
    graphs = counters["stats"]["unique_graphs"]
    assert graphs > before, "the forwards were compiled"
    longer = [row + row[:3] for row in PROMPTS]  # [B, L + 3]: same 64-column prefill, same capacity
    wider = [row * 10 for row in PROMPTS]  # [B, 10 L]: a 128-column prefill, same capacity
    _flash(target, drafts, PROMPTS[:1], **kw)  # batch 1, whose graphs are its own (dynamo specialises size 1)
    graphs = counters["stats"]["unique_graphs"]
    for rows in (longer, wider, longer[:1], wider[:1]):
        got = _flash(target, drafts, rows, **kw)
        assert counters["stats"]["unique_graphs"] == graphs
        assert_rows_equal_stock(target, rows, got, 12)


def test_a_replayed_prefill_computes_each_calls_own_prefill(monkeypatch):
    """On CUDA a compiled prefill is captured per shape and replayed by later calls
    (``StaticBackend._prefill_capture``). A replay is modelled here by running again the closure the shape's first
    use captured (its host values frozen, as in a graph): prompts of other lengths and tokens in the same bucket must
    give each call's own prefill, the prompt prior's window included (same ``W``, other columns), and decode like
    stock."""
    import flashspec_hf.backends
    from flashspec_hf import ThompsonSampling
    from flashspec_hf.backends import clear_static_sessions

    from .conftest import assert_rows_equal_stock

    backend = flashspec_hf.backends.StaticBackend
    monkeypatch.setattr(backend, "options_for", lambda self, model: {})  # compiled forwards, as on CUDA
    rounded = backend.capacity
    monkeypatch.setattr(backend, "capacity", lambda self, *a: -(-rounded(self, *a) // 128) * 128)
    target = tiny_llama(layers=2, seed=0, peak=8.0)
    drafts = [tiny_llama(layers=1, vocab=101, seed=5, peak=8.0)]  # a cache of its own: a prefill of its own
    calls = [[[3 + (7 * i) % 90 for i in range(40)], [5 + (3 * i) % 80 for i in range(36)]],
             [[4 + (5 * i) % 90 for i in range(45)], [9 + (11 * i) % 80 for i in range(38)]]]  # W = 32, other starts
    def selector():  # reads the prompt window
        return ThompsonSampling(discount=0.99, cost_aware=True, call_memory=8, prompt_weight=16)

    def decode() -> list:
        prefills = []
        for rows in calls:
            got = _flash(target, drafts, rows, max_new_tokens=8, selector=selector(), **STATIC)
            assert_rows_equal_stock(target, rows, got, 8)
            (session,) = target.__dict__["_flashspec_static_sessions"].values()
            prefills.append([runner.prompt_argmax.clone() for runner in session.runners.values()])
        return prefills

    launched = decode()
    clear_static_sessions(target)
    first_runs = {}
    monkeypatch.setattr(backend, "_prefill_capture",
                        lambda self, key, model: lambda shape, run: first_runs.setdefault((key, *shape), run)())
    replayed = decode()
    assert sorted(first_runs) == [("draft 0", 64, 32), ("target", 64, 32)], "the second call replayed both"
    for want, got in zip(launched, replayed, strict=True):
        assert all(torch.equal(w, g) for w, g in zip(want, got, strict=True))
