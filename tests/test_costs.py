"""Cost-aware selection: calibrated arm costs, the plain-decoding arm, and seeded calls that repeat."""

import contextlib

import pytest
import torch

import flashspec_hf
from flashspec_hf import SELECTORS, PromptLookup

from .conftest import left_padded, tiny_llama

ROWS = [[5, 17, 33, 8, 90, 41, 7], [12, 60], [77, 3, 51, 51, 9]]


@pytest.mark.parametrize("cache_implementation", ["dynamic", "static"])
@pytest.mark.parametrize("selector", sorted(SELECTORS))
def test_seeded_sampling_calls_repeat_for_every_selector(target, assistants, selector, cache_implementation):
    """torch.manual_seed before each call: four identical sampling calls give one output, for every selector (the
    cost-aware ones read time only through the calibration, which is kept; reports are read at a fixed lag)."""
    if cache_implementation == "static" and SELECTORS[selector]().full_information:
        pytest.skip("the static backend refuses full-information selectors")
    ids, mask = left_padded(ROWS)
    outputs = []
    for _ in range(4):
        torch.manual_seed(7)
        outputs.append(target.generate(
            ids, attention_mask=mask, do_sample=True, temperature=1.0, max_new_tokens=16, selector=selector,
            assistant_models=[*assistants, PromptLookup()], flashspec=True, num_assistant_tokens=[2, 4],
            cache_implementation=cache_implementation,
        ))
    assert all(torch.equal(out, outputs[0]) for out in outputs[1:])


def test_costs_are_calibrated_once_per_set_up(target, assistants):
    ids, mask = left_padded(ROWS)
    kw = dict(attention_mask=mask, max_new_tokens=4, flashspec=True, selector="cost_aware_ucb1")
    target.__dict__.pop("_flashspec_arm_costs", None)
    target.generate(ids, assistant_models=assistants, **kw)
    first = target.flashspec_stats.setup_seconds
    kept = dict(target.__dict__["_flashspec_arm_costs"])
    target.generate(ids, assistant_models=assistants, **kw)
    assert target.__dict__["_flashspec_arm_costs"] == kept and len(kept) == 1
    target.generate(ids[:1], attention_mask=mask[:1], max_new_tokens=4, flashspec=True, selector="cost_aware_ucb1",
                    assistant_models=assistants)  # another batch size: another set-up
    assert len(target.__dict__["_flashspec_arm_costs"]) == 2
    assert first > 0


def test_the_plain_arm_wins_when_drafts_cannot_pay(target, monkeypatch):
    """A draft that never agrees with the target costs time and yields nothing: the cost-aware selector settles on
    plain decoding (one target token per step), and the output is still stock's. The costs are set (a drafted step
    five plain ones): a tiny model's timings on a busy CPU are too noisy to test the choice with."""
    import flashspec_hf.decoding

    monkeypatch.setattr(flashspec_hf.decoding, "arm_costs", lambda target, sources, arms, *_, **__: [
        1.0 if gamma == 0 else 5.0 for _, gamma in arms
    ])
    contrary = tiny_llama(layers=1, seed=11, peak=8.0)
    with torch.no_grad():
        contrary.lm_head.weight.copy_(-target.lm_head.weight[: contrary.lm_head.weight.shape[0]])
    ids, mask = left_padded(ROWS[:1])
    out = target.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=40, assistant_models=[contrary],
                          flashspec=True, selector="cost_aware_ucb1", num_assistant_tokens=4)
    stats = target.flashspec_stats
    assert stats.arm_names == ["assistant_0", "plain"]
    assert stats.arm_share["plain"] > 0.8
    want = target.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=40)
    assert torch.equal(out, want)


def test_plain_steps_run_as_many_target_forwards_as_stock(target, assistants):
    """The dynamic backend's prefill feeds the pending column too and holds its logits: a call whose every step is
    plain runs stock generate's target forwards exactly (one prefill, then one per further token), with stock's
    output, after the arm costs' timing (first call) and with it kept (second call)."""

    class PlainOnly(flashspec_hf.ThompsonSampling):
        def select(self) -> int:
            return self.gammas.index(0)

    ids, mask = left_padded(ROWS[:1])
    forwards = []
    hook = target.register_forward_pre_hook(lambda *_: forwards.append(1))
    try:
        want = target.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=12)
        stock = len(forwards)
        target.__dict__.pop("_flashspec_arm_costs", None)
        for _ in range(2):
            forwards.clear()
            out = target.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=12, flashspec=True,
                                  assistant_models=assistants, selector=PlainOnly(cost_aware=True))
            assert torch.equal(out, want)
    finally:
        hook.remove()
    assert target.flashspec_stats.arm_share["plain"] == 1.0
    assert stock == 12 and len(forwards) == stock


