"""benchmarks.selection_replay's traces: what every arm gets accepted at each committed length, from one generate and
one forward per draft, must be what flashspec's steps get accepted when that arm drafts every step."""

import pytest
import torch

from benchmarks.selection_replay import replay, trace
from flashspec_hf import FixedArm, PromptLookup
from flashspec_hf.backends import KEEP_CURRENT_EVERY

from .conftest import tiny_llama

GAMMA, NEW = 4, 24


@pytest.fixture(scope="module")
def pool(target):
    """A draft sharing the target's first layer (agrees often), an unrelated one, prompt lookup."""
    near = tiny_llama(layers=1, seed=0, peak=8.0)
    near.load_state_dict(target.state_dict(), strict=False)
    return [near, tiny_llama(layers=1, seed=3, peak=8.0)]


@pytest.mark.parametrize("prompt", [[5, 17, 33, 8, 90, 41, 7], [12, 60, 12, 60, 12]])
@pytest.mark.parametrize("cache_implementation", ["static", "dynamic"])
def test_trace_counts_are_the_accepted_drafts_of_each_fixed_arm(target, pool, prompt, cache_implementation):
    ids = torch.tensor([prompt])
    with torch.no_grad():
        got = trace(target, pool, ids, NEW, GAMMA)
    assert len(got["counts"]) == 4 and got["start"] == len(prompt)
    for arm in range(3):  # the drafts, then prompt lookup
        target.generate(ids, max_new_tokens=NEW, do_sample=False, flashspec=True, num_assistant_tokens=GAMMA,
                        assistant_models=[*pool, PromptLookup()], selector=FixedArm(arm),
                        cache_implementation=cache_implementation)
        stats = target.flashspec_stats
        t, expected = got["start"], []
        for gamma in stats.step_gammas:  # 0: the dynamic backend's lookup found no match, a plain step
            expected.append([got["counts"][arm][t - got["start"]] if gamma else 0])
            t += expected[-1][0] + 1
        assert stats.step_accepted == expected
    assert set(got["counts"][3]) == {0}
    assert max(got["counts"][0]) > 0, "the near draft agrees somewhere: the comparison is not vacuous"


def test_replay_emits_each_call_once_whatever_the_arm(target, pool):
    """Replayed through any fixed arm, a call emits the trace's tokens, in fewer steps the more the arm accepts."""
    with torch.no_grad():
        calls = [trace(target, pool, torch.tensor([p]), NEW, GAMMA) for p in ([5, 17, 33, 8], [12, 60, 12, 60])]
    want = sum(c["length"] - c["start"] for c in calls)
    results = [replay(FixedArm(a), calls, [1.0] * 4, [1.0] * 4, [GAMMA] * 3 + [0], True, NEW) for a in range(4)]
    assert all(tokens == want for _, tokens, _, _ in results)
    assert results[3][2] == want and results[0][2] < want  # plain: a step per token; the near draft: fewer


class _Recording(FixedArm):
    """Drafts with one arm and records each step's accepted drafts and side evidence."""

    side_evidence = True

    def __init__(self, arm):
        super().__init__(arm)
        self.steps = []  # (accepted, successes, trials) per reported step

    def update(self, arm, accepted, gamma):
        super().update(arm, accepted, gamma)
        self.steps.append([accepted[0]])

    def update_all(self, successes, trials):
        self.steps[-1] += [successes, trials]


