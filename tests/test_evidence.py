"""Side evidence (flashspec_hf/evidence.py): on the static backend under greedy decoding, each step's evidence on an
arm is what that arm's draft model would have had accepted there, checked against an oracle that runs each draft
model once over the target's own greedy text; and how the selector and user sources take it."""

import pytest
import torch

from flashspec_hf import PromptLookup, Selector, ThompsonSampling
from flashspec_hf.backends import KEEP_CURRENT_EVERY
from flashspec_hf.drafts import DraftSource
from flashspec_hf.models import early_exit_assistants

from .conftest import left_padded, tiny_llama

GAMMAS = [2, 4]
PROMPTS = [[5, 17, 33, 8, 90, 41, 7], [12, 60, 12, 60, 12], [9, 9, 4, 30, 22, 9, 9, 4]]


class _Recording(Selector):
    """Cost-aware (so a plain arm), takes side evidence, drafts the arms in turn from ``first`` on; records every
    report (:class:`~flashspec_hf.reports.Report`) with the evidence that came with it."""

    side_evidence = True

    def __init__(self, first: int):
        super().__init__(cost_aware=True)
        self.first, self.steps = first, []

    def select(self):
        return (self.first + sum(self.chosen)) % self.num_arms

    def update_all(self, successes, trials):
        self.steps[-1][1] = [list(successes), list(trials)]


def _reduced_head(model, keep: torch.Tensor):
    """``model`` with an LM head over the ids ``keep`` only (a ``draft_vocab_ids`` draft)."""
    head = torch.nn.Linear(model.lm_head.in_features, len(keep), bias=False)
    head.weight.data = model.lm_head.weight.data[keep].clone()
    model.lm_head = head
    model.register_buffer("draft_vocab_ids", keep, persistent=False)
    return model


@pytest.fixture(scope="module")
def setting():
    return models()


def models():
    """The target and three draft models: one sharing its first layer, one of a padded vocabulary, one with a
    reduced head (``draft_vocab_ids``) sharing its first two layers."""
    target = tiny_llama(layers=3, seed=0, peak=8.0, eos=None)
    near = tiny_llama(layers=1, seed=0, peak=8.0, eos=None)
    near.load_state_dict(target.state_dict(), strict=False)  # shares the first layer: agrees often
    padded = tiny_llama(layers=1, vocab=101, seed=5, peak=8.0, eos=None)  # a larger padded vocabulary
    reduced = tiny_llama(layers=2, seed=0, peak=8.0, eos=None)
    reduced.load_state_dict(target.state_dict(), strict=False)
    _reduced_head(reduced, torch.tensor(sorted(set(range(0, 97, 2)) | {1, 3, 5})))
    return target, [near, padded, reduced]


def _oracle(target, drafts, new_tokens):
    """Per row, the target's greedy text (past the cut, so every verified position is known) and each draft
    model's greedy guess after every prefix of it (target ids)."""
    texts = [target.generate(torch.tensor([p], device=target.device), max_new_tokens=new_tokens + 8,
                             do_sample=False)[0].cpu() for p in PROMPTS]
    guesses = []
    for draft in drafts:
        ids_of = getattr(draft, "draft_vocab_ids", None)
        with torch.no_grad():
            best = [draft(text[None].to(draft.device)).logits[0, :, :97].argmax(-1) for text in texts]  # [L] each
        guesses.append([(b if ids_of is None else ids_of[b]).cpu() for b in best])
    return texts, guesses


@pytest.mark.parametrize("first", [0, 3, 7])
def test_side_evidence_equals_the_oracle_at_batch_3_with_two_gammas(setting, first, monkeypatch):
    """Rows of different prompt lengths and acceptance (so rows are at different lengths and finish at different
    steps), γ ∈ {2, 4}, a plain arm, mixed arms, prompt lookup, an early exit, a padded and a reduced vocabulary:
    every step's evidence on a draft model's arm of length ``γ_a`` is, summed over the rows generating at the
    step, ``k = min(count, w)`` agreeing tokens and ``k + (k < w)`` tested, ``w = min(n + 1, γ_a, γ)``; 0 and 0 for
    the drafting source's arms, prompt lookup, mixed arms, the early exit, on plain steps, and on the steps that do
    not keep the draft models current (all but every ``KEEP_CURRENT_EVERY``-th: between those the draft models fall
    behind, then catch up within the columns they read again, which the evidence of the next one checks)."""
    target, drafts = setting
    check_side_evidence_against_oracle(target, drafts, _Recording(first), monkeypatch, calls=1)


