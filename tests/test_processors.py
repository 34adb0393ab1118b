"""Logits processors and returned per-token tensors: flashspec calls each processor only where stock's output is
unaffected by how often it is called (stateful processors are refused), only on prefixes a row has or could have
(never on another row's padding, never after a draft the processors forbid), and returns stock's scores and logits."""

import pytest
import torch
from transformers import LogitsProcessor, LogitsProcessorList, SynthIDTextWatermarkingConfig, WatermarkingConfig
from transformers.generation.logits_process import TopHLogitsWarper

from flashspec_hf import PromptLookup, RoundRobin
from flashspec_hf.processing import STATELESS_PROCESSORS

from .conftest import left_padded, tiny_llama
from .test_distribution import ALPHA, _exact, _p_value, _sample_counts
from .test_distribution import models as distribution_models  # noqa: F401  (a fixture)

EOS, PAD = 2, 0
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


# ---- 1. stateful processors: refused, unless known or marked stateless ----------------------------------------


class CountingProcessor(LogitsProcessor):
    """Bans a different token on every call: its output depends on how often it was called."""

    def __init__(self):
        self.calls = 0

    def __call__(self, input_ids, scores):
        self.calls += 1
        return scores.index_fill(1, torch.tensor([3 + self.calls % 50]), float("-inf"))


class NoImmediateRepeat(LogitsProcessor):
    """Bans each row's last token; keeps no state and reads only its own row."""

    flashspec_stateless = True

    def __call__(self, input_ids, scores):
        return scores.scatter(1, input_ids[:, -1:], float("-inf"))


def test_classifier_free_guidance_is_refused_by_name(target, assistants):
    """guidance_scale itself is refused by the options registry (tests/test_generate_kwargs.py); the processor
    passed by hand is refused here, by its class name."""
    from transformers.generation.logits_process import UnbatchedClassifierFreeGuidanceLogitsProcessor

    cfg = LogitsProcessorList([UnbatchedClassifierFreeGuidanceLogitsProcessor(1.5, target)])
    with pytest.raises(ValueError, match="UnbatchedClassifierFreeGuidanceLogitsProcessor.*Drop flashspec=True"):
        _generate(target, ROWS[:1], assistants, logits_processor=cfg, do_sample=False, max_new_tokens=8)


def test_synthid_watermark_is_refused_by_name(target, assistants):
    """The config is refused by the options registry; its processor passed by hand is refused by class name."""
    config = SynthIDTextWatermarkingConfig(keys=[654, 400, 836, 123, 340], ngram_len=3)
    with pytest.raises(ValueError, match="SynthIDTextWatermarkingConfig"):
        _generate(target, ROWS[:1], assistants, watermarking_config=config, do_sample=True, max_new_tokens=8)
    processors = LogitsProcessorList([config.construct_processor(target.config.vocab_size, target.device)])
    with pytest.raises(ValueError, match="SynthIDTextWatermarkLogitsProcessor"):
        _generate(target, ROWS[:1], assistants, logits_processor=processors, do_sample=True, max_new_tokens=8)


@pytest.mark.parametrize("loop", ["dynamic", "static"])
def test_unknown_user_processor_is_refused_by_name(target, assistants, loop):
    processors = LogitsProcessorList([CountingProcessor()])
    with pytest.raises(ValueError, match="CountingProcessor.*flashspec_stateless"):
        _generate(target, ROWS[:1], assistants, logits_processor=processors, max_new_tokens=8,
                  cache_implementation=loop)


def test_user_processor_marked_stateless_equals_stock(target, assistants):
    processors = LogitsProcessorList([NoImmediateRepeat()])
    _assert_same_as_stock(target, ROWS, assistants, logits_processor=processors, max_new_tokens=16)