@pytest.mark.parametrize("drafting", [0, 1, 2])
@pytest.mark.parametrize("prompt", [[5, 17, 33, 8, 90, 41, 7], [12, 60, 12, 60, 12]])
def test_side_evidence_is_what_the_other_drafts_would_have_had_accepted(target, pool, prompt, drafting):
    """On the static backend, each step's side evidence on a draft model that did not draft is its trace count at
    the step's committed length, censored at the positions the step verified (``w = min(n + 1, γ)``): agreeing
    tokens ``min(count, w)``, tested ``+1`` when it falls short of ``w``; nothing for the drafting source, prompt
    lookup (kept current by nobody) or the plain arm, and none on the steps that do not keep the others current (all
    but every ``KEEP_CURRENT_EVERY``-th), as :func:`benchmarks.selection_replay.replay` has it."""
    ids = torch.tensor([prompt])
    with torch.no_grad():
        got = trace(target, pool, ids, NEW, GAMMA)
    selector = _Recording(drafting)
    target.generate(ids, max_new_tokens=NEW, do_sample=False, flashspec=True, num_assistant_tokens=GAMMA,
                    assistant_models=[*pool, PromptLookup()], selector=selector, cache_implementation="static")
    t, agreed, tested = got["start"], 0, 0
    for step, (accepted, successes, trials) in enumerate(selector.steps):
        window = min(accepted + 1, GAMMA)
        want = [[0, 0] for _ in range(3)]  # two drafts and prompt lookup (not cost-aware: no plain arm)
        fed = step % KEEP_CURRENT_EVERY == KEEP_CURRENT_EVERY - 1  # the steps that keep the others current
        for other in ({0, 1} - {drafting}) if fed else ():
            agree = min(got["counts"][other][t - got["start"]], window)
            want[other] = [agree, agree + (agree < window)]
        assert [list(pair) for pair in zip(successes, trials, strict=True)] == want
        agreed, tested = agreed + want[0][0] + want[1][0], tested + want[0][1] + want[1][1]
        t += accepted + 1
    assert len(selector.steps) > 3 and tested > 0, "evidence was gathered: the comparison is not vacuous"
    assert agreed > 0 or drafting == 0, "the near draft, scored, agrees somewhere"


def test_no_side_evidence_when_sampling_or_dynamic(target, pool):
    """Side evidence is gathered on the static backend under greedy decoding only (module docstring)."""
    ids = torch.tensor([[5, 17, 33, 8, 90, 41, 7]])
    for kwargs in [dict(cache_implementation="static", do_sample=True), dict(cache_implementation="dynamic")]:
        selector = _Recording(2)
        target.generate(ids, max_new_tokens=8, flashspec=True, num_assistant_tokens=GAMMA,
                        assistant_models=[*pool, PromptLookup()], selector=selector, **kwargs)
        assert selector.steps and all(len(step) == 1 for step in selector.steps)


class _Order(FixedArm):
    """Drafts with one arm and records the order of its choices (``c``) and outcomes (``u``)."""

    def __init__(self, arm):
        super().__init__(arm)
        self.order = []

    def choose(self, arm=None):
        self.order.append("c")
        return super().choose(arm)

    def update(self, arm, accepted, gamma):
        super().update(arm, accepted, gamma)
        self.order.append("u")


@pytest.mark.parametrize("new", [5, 11, NEW])
def test_replay_reads_outcomes_when_the_static_loop_does(target, pool, new):
    """The replay's selector sees each outcome after the same choices as the static loop's: ``MAX_IN_FLIGHT`` steps
    late, earlier near ``max_new_tokens`` (:func:`flashspec_hf.reports.may_end`), at once after the last."""
    for prompt in ([5, 17, 33, 8], [12, 60, 12, 60], [77, 3, 51]):
        ids = torch.tensor([prompt])
        with torch.no_grad():
            call = trace(target, pool, ids, new, GAMMA)
        for arm in range(3):  # the drafts, then prompt lookup
            loop, replayed = _Order(arm), _Order(arm)
            target.generate(ids, max_new_tokens=new, do_sample=False, flashspec=True, num_assistant_tokens=GAMMA,
                            assistant_models=[*pool, PromptLookup()], selector=loop, cache_implementation="static")
            replay(replayed, [call], [1.0] * 4, [1.0] * 4, [GAMMA] * 3 + [0], False, new)
            assert replayed.order == loop.order, (prompt, arm)


def test_replay_refuses_traces_longer_than_its_max_new_tokens(target, pool):
    with torch.no_grad():
        call = trace(target, pool, torch.tensor([[5, 17, 33, 8]]), NEW, GAMMA)
    with pytest.raises(ValueError, match="remake them"):
        replay(FixedArm(0), [call], [1.0] * 4, [1.0] * 4, [GAMMA] * 3 + [0], False, call["length"] - call["start"] - 1)