def check_side_evidence_against_oracle(target, drafts, selector, monkeypatch, calls: int) -> None:
    """``calls`` greedy static calls on :data:`PROMPTS` (on the target's device) with ``selector`` kept across
    them: outputs equal the target's greedy text, and every step's evidence equals the oracle's (the test above)."""
    from flashspec_hf import reports

    hand_over = reports.StepReports._hand_over
    monkeypatch.setattr(reports.StepReports, "_hand_over",
                        lambda self, report: (self.selector.steps.append([report, None]), hand_over(self, report)))
    new, device = 20, target.device
    pool = [*drafts, *early_exit_assistants(target, depths=(1,)), PromptLookup()]
    ids, mask = left_padded(PROMPTS)
    texts, guesses = _oracle(target, drafts, new)
    plain = len(pool)  # sources: the pool, the plain arm, then one mixed source per model (lookup + it)
    arms = [(s, 0 if s == plain else g) for s in range(plain + 1) for g in GAMMAS]
    arms = list(dict.fromkeys(arms + [(plain + 1 + m, g) for m in range(4) for g in GAMMAS]))
    tested = agreed = apart = 0
    for _ in range(calls):
        selector.steps = []
        out = target.generate(ids.to(device), attention_mask=mask.to(device), max_new_tokens=new, do_sample=False,
                              flashspec=True, num_assistant_tokens=GAMMAS, assistant_models=pool,
                              selector=selector, cache_implementation="static")
        for b, text in enumerate(texts):
            assert out[b, ids.shape[1]:].tolist() == text[len(PROMPTS[b]): len(PROMPTS[b]) + new].tolist()
        assert len(arms) == selector.num_arms
        lengths = [len(p) for p in PROMPTS]  # committed tokens per row
        for step, (report, evidence) in enumerate(selector.steps):
            source, gamma = arms[report.arm][0], report.gamma
            want = [[0] * len(arms), [0] * len(arms)]
            kept_current = step % KEEP_CURRENT_EVERY == KEEP_CURRENT_EVERY - 1  # the others fed: evidence
            for a, (other, arm_gamma) in enumerate(arms):
                if other >= len(drafts) or other == source or not gamma or not kept_current:
                    continue
                for b, (t, n) in enumerate(zip(lengths, report.accepted, strict=True)):
                    if report.was_finished[b]:
                        continue
                    window, k = min(n + 1, arm_gamma, gamma), 0
                    while k < window and guesses[other][b][t - 1 + k] == texts[b][t + k]:
                        k += 1
                    want[0][a] += k
                    want[1][a] += k + (k < window)
            if any(not f for f in report.was_finished):
                assert evidence == want
            tested, agreed = tested + sum(want[1]), agreed + sum(want[0])
            lengths = [t + (0 if f else n + 1) for t, n, f in zip(lengths, report.accepted, report.was_finished,
                                                                strict=True)]
        apart += any(any(r.was_finished) and not all(r.was_finished) for r, _ in selector.steps)
    assert apart, "in some call rows finish apart (frozen rows beside generating ones)"
    assert tested > 50 * calls and agreed > 10 * calls, "draft models were scored and agreed somewhere: not vacuous"


def test_thompson_counts_side_evidence_as_tested_draft_tokens():
    """update_all adds agreeing tokens to an arm's successes and the rest of its tested tokens to its failures."""
    selector = ThompsonSampling(side_evidence=True)
    selector.ensure(3, [4, 4, 0])
    selector.update(0, [2], 4)
    selector.update_all([0, 3, 0], [0, 4, 0])
    assert (selector.successes, selector.failures) == ([2, 3, 0], [1, 1, 0])


class _UserSource(DraftSource):
    """A user's source written before side evidence: keeps_current, and keep_current takes no ``guesses``."""

    name = "user"
    keeps_current = True

    def __init__(self):
        self.kept = 0

    def propose(self, ctx, gamma):
        drafts = ctx.sequences.buffer[:, :gamma] * 0 + 5  # [B, γ]
        ctx.columns.write_drafts(drafts)
        return drafts, None

    def predict(self, ctx, num_new_before, width):
        return torch.full_like(ctx.columns.tokens[:, :width], -1)

    def keep_current(self, ctx, gamma):
        self.kept += 1


def test_a_user_source_that_keeps_current_gets_no_guesses_buffer(setting):
    """A user's source that keeps current is kept current as before (no ``guesses`` argument) and gets no evidence:
    only sources that say they give side evidence are scored."""
    target, drafts = setting
    user, selector = _UserSource(), ThompsonSampling(cost_aware=True, side_evidence=True)
    selector.update_all = lambda successes, trials: seen.append(successes)
    seen = []
    out = target.generate(torch.tensor([PROMPTS[0]]), max_new_tokens=16, do_sample=False, flashspec=True,
                          assistant_models=[drafts[0], user], selector=selector, cache_implementation="static")
    stock = target.generate(torch.tensor([PROMPTS[0]]), max_new_tokens=16, do_sample=False)
    assert torch.equal(out, stock)
    assert user.kept > 0 and seen and all(s[1] == 0 for s in seen)