@pytest.mark.parametrize(
    "kw",
    [
        dict(sequence_bias={(17,): 4.0, (33, 8): -9.0}),
        dict(bad_words_ids=[[40], [90, 41]]),
        dict(forced_eos_token_id=EOS),
        dict(exponential_decay_length_penalty=(3, 1.5)),
        dict(suppress_tokens=[4, 5, 6], begin_suppress_tokens=[7, 8]),
        dict(remove_invalid_values=True, renormalize_logits=True),
        dict(watermarking_config=WatermarkingConfig(bias=4.0)),
        dict(repetition_penalty=1.5, min_new_tokens=5),
    ],
    ids=lambda kw: "+".join(kw),
)
def test_allowed_processors_equal_stock_in_a_ragged_batch(target, assistants, kw):
    _assert_same_as_stock(target, ROWS, assistants, max_new_tokens=14, return_dict_in_generate=True,
                          output_scores=True, **kw)


def test_allow_list_holds_transformers_classes_and_no_stateful_one():
    from transformers.generation import logits_process

    assert all(getattr(logits_process, cls.__name__) is cls for cls in STATELESS_PROCESSORS)
    stateful = {"UnbatchedClassifierFreeGuidanceLogitsProcessor", "SynthIDTextWatermarkLogitsProcessor",
                "WhisperNoSpeechDetection", "DiaEOSDelayPatternLogitsProcessor"}
    assert not stateful & {cls.__name__ for cls in STATELESS_PROCESSORS}


def test_top_h_sampling_is_exact(distribution_models):
    """Top-h is context-free: it runs once over all positions of a step (chi-square gate). The static loop refuses
    it (its Categorical check reads the device, which a captured step cannot do)."""
    target, drafts = distribution_models
    counts = _sample_counts(target, drafts, 1.0, 0, 1.0, 2, top_h=0.6, cache_implementation="dynamic")
    assert _p_value(counts, _exact(target, LogitsProcessorList([TopHLogitsWarper(0.6)]))) > ALPHA


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


# ---- 5. processors see only each row's own prefixes -----------------------------------------------------------


def _trie_constraint(rows, answers):
    """``prefix_allowed_tokens_fn`` for left-padded ``rows``: row ``b`` may only generate one of ``answers[b]``
    (each ends with EOS; after it, PAD, as stock feeds finished rows). It returns ``[]`` for any other prefix, and
    for a prefix whose prompt is not row ``b``'s."""
    ids, _ = left_padded(rows)
    width = ids.shape[1]

    def allowed(batch_id, input_ids):
        if not torch.equal(input_ids[:width], ids[batch_id]):
            return []
        generated = input_ids[width:].tolist()
        if EOS in generated:
            return [PAD]
        n = len(generated)
        return sorted({a[n] for a in answers[batch_id] if a[:n] == generated and len(a) > n})

    return allowed


ANSWERS = [
    [[10, 11, 12, EOS], [10, 13, 14, 15, 16, EOS], [20, 21, EOS]],
    [[30, 31, EOS], [30, 32, 33, 34, 35, 36, EOS]],
    [[40, 41, 42, 43, EOS], [44, EOS]],
    [[9, 10, 11, 9, 10, 11, 9, EOS], [9, 50, EOS]],
]


@pytest.mark.parametrize("gamma", [2, [1, 4]])
def test_trie_constraint_in_a_padded_batch_equals_stock(target, assistants, gamma):
    fn = _trie_constraint(ROWS, ANSWERS)
    _assert_same_as_stock(target, ROWS, assistants, max_new_tokens=10, prefix_allowed_tokens_fn=fn,
                          num_assistant_tokens=gamma, return_dict_in_generate=True, output_scores=True)