def test_selectors_without_cost_get_no_plain_arm(target, assistants):
    ids, mask = left_padded(ROWS[:1])
    target.generate(ids, attention_mask=mask, max_new_tokens=4, flashspec=True, selector="thompson",
                    assistant_models=assistants)
    assert "plain" not in target.flashspec_stats.arm_names


def test_set_costs_rejects_wrong_lengths_and_non_positive_times():
    selector = flashspec_hf.ThompsonSampling(cost_aware=True)
    selector.reset(2)
    with pytest.raises(ValueError, match="2 positive step times"):
        selector.set_costs([1.0])
    with pytest.raises(ValueError, match="2 positive step times"):
        selector.set_costs([1.0, 0.0])


def test_a_slow_moment_during_calibration_costs_one_round_of_every_forward(monkeypatch):
    """Forward seconds are each job's fastest over interleaved rounds: a slow stretch of the machine (here every
    forward of three rounds out of five, 10x) does not reach the table; jobs are timed alternately, each round
    starting one job later, not one job after another; each runner is rewound to where it stood."""
    from flashspec_hf import costs

    clock, order = [0.0], []
    slow = range(2 * costs.WARM_UPS + 1, 2 * (costs.WARM_UPS + costs.REPEATS - 2) + 1)  # all but 2 timed rounds

    class Runner(_Timed):
        def forward(self, columns, width, keep):
            order.append(self.name)
            clock[0] += self.seconds * (10 if len(order) in slow else 1)
            self.seen += width

    monkeypatch.setattr(costs.time, "perf_counter", lambda: clock[0])
    target, draft = Runner("target", 0.5, 7), Runner("draft", 0.1, 6)
    jobs = [(target, 5, 5, ()), (draft, 1, 1, ())]
    assert costs.forward_seconds(jobs, columns=None) == pytest.approx([0.5, 0.1])
    rounds = costs.WARM_UPS + costs.REPEATS
    assert order == [name for r in range(rounds) for name in (["target", "draft"][r % 2:] + ["target", "draft"])[:2]]
    assert (target.seen, draft.seen) == (7, 6)


class _Timed:
    """A runner whose forward advances a fake clock by ``seconds`` and logs ``(name, width)``."""

    clock, log, keeps = [0.0], [], set()
    keeps_current = True
    behind = 6  # columns a draft's catch-up reads again (StaticRunner.behind)

    def __init__(self, name, seconds, seen):
        self.name, self.seconds, self.seen = name, seconds, seen

    def forward(self, columns, width, keep):
        self.clock[0] += self.seconds
        self.log.append((self.name, width))
        self.keeps.add((self.name, width, repr(keep)))
        self.seen += width

    def rewind(self, seen):
        self.seen = seen


@pytest.mark.parametrize("evidence", [False, True])
@pytest.mark.parametrize("beside", [False, True])
def test_keep_current_forwards_cost_what_the_step_runs(monkeypatch, beside, evidence):
    """Without a side stream an arm pays every other draft model's keep-current forward after the target's, on one
    step in ``K`` (KEEP_CURRENT_EVERY); with one, the target's forward is timed alone and with the forwards the step
    runs beside it (here a perfect overlap: they take no time), each other draft model's over ``W + γ - 1`` columns
    (``W`` its ``behind``), keeping no logits as the step's do, or γ with side evidence; a draft model's own step is
    its catch-up over ``W`` columns and ``γ - 1`` one-column forwards; every runner is rewound to where it stood."""
    from flashspec_hf import costs
    from flashspec_hf.runners import NO_LOGITS

    clock, log = _Timed.clock, _Timed.log
    log.clear()
    _Timed.keeps.clear()
    monkeypatch.setattr(costs.time, "perf_counter", lambda: clock[0])
    sides = set()

    def overlapped(side, work):  # the side stream's work, free
        start, first = clock[0], len(log)
        work()
        clock[0] = start
        if log[first:]:
            sides.add(tuple(log[first:]))
        return lambda: None

    monkeypatch.setattr(costs, "fork", overlapped)
    monkeypatch.setattr(costs, "_synchronize", lambda: None)
    target = _Timed("target", 0.5, 7)
    drafts = {0: _Timed("a", 0.1, 6), 1: _Timed("b", 0.2, 6)}
    arms = [(0, 4), (1, 4), (2, 4), (3, 0)]  # the two models, prompt lookup, plain decoding
    table = costs._calibrate(target, drafts, {}, arms, columns=None, side_stream=object() if beside else None,
                             evidence=evidence, graphed=False)
    w, k = _Timed.behind, costs.backends.KEEP_CURRENT_EVERY
    if beside:
        want = [0.5 + 4 * 0.1, 0.5 + 4 * 0.2, 0.5, 0.5]
        assert sides == {(("b", w + 3),), (("a", w + 3),), (("a", w + 3), ("b", w + 3)), (("a", w - 1), ("b", w - 1))}
    else:
        want = [0.5 + 0.2 / k + 4 * 0.1, 0.5 + 0.1 / k + 4 * 0.2, 0.5 + 0.3 / k, 0.5 + 0.3 / k]
        assert not sides
    assert table == pytest.approx(want)
    assert (target.seen, drafts[0].seen, drafts[1].seen) == (7, 6, 6)
    drafting, current = repr(1), repr(4 if evidence else NO_LOGITS)
    assert {k for k in _Timed.keeps if k[0] != "target"} == {
        (d, width, keep) for d in "ab"
        for width, keep in [(w, drafting), (1, drafting), (w - 1, repr(NO_LOGITS)), (w + 3, current)]}


