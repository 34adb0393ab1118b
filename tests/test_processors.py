"""Returned per-token tensors: flashspec returns stock's scores and logits."""

import pytest
import torch

from flashspec_hf import PromptLookup, RoundRobin

from .conftest import left_padded

EOS = 2
ROWS = [[5, 17, 33, 8, 90, 41, 7], [12, 60], [77, 3, 51, 51, 9], [9, 10, 11, 9, 10]]


def _generate(model, rows, drafts=None, **kw):
    """``generate`` on left-padded ``rows``: stock without ``drafts``, flashspec with them."""
    ids, mask = left_padded(rows)
    flash = dict(assistant_models=drafts, flashspec=True) if drafts else {}
    return model.generate(ids, attention_mask=mask, **flash, **kw)


def _assert_same_as_stock(model, rows, drafts, num_assistant_tokens=3, selector=None, **kw):
    """flashspec's greedy output equals stock's on the same padded batch; so do the scores and logits when asked,
    at every position up to each row's EOS, and they are zeros after it (stock computes the target on padding).
    Returns the tokens each row generated when scores were compared."""
    want = _generate(model, rows, do_sample=False, **kw)
    got = _generate(model, rows, drafts, do_sample=False, num_assistant_tokens=num_assistant_tokens,
                    selector=selector, **kw)
    if not kw.get("return_dict_in_generate"):
        assert torch.equal(got, want)
        return
    assert torch.equal(got.sequences, want.sequences)
    lengths = _generated_lengths(want.sequences, len(want.scores), kw.get("eos_token_id", EOS))
    for name in ("scores", "logits"):
        mine, theirs = getattr(got, name), getattr(want, name)
        assert (mine is None) == (theirs is None) and len(mine or ()) == len(theirs or ())
        for step, (a, b) in enumerate(zip(mine or (), theirs or ())):
            for row, length in enumerate(lengths):
                if step < length:
                    torch.testing.assert_close(a[row], b[row], msg=lambda m, s=step, r=row: f"{name}[{s}][{r}]: {m}")
                else:
                    assert not a[row].any(), f"{name}[{step}][{row}] after the row's EOS"
    return lengths


def _generated_lengths(sequences: torch.Tensor, new: int, eos: int | None) -> list[int]:
    """Tokens each row of ``sequences`` generated (its last ``new`` columns), up to and including its first EOS."""
    rows = sequences[:, sequences.shape[1] - new :].tolist()
    return [row.index(eos) + 1 if eos in row else new for row in rows]


# ---- 2. returned per-token tensors ------------------------------------------------------------------------------


@pytest.mark.parametrize("rows", [ROWS[:1], ROWS], ids=["batch1", "batch4"])
@pytest.mark.parametrize("sources", ["models", "models+lookup"])
def test_scores_and_logits_with_ragged_step_widths_equal_stock(target, assistants, rows, sources):
    """Steps of γ = 1 and 3 alternate (round robin over (source, γ) arms): every score and logit equals stock's."""
    drafts = assistants + ([PromptLookup()] if sources == "models+lookup" else [])
    _assert_same_as_stock(target, rows, drafts, max_new_tokens=16, num_assistant_tokens=[1, 3],
                          selector=RoundRobin(), eos_token_id=None, return_dict_in_generate=True,
                          output_scores=True, output_logits=True)
    assert len(set(target.flashspec_stats.step_arms)) > 1


def test_scores_after_a_row_finished_are_zero(target, assistants):
    """A row that stopped early has no target distribution at the later positions: its scores and logits there are
    zeros (stock computes the target on padding); everything up to its EOS equals stock."""
    width = left_padded(ROWS)[0].shape[1]
    eos = int(_generate(target, ROWS, max_new_tokens=12, do_sample=False)[1, width + 2])  # row 1's third token
    lengths = _assert_same_as_stock(target, ROWS, assistants, max_new_tokens=12, eos_token_id=eos,
                                    num_assistant_tokens=[1, 3], selector=RoundRobin(), return_dict_in_generate=True,
                                    output_scores=True, output_logits=True)
    assert min(lengths) < 12, "no row finished early"