def test_trie_constraint_with_sampling_and_several_returns_per_prompt(target, assistants):
    """Rows expanded by num_return_sequences get the batch index stock gives them (the prompt's in transformers
    5.24, the expanded row's in 5.17); every output is one of its prompt's answers."""
    rows = ROWS[:2]
    ids, _ = left_padded(rows)
    width = ids.shape[1]
    seen = {"stock": set(), "flashspec": set()}

    def by_prompt(key):
        def allowed(batch_id, input_ids):
            prompt = next(i for i, row in enumerate(ids) if torch.equal(input_ids[:width], row))
            seen[key].add((batch_id, prompt))
            return _trie_constraint(rows, ANSWERS)(prompt, input_ids)

        return allowed

    kw = dict(do_sample=True, num_return_sequences=3, max_new_tokens=10)
    torch.manual_seed(0)
    _generate(target, rows, prefix_allowed_tokens_fn=by_prompt("stock"), **kw)
    torch.manual_seed(0)
    out = _generate(target, rows, assistants, prefix_allowed_tokens_fn=by_prompt("flashspec"), **kw)
    assert seen["flashspec"] == seen["stock"]
    for i, row in enumerate(out[:, width:].tolist()):
        assert row[: row.index(EOS) + 1] in ANSWERS[i // 3]


def test_top_h_with_no_repeat_ngram_in_a_padded_batch():
    """Sampling with an entropy-based warper after an n-gram ban, small vocabulary, ragged rows: every seed runs,
    and no row repeats a bigram (each row was processed with its own tokens)."""
    vocab = 12
    target = tiny_llama(layers=2, vocab=vocab, seed=0, peak=16.0, eos=None)
    early_exit = tiny_llama(layers=1, vocab=vocab, seed=0, peak=16.0, eos=None)
    early_exit.load_state_dict(target.state_dict(), strict=False)
    g = torch.Generator().manual_seed(0)
    rows = [torch.randint(3, vocab, (n,), generator=g).tolist() for n in (6, 2, 4, 3)]
    for seed in range(10):
        torch.manual_seed(seed)
        out = _generate(target, rows, [early_exit, PromptLookup()], do_sample=True, top_h=0.3,
                        no_repeat_ngram_size=2, max_new_tokens=12)
        for tokens in out.tolist():
            for k in range(out.shape[1] - 12, out.shape[1]):  # each generated token ends a bigram not seen before
                earlier = set(zip(tokens[: k - 1], tokens[1:k]))
                assert (tokens[k - 1], tokens[k]) not in earlier, f"seed {seed}: {tokens}"


def test_sampling_with_a_prefix_dependent_processor_is_exact(distribution_models):
    """Chi-square gate of tests/test_distribution.py with a processor that bans each row's last token: prompt
    lookup's fallback (repeat the last token) is always forbidden, so the positions after it are never processed,
    and the rows of the 10,000-row batch fall into groups of different lengths."""
    target, drafts = distribution_models
    processors = LogitsProcessorList([NoImmediateRepeat()])
    counts = _sample_counts(target, [*drafts, PromptLookup()], 1.0, 0, 1.0, [1, 2], logits_processor=processors)
    assert _p_value(counts, _exact(target, processors)) > ALPHA


# ---- 7. drafts the processors forbid are rejected without calling processors after them ---------------------


def test_prompt_lookup_drafts_leaving_the_trie_are_rejected(target):
    """The prompt repeats ``10 11 12 13``; prompt lookup proposes ``12 13 …`` after ``10 11``, which the trie
    forbids: those drafts are rejected and the function is never asked about the prefixes after them."""
    rows = [[10, 11, 12, 13, 10, 11, 12, 13, 10, 11]]
    answers = [[[10, 11, 20, 21, 10, 11, 22, EOS], [10, 11, 12, 30, EOS]]]
    fn = _trie_constraint(rows, answers)
    for gamma in (1, 3, 5):
        _assert_same_as_stock(target, rows, [PromptLookup()], max_new_tokens=10, prefix_allowed_tokens_fn=fn,
                              num_assistant_tokens=gamma)


def test_a_processor_failing_after_a_forbidden_draft_does_not_matter(target):
    """A constraint that raises (rather than returning []) outside its trie: same output as stock."""
    rows = [[10, 11, 12, 13, 10, 11, 12, 13, 10, 11]]
    inner = _trie_constraint(rows, [[[10, 11, 20, 21, 10, 11, 22, EOS]]])

    def strict(batch_id, input_ids):
        allowed = inner(batch_id, input_ids)
        if not allowed:
            raise RuntimeError(f"outside the trie: {input_ids.tolist()}")
        return allowed

    _assert_same_as_stock(target, rows, [PromptLookup()], max_new_tokens=10, prefix_allowed_tokens_fn=strict,
                          num_assistant_tokens=4)