def test_graphed_timing_captures_each_job_once_after_the_warm_ups_and_times_its_replays(monkeypatch):
    """``graphed``: the warm-up rounds launch each job (compiling it); the first timed round captures each job once,
    its forwards (those beside it too) then its rewind, and its rewind alone, on the device of the columns, all in one
    memory pool; every timed round times replays of both and counts the difference; the runners stand where they
    stood."""
    from types import SimpleNamespace

    from flashspec_hf import costs

    events, devices, pools, capturing = [], [], [], [False]

    class Runner(_Timed):
        def forward(self, columns, width, keep):
            events.append(("capture" if capturing[0] else "run", self.name))
            self.seen += width

        def rewind(self, seen):
            events.append(("capture rewind" if capturing[0] else "rewind", self.name))
            self.seen = seen

    def captured(work, pool):
        pools.append(pool)
        first = len(events)
        capturing[0] = True
        work()
        capturing[0] = False
        forwards = [name for kind, name in events[first:] if kind == "capture"]  # those beside, then its own
        job = forwards[-1] if forwards else "rewind of " + events[first][1]
        seconds = {"target": 0.6, "draft": 0.15, "rewind of target": 0.1, "rewind of draft": 0.05}[job]
        return lambda: events.append(("replay", job)) or seconds

    monkeypatch.setattr(costs, "_captured", captured)
    monkeypatch.setattr(costs, "_replay_seconds", lambda replay: replay())
    monkeypatch.setattr(costs.torch.cuda, "graph_pool_handle", lambda: "pool")
    monkeypatch.setattr(costs.torch.cuda, "device", lambda d: devices.append(d) or contextlib.nullcontext())
    target, draft, beside = Runner("target", 0.5, 7), Runner("draft", 0.1, 6), Runner("beside", 0.0, 5)
    columns = SimpleNamespace(tokens=torch.zeros(1, 3, dtype=torch.long))
    jobs = [(target, 5, 5, ((beside, 5, 0),)), (draft, 1, 1, ())]
    assert costs.forward_seconds(jobs, columns, graphed=True) == pytest.approx([0.5, 0.1])
    warm = [e for r in range(costs.WARM_UPS) for job in (["target", "draft"][r % 2:] + ["target", "draft"])[:2]
            for e in ([("run", "beside"), ("run", "target"), ("rewind", "target"), ("rewind", "beside")]
                      if job == "target" else [("run", "draft"), ("rewind", "draft")])]
    assert events[: len(warm)] == warm
    captures = [e for e in events[len(warm):] if e[0] != "replay"]
    assert sorted(captures) == sorted([("capture", "beside"), ("capture", "target"), ("capture rewind", "target"),
                                       ("capture rewind", "beside"), ("capture rewind", "target"),
                                       ("capture rewind", "beside"), ("capture", "draft"),
                                       ("capture rewind", "draft"), ("capture rewind", "draft")])
    replays = sorted(name for kind, name in events if kind == "replay")
    assert replays == sorted(["draft", "rewind of draft", "target", "rewind of target"] * costs.REPEATS)
    assert pools == ["pool"] * 4 and devices == [columns.tokens.device]
    assert (target.seen, draft.seen, beside.seen) == (7, 6, 5)


def test_tables_timed_as_replays_are_kept_apart(monkeypatch, target, assistants):
    """A table timed from replays (a backend that captures its steps) is not reused by a call that launches its
    steps from the host, nor the other way round."""
    import flashspec_hf.decoding
    from flashspec_hf import costs

    calibrated = []  # the graphed argument of each calibration
    monkeypatch.setattr(costs, "_calibrate", lambda *args: calibrated.append(args[-1]) or [1.0] * len(args[3]))
    ids, mask = left_padded(ROWS)
    target.__dict__.pop("_flashspec_arm_costs", None)
    for graphed in [False, True, True, False]:
        monkeypatch.setattr(flashspec_hf.decoding, "arm_costs",
                            lambda *args, forced=graphed, **kw: costs.arm_costs(*args, **kw | {"graphed": forced}))
        target.generate(ids, attention_mask=mask, max_new_tokens=2, flashspec=True, selector="cost_aware_ucb1",
                        assistant_models=assistants)
    assert calibrated == [False, True]
