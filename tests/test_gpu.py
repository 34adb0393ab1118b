"""On CUDA: the Triton kernel equals the reference at real vocabulary sizes, with no device-to-host sync."""

import pytest
import torch

from flashspec_hf.kernels.philox import philox_noise
from flashspec_hf.kernels.reference import verify_greedy_reference, verify_sampling_reference
from flashspec_hf.verification import verify

from .conftest import assert_rows_equal_stock, left_padded, tiny_llama, two_token_law_p_value

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


@pytest.mark.parametrize("vocab", [32_000, 49_152, 128_256, 262_144])
@pytest.mark.parametrize("batch, gamma", [(1, 4), (8, 8), (64, 4)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kernel_matches_reference_on_cuda(vocab, batch, gamma, dtype):
    from flashspec_hf.kernels.rejection_sampler import verify_triton

    g = torch.Generator(device="cuda").manual_seed(vocab + batch)
    target = (torch.randn(batch, gamma + 1, vocab, device="cuda", generator=g) * 4).to(dtype)
    draft = (0.8 * target[:, :-1].float() + torch.randn(batch, gamma, vocab, device="cuda", generator=g)).to(dtype)
    tokens = torch.multinomial(draft.float().softmax(-1).view(-1, vocab), 1, generator=g).view(batch, gamma)
    seed = torch.randint(2**63 - 1, (1,), device="cuda", generator=g)
    assert [t.equal(r) for t, r in zip(verify_triton(target, tokens), verify_greedy_reference(target, tokens))] == [1, 1]
    got = verify_triton(target, tokens, draft, seed)
    want = verify_sampling_reference(target, tokens, draft, *philox_noise(seed, batch, gamma, vocab))
    assert torch.equal(got[1], want[1]) and torch.equal(got[0], want[0])


def test_kernel_two_token_law_chi_square_on_cuda():
    """The kernel's in-kernel Philox draws and two-level race on the GPU: the joint law of two output tokens over
    20,000 rows is the target's (chi-square, α = 0.01; the gate's power is shown on the CPU, where a sampler that
    skips verification fails it). Race tiles of 4 columns over V = 8, with residual mass in both tiles."""
    from flashspec_hf.kernels.rejection_sampler import verify_triton

    torch.manual_seed(4321)
    g = torch.Generator(device="cuda").manual_seed(4321)
    p_logits = torch.tensor([2.0, 1.0, 0.5, 0.0, 1.5, -1.0, 0.3, float("-inf")], device="cuda")
    q_logits = torch.tensor([0.5, 0.0, 0.0, 1.0, 0.0, 0.5, 0.5, 0.5], device="cuda")  # residual over 0, 1, 2 and 4

    def step(target, tokens, draft):
        seed = torch.randint(2**63 - 1, (1,), device="cuda", generator=g)
        return verify_triton(target.contiguous(), tokens, draft.contiguous(), seed, race_tile=4)[0]

    assert two_token_law_p_value(step, p_logits, q_logits, 20_000) > 0.01


@pytest.mark.parametrize("sampling", [False, True])
def test_verification_does_not_sync(sampling):
    batch, gamma, vocab = 4, 4, 49_152
    target = torch.randn(batch, gamma + 1, vocab, device="cuda")
    draft = torch.randn(batch, gamma, vocab, device="cuda") if sampling else None
    tokens = torch.randint(0, vocab, (batch, gamma), device="cuda")
    verify(target, tokens, draft)  # compile outside the check
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        verify(target, tokens, draft)
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.parametrize("cache_implementation", ["dynamic", None])  # None: the static loop, CUDA's default
def test_greedy_engine_on_cuda_equals_stock(cache_implementation):
    target = tiny_llama(layers=2, seed=0, peak=8.0).cuda()
    drafts = [tiny_llama(layers=1, seed=1, peak=8.0).cuda(), tiny_llama(layers=1, vocab=101, seed=5, peak=8.0).cuda()]
    rows = [[5, 17, 33, 8, 90, 41, 7], [12, 60], [77, 3, 51, 51, 9]]
    ids, mask = left_padded(rows)
    out = target.generate(ids.cuda(), attention_mask=mask.cuda(), max_new_tokens=24, do_sample=False,
                          assistant_models=drafts, flashspec=True, cache_implementation=cache_implementation)
    assert_rows_equal_stock(target, rows, out[:, ids.shape[1]:], 24)


def _static_models():
    """A target and three drafts: an early exit sharing its first layer (it reads and writes the target's cache), a
    copy of that layer (its own cache), an unrelated draft with a padded vocabulary."""
    from flashspec_hf.models import early_exit_assistants

    target = tiny_llama(layers=2, seed=0, peak=8.0).cuda()
    copy = tiny_llama(layers=1, seed=0, peak=8.0)
    copy.load_state_dict(target.state_dict(), strict=False)
    drafts = [copy.cuda(), tiny_llama(layers=1, vocab=101, seed=5, peak=8.0).cuda()]
    return target, [*early_exit_assistants(target, (1,)), *drafts]


@pytest.mark.parametrize("disable_compile", [False, True])
def test_static_engine_with_cuda_graphs_equals_stock(disable_compile):
    """The captured forwards of the target and the draft models are compiled by inductor (default) or eager
    (disable_compile=True); the early exit reads and writes the target's cache inside the graphs."""
    from flashspec_hf import PromptLookup, RoundRobin
    from flashspec_hf.runners import EarlyExitRunner

    target, drafts = _static_models()
    rows = [[5, 17, 33, 8, 90, 41, 7], [12, 60], [77, 3, 51, 51, 9]]
    ids, mask = left_padded(rows)
    for call in range(2):  # the second call replays the graphs the first captured
        out = target.generate(ids.cuda(), attention_mask=mask.cuda(), max_new_tokens=24, do_sample=False,
                              assistant_models=[*drafts, PromptLookup()], selector=RoundRobin(),
                              num_assistant_tokens=[2, 4], cache_implementation="static", flashspec=True,
                              disable_compile=disable_compile)
        assert_rows_equal_stock(target, rows, out[:, ids.shape[1]:], 24)
    (session,) = target.__dict__["_flashspec_static_sessions"].values()
    assert session.graphs, "steps were captured as CUDA graphs"
    assert [runner.compiled is None for runner in session.runners.values()] == [disable_compile] * 4
    assert [type(runner) is EarlyExitRunner for runner in session.runners.values()] == [False, True, False, False]


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_static_engine_on_a_gpu_that_is_not_the_current_one_equals_stock():
    """Models on cuda:1 while cuda:0 is current: steps and prefills are captured on cuda:1 (a graph captured on a
    stream of cuda:0 records none of cuda:1's kernels, and its replays would do nothing)."""
    from flashspec_hf import PromptLookup, RoundRobin

    target = tiny_llama(layers=2, seed=0, peak=8.0).to("cuda:1")
    drafts = [tiny_llama(layers=1, seed=5, peak=8.0).to("cuda:1"), PromptLookup()]
    rows = [[5, 17, 33, 8, 90, 41, 7], [12, 60], [77, 3, 51, 51, 9]]
    ids, mask = left_padded(rows)
    with torch.cuda.device(0):
        for call in range(3):  # the later calls replay the graphs the first captured
            out = target.generate(ids.to("cuda:1"), attention_mask=mask.to("cuda:1"), max_new_tokens=24,
                                  do_sample=False, assistant_models=drafts, selector=RoundRobin(),
                                  num_assistant_tokens=3, cache_implementation="static", flashspec=True)
            assert_rows_equal_stock(target, rows, out[:, ids.shape[1]:], 24)
    (session,) = target.__dict__["_flashspec_static_sessions"].values()
    assert session.graphs and session.prefills, "steps and prefills were captured as CUDA graphs"


def test_arm_costs_are_timed_as_replays_of_captured_forwards(monkeypatch):
    """A cost-aware call on the static backend times its arm costs as CUDA-graph replays: two captures per timed job
    (the job, the keep-current forwards on the side stream inside it, keeping logits for the side evidence, then its
    rewind; and the rewind alone), so the output is still stock's and every arm costs a positive time (this fails if
    the calibration launched its forwards from the host)."""
    from flashspec_hf import SELECTORS, PromptLookup, costs

    captured, capture, jobs, timed = [], costs._captured, [], costs.forward_seconds
    monkeypatch.setattr(costs, "_captured",
                        lambda work, pool: captured.append(torch.cuda.current_device()) or capture(work, pool))
    monkeypatch.setattr(costs, "forward_seconds", lambda *args: jobs.append(len(args[0])) or timed(*args))
    target, drafts = _static_models()
    target.__dict__.pop("_flashspec_arm_costs", None)
    rows = [[5, 17, 33, 8, 90, 41, 7], [12, 60], [77, 3, 51, 51, 9]]
    ids, mask = left_padded(rows)
    selector = SELECTORS["cost_aware_discounted_thompson"]()
    out = target.generate(ids.cuda(), attention_mask=mask.cuda(), max_new_tokens=24, do_sample=False,
                          assistant_models=[*drafts, PromptLookup()], selector=selector,
                          cache_implementation="static", flashspec=True)
    assert_rows_equal_stock(target, rows, out[:, ids.shape[1]:], 24)
    assert jobs and captured == [target.device.index] * 2 * sum(jobs)
    assert all(cost > 0 for cost in selector.costs)


def test_static_engine_with_the_prompt_prior_equals_stock():
    """A selector reading the prompt: the compiled static prefill keeps the logits of the window's columns
    (their count W changes with the prompt's length between calls) and every draft guesses them; output stays equal
    to stock's. Each prompt set comes three times in other tokens: its prefills are launched (compiled), then
    captured, then replayed on the third prompts, where each model's guesses equal a fresh session's."""
    from flashspec_hf import SELECTORS, PromptLookup
    from flashspec_hf.backends import clear_static_sessions

    target, drafts = _static_models()
    selector = SELECTORS["cost_aware_discounted_thompson"]()
    selector.prompt_weight = 16.0
    first = [[[3 + (7 * i) % 90 for i in range(40)], [5 + (3 * i) % 80 for i in range(10)]],
             [[5, 17, 33, 8, 90, 41, 7, 11, 60, 61, 62, 63], [12, 60]]]
    calls = [[[(t * k) % 94 + 3 for t in row] for row in rows] for k in (1, 13, 29) for rows in first]

    def guesses(rows) -> list[torch.Tensor]:  # each runner's greedy tokens over the prompt window
        ids, mask = left_padded(rows)
        out = target.generate(ids.cuda(), attention_mask=mask.cuda(), max_new_tokens=24, do_sample=False,
                              assistant_models=[*drafts, PromptLookup()], selector=selector,
                              cache_implementation="static", flashspec=True)
        assert_rows_equal_stock(target, rows, out[:, ids.shape[1]:], 24)
        (session,) = target.__dict__["_flashspec_static_sessions"].values()
        return [r.prompt_argmax.clone() for r in session.runners.values() if r.prompt_argmax is not None]

    replayed = [guesses(rows) for rows in calls]
    (session,) = target.__dict__["_flashspec_static_sessions"].values()
    keys = [(key, 64, w) for key in ("draft 1", "draft 2", "target") for w in (10, 32)]
    assert sorted(session.prefills) == keys, "each model's prefill of each shape was captured"
    for rows, got in zip(calls[-2:], replayed[-2:]):
        clear_static_sessions(target)
        want = guesses(rows)
        assert len(got) == 3 and all(torch.equal(g, w) for g, w in zip(got, want, strict=True))


def test_keep_current_forwards_run_beside_the_target_and_join_before_the_commit(monkeypatch):
    """Draft models that did not draft are kept current on the session's side stream, in the captured steps too, each
    forward delayed on the GPU (a sleep kernel captured before it): a commit that did not wait for them would rewind
    their runners under them and corrupt their caches. Greedy output cannot show that (any drafts give stock's
    tokens), so every step's accepted counts must equal those of the same calls with the forwards in line. At B = 3
    the pool has mixed arms, whose prompt lookup runs beside their draft model's forwards (delayed too), in line in
    the second calls: a lookup read before it was written would change their drafts, hence the counts."""
    from flashspec_hf import PromptLookup, RoundRobin
    from flashspec_hf.backends import StaticBackend
    from flashspec_hf.runners import StaticRunner

    streams, lookups, keep_current, lookup = [], [], StaticRunner.keep_current, PromptLookup.lookup

    def delayed(self, columns, gamma, logits=False):
        streams.append(torch.cuda.current_stream())
        torch.cuda._sleep(2_000_000)  # about a millisecond
        return keep_current(self, columns, gamma, logits=logits)

    def delayed_lookup(self, buffer, ends, gamma):
        lookups.append(torch.cuda.current_stream())
        torch.cuda._sleep(2_000_000)
        return lookup(self, buffer, ends, gamma)

    monkeypatch.setattr(StaticRunner, "keep_current", delayed)
    monkeypatch.setattr(PromptLookup, "lookup", delayed_lookup)
    rows = [[5, 17, 33, 8, 90, 41, 7], [12, 60], [77, 3, 51, 51, 9]]
    ids, mask = left_padded(rows)

    def calls() -> tuple[list, list, torch.cuda.Stream]:
        target, drafts = _static_models()
        outputs, accepted = [], []
        for _ in range(3):  # eager steps, captures, replays
            out = target.generate(ids.cuda(), attention_mask=mask.cuda(), max_new_tokens=24, do_sample=False,
                                  assistant_models=[*drafts, PromptLookup()], selector=RoundRobin(),
                                  cache_implementation="static", flashspec=True)
            assert_rows_equal_stock(target, rows, out[:, ids.shape[1]:], 24)
            outputs.append(out.cpu())
            accepted.append(target.flashspec_stats.step_accepted)
        (session,) = target.__dict__["_flashspec_static_sessions"].values()
        assert session.graphs
        return outputs, accepted, session.side

    beside, beside_accepted, side = calls()
    assert streams and all(stream == side for stream in streams)
    assert side in lookups, "the mixed arms' lookups ran on the side stream"
    streams.clear()
    lookups.clear()
    monkeypatch.setattr(StaticBackend, "side_stream", None)
    in_line, in_line_accepted, unused_side = calls()
    assert streams and all(stream != unused_side for stream in streams)
    assert lookups and unused_side not in lookups
    assert all(torch.equal(a, b) for a, b in zip(beside, in_line, strict=True))
    assert beside_accepted == in_line_accepted


def test_first_calls_capture_every_arm_then_switches_only_replay():
    """A session's first calls draft with each arm that has no captured step yet of the next step's kind (keeping
    the other drafts current or not; its eager step, then its capture), so a later call captures nothing, whichever
    arms its selector picks; output stays equal to stock's."""
    from flashspec_hf import SELECTORS, FixedArm, PromptLookup
    from flashspec_hf.backends import KEEP_CURRENT_EVERY

    target, drafts = _static_models()
    selector = SELECTORS["cost_aware_discounted_thompson"]()
    rows = [[5, 17, 33, 8, 90, 41, 7], [12, 60]]
    ids, mask = left_padded(rows)
    for call in range(8):  # 8 arms, 2 kinds of step: the last kind comes on every third step
        out = target.generate(ids.cuda(), attention_mask=mask.cuda(), max_new_tokens=32, do_sample=False,
                              assistant_models=[*drafts, PromptLookup()], selector=selector,
                              cache_implementation="static", flashspec=True)
        assert_rows_equal_stock(target, rows, out[:, ids.shape[1]:], 32)
    (session,) = target.__dict__["_flashspec_static_sessions"].values()
    kinds = {True} if KEEP_CURRENT_EVERY == 1 else {False, True}
    assert set(session.graphs) == {(arm, kind) for arm in range(selector.num_arms) for kind in kinds}, \
        "every arm (the plain one too) was captured, for both kinds of step"
    assert sorted(key[0] for key in session.prefills) == ["draft 1", "draft 2", "target"], "and every prefill"
    assert target.flashspec_stats.warmup_seconds == 0, "the last call captured nothing"
    target, drafts = _static_models()  # a fixed arm warms up only itself
    target.generate(ids.cuda(), attention_mask=mask.cuda(), max_new_tokens=16, do_sample=False, flashspec=True,
                    assistant_models=[*drafts, PromptLookup()], selector=FixedArm(1), cache_implementation="static")
    (session,) = target.__dict__["_flashspec_static_sessions"].values()
    assert {arm for arm, _ in session.graphs} == {1}


def test_calls_alternating_between_pools_keep_their_sessions_and_compiled_forwards():
    """Calls that alternate between pools of other draft models (a draft alone, the whole pool) keep both sessions
    and every model's compiled forwards: once each has run, a call captures and compiles nothing (on the H100 on
    2026-12-07, before 56955ff, every such call dropped them all and recompiled, about 10 s a call)."""
    from torch._dynamo.utils import counters

    from flashspec_hf import FixedArm, PromptLookup

    target, drafts = _static_models()
    rows = [[5, 17, 33, 8, 90, 41, 7], [12, 60]]
    ids, mask = left_padded(rows)
    pools = {"alone": ([drafts[1]], 0), "pool": ([*drafts, PromptLookup()], 1)}  # the copy of the first layer

    def call(name: str) -> None:
        models, arm = pools[name]
        out = target.generate(ids.cuda(), attention_mask=mask.cuda(), max_new_tokens=16, do_sample=False,
                              flashspec=True, assistant_models=models, selector=FixedArm(arm),
                              cache_implementation="static")
        assert_rows_equal_stock(target, rows, out[:, ids.shape[1]:], 16)

    for name in ("alone", "pool", "alone", "pool"):  # each set-up's first calls compile and capture
        call(name)
    graphs = counters["stats"]["unique_graphs"]
    for name in ("alone", "pool", "alone"):
        call(name)
        assert target.flashspec_stats.warmup_seconds == 0, f"{name}: the call captured nothing"
    assert counters["stats"]["unique_graphs"] == graphs, "and compiled nothing"
    assert len(target.__dict__["_flashspec_static_sessions"]) == 2


@pytest.mark.parametrize("do_sample", [False, True])
def test_static_steps_do_not_sync(monkeypatch, do_sample):
    """Every step of the static loop is enqueued with no device-to-host synchronisation (CUDA graphs replayed), prompt
    lookup and the mixed arms in the pool, with the default selector (side evidence gathered when greedy)."""
    import contextlib

    import flashspec_hf.decoding
    from flashspec_hf import SELECTORS, PromptLookup

    target, drafts = _static_models()
    ids = torch.tensor([[5, 17, 33, 8, 90, 41, 7], [77, 3, 51, 51, 9, 4, 4]]).cuda()
    kwargs = dict(max_new_tokens=32, do_sample=do_sample, assistant_models=[*drafts, PromptLookup()],
                  num_assistant_tokens=3, selector=SELECTORS["cost_aware_discounted_thompson"](),
                  cache_implementation="static", flashspec=True, eos_token_id=list(range(200, 216)))  # 16 EOS ids (never drawn)
    target.generate(ids, **kwargs)  # captures the graphs
    steps = []

    @contextlib.contextmanager
    def no_sync():
        torch.cuda.set_sync_debug_mode("error")
        try:
            yield
        finally:
            torch.cuda.set_sync_debug_mode("default")
        steps.append(1)

    monkeypatch.setattr(flashspec_hf.decoding, "_step_guard", no_sync)
    target.generate(ids, **kwargs)
    assert len(steps) >= 4


def test_side_evidence_in_captured_steps_equals_the_oracle(monkeypatch):
    """Side evidence gathered inside CUDA graphs, the guesses written on the side stream: four calls with one
    selector (eager steps, captures, replays), every step's evidence equal to the oracle's (tests/test_evidence.py)."""
    from .test_evidence import _Recording, check_side_evidence_against_oracle, models

    target, drafts = models()
    check_side_evidence_against_oracle(target.cuda(), [d.cuda() for d in drafts], _Recording(0), monkeypatch, calls=4)


def test_side_evidence_is_scored_beside_the_step_end_and_joins_the_step(monkeypatch):
    """The scoring runs on the session's side stream (forked after verification, beside the cut, append and commit),
    in captured steps too, delayed on the GPU (a sleep kernel captured before it): a report read before it joined the
    step would hold another step's counts, or none, so every step's evidence must still equal the oracle's."""
    from flashspec_hf.evidence import SideEvidence

    from .test_evidence import _Recording, check_side_evidence_against_oracle, models

    streams, score = [], SideEvidence.score

    def delayed(self, *args):
        streams.append(torch.cuda.current_stream())
        torch.cuda._sleep(2_000_000)  # about a millisecond
        return score(self, *args)

    monkeypatch.setattr(SideEvidence, "score", delayed)
    target, drafts = models()
    check_side_evidence_against_oracle(target.cuda(), [d.cuda() for d in drafts], _Recording(0), monkeypatch, calls=3)
    (session,) = target.__dict__["_flashspec_static_sessions"].values()
    assert streams and all(stream == session.side for stream in streams)


@pytest.mark.parametrize("prompt_prior", [False, True])
@pytest.mark.parametrize("cache_implementation", [None, "static"])
def test_target_split_over_gpu_and_cpu_with_assistants_on_both(tmp_path, cache_implementation, prompt_prior):
    """accelerate places the target's first layer on cuda:0 and the rest (with the head) on the CPU; one assistant
    sits on the GPU, one on the CPU. Greedy output equals stock generate on the same split target. With the prompt
    prior, the prefill keeps the window's logits through a slice (the map names two devices; accelerate runs the
    CPU-mapped modules on cuda:0 with their weights offloaded) and every draft is scored."""
    from transformers import AutoModelForCausalLM

    from flashspec_hf import RoundRobin, ThompsonSampling

    target, drafts = _static_models()
    target.cpu().save_pretrained(tmp_path / "target")
    device_map = {"model.embed_tokens": 0, "model.layers.0": 0, "model.layers.1": "cpu", "model.norm": "cpu",
                  "model.rotary_emb": "cpu", "lm_head": "cpu"}
    split = AutoModelForCausalLM.from_pretrained(tmp_path / "target", device_map=device_map)
    class Recording(ThompsonSampling):
        def prior(self, successes, trials):
            self.trials = trials

    selector = Recording(prompt_weight=16) if prompt_prior else RoundRobin()
    rows = [[5, 17, 33, 8, 90, 41, 7], [12, 60]]
    ids, mask = left_padded(rows)
    out = split.generate(ids.cuda(), attention_mask=mask.cuda(), max_new_tokens=20, do_sample=False,
                         assistant_models=[drafts[0], drafts[1].cpu()], flashspec=True,
                         selector=selector, cache_implementation=cache_implementation)
    assert_rows_equal_stock(split, rows, out[:, ids.shape[1]:], 20)
    if prompt_prior:
        assert min(selector.trials) > 0, "every draft was scored on the prompt"


@pytest.mark.parametrize("cache_implementation", [None, "static"])
def test_nf4_target_equals_stock(tmp_path, cache_implementation):
    """A bitsandbytes NF4 target (the paper's configuration), fp32 compute: greedy output equals stock."""
    pytest.importorskip("bitsandbytes")
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    target, drafts = _static_models()
    target.cpu().save_pretrained(tmp_path / "target")
    nf4 = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.float32)
    quantized = AutoModelForCausalLM.from_pretrained(tmp_path / "target", quantization_config=nf4, device_map={"": 0})
    rows = [[5, 17, 33, 8, 90, 41, 7], [12, 60]]
    ids, mask = left_padded(rows)
    out = quantized.generate(ids.cuda(), attention_mask=mask.cuda(), max_new_tokens=20, do_sample=False,
                             assistant_models=drafts, flashspec=True, cache_implementation=cache_implementation)
    assert_rows_equal_stock(quantized, rows, out[:, ids.shape[1]:], 20)


def test_cuda_default_falls_back_to_the_dynamic_loop_when_a_feature_needs_it():
    """Repetition penalty is prefix-dependent: without cache_implementation, flashspec quietly uses its dynamic
    loop, which supports it, and stays exact."""
    target, drafts = _static_models()
    ids = torch.tensor([[5, 17, 33, 8, 90, 41, 7]]).cuda()
    kw = dict(max_new_tokens=20, do_sample=False, repetition_penalty=1.3)
    out = target.generate(ids, assistant_models=drafts, flashspec=True, **kw)
    assert torch.equal(out, target.generate(ids, **kw))
    assert "_flashspec_static_sessions" not in target.__dict__


@pytest.mark.parametrize("do_sample", [False, True])
def test_static_loop_under_default_device_cuda(do_sample):
    """``torch.set_default_device("cuda")`` (a notebook and gpt-fast habit): host-side buffers (pinned report copies,
    cache offsets) are created on explicit devices, so CUDA's default loop works and equals stock (issue 13 item 6;
    sampling with top_k=1 is deterministic)."""
    from flashspec_hf import PromptLookup

    rows = [[5, 17, 33, 8, 90, 41, 7], [12, 60], [77, 3, 51, 51, 9]]
    kw = dict(max_new_tokens=24, do_sample=do_sample, top_k=1)
    torch.set_default_device("cuda")
    try:
        target, drafts = _static_models()
        ids, mask = left_padded(rows)
        out = target.generate(ids, attention_mask=mask, assistant_models=[*drafts, PromptLookup()], flashspec=True,
                              **kw)
    finally:
        torch.set_default_device(None)
    assert "_flashspec_static_sessions" in target.__dict__, "the static loop ran"
    assert_rows_equal_stock(target, rows, out[:, ids.shape[1]:], 24)
