"""Every GenerationConfig field and generate input under flashspec=True (flashspec_hf.options, the README's table):
honoured ones give stock's output, refused ones raise naming the option. Also HF's assisted-generation arguments,
the draft checks, stop strings from a generation config, and any default device or dtype."""

import inspect
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (
    BertConfig,
    BertForMaskedLM,
    CompileConfig,
    DynamicCache,
    GenerationConfig,
    PreTrainedTokenizerFast,
)
from transformers.generation import SynthIDTextWatermarkingConfig, WatermarkingConfig
from transformers.generation.logits_process import LogitsProcessorList, SuppressTokensLogitsProcessor
from transformers.generation.stopping_criteria import StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from flashspec_hf import PromptLookup
from flashspec_hf.integration import _original_generate
from flashspec_hf.options import GENERATE_INPUTS, GENERATION_CONFIG_OPTIONS, MODEL_INPUTS, REFUSED, render_table

from .conftest import left_padded, tiny_llama

ROWS = [[5, 17, 33, 8, 90, 41, 7], [12, 60]]
DRAFT_SETTINGS = {
    "assistant_model", "assistant_tokenizer", "num_assistant_tokens", "num_assistant_tokens_schedule",
    "prompt_lookup_num_tokens", "max_matching_ngram_size", "assistant_early_exit", "assistant_lookbehind",
    "target_lookbehind",
}
"""Settings that choose drafts: stock's reference is the target alone, which exact speculative decoding reproduces."""


class LengthCriterion(StoppingCriteria):
    """Stops a row once it holds ``length`` tokens (a user criterion that reads each row's own ids)."""

    def __init__(self, length: int):
        self.length = length

    def __call__(self, input_ids, scores, **kwargs):
        return torch.full((input_ids.shape[0],), input_ids.shape[1] >= self.length, dtype=torch.bool)


class Collect(BaseStreamer):
    def put(self, value):
        pass

    def end(self):
        pass


def _word(c, i: int) -> str:
    """The word of the first greedy token from position ``i`` on that the word-level tokenizer spells ``w<id>``."""
    return next(f"w{t}" for t in c.plain[i:] if 3 <= t < 96)


# (row, example): an example is a function of the context (tokenizer, stock's greedy tokens of ROWS[0], a draft)
# returning generate's keywords; stock with the same keywords (draft settings dropped) is the reference
HONOURED = [
    ("max_length", lambda c: dict(max_length=15)),
    ("max_length", lambda c: dict(max_new_tokens=9)),
    ("min_length", lambda c: dict(min_new_tokens=6, eos_token_id=c.plain[1])),
    ("min_length", lambda c: dict(min_length=12, eos_token_id=c.plain[2])),
    ("stop_strings", lambda c: dict(stop_strings=[_word(c, 4)], tokenizer=c.tok)),
    ("max_time", lambda c: dict(max_time=0.0)),
    ("early_stopping", lambda c: dict(early_stopping=True, length_penalty=2.0, diversity_penalty=0.5)),
    ("do_sample", lambda c: dict(do_sample=True, top_k=1)),
    ("low_memory", lambda c: dict(low_memory=True)),
    ("cache_implementation", lambda c: dict(cache_implementation="static")),
    ("cache_implementation", lambda c: dict(cache_implementation="dynamic")),
    ("use_cache", lambda c: dict(use_cache=False)),
    ("cache_config", lambda c: dict(cache_config={"nbits": 4}, max_cache_len=64, prefill_chunk_size=2,
                                    continuous_batching_config={})),
    ("compile_config", lambda c: dict(compile_config=CompileConfig(fullgraph=False), disable_compile=True,
                                      cache_implementation="static")),
    ("temperature", lambda c: dict(do_sample=True, top_k=1, temperature=0.7, top_p=0.9, min_p=0.05, typical_p=0.9,
                                   epsilon_cutoff=3e-4, eta_cutoff=3e-4)),
    ("temperature", lambda c: dict(do_sample=True, top_k=1, top_h=0.3)),
    ("repetition_penalty", lambda c: dict(repetition_penalty=1.3)),
    ("repetition_penalty", lambda c: dict(no_repeat_ngram_size=2)),
    ("repetition_penalty", lambda c: dict(bad_words_ids=[[c.plain[2]], [c.plain[0], c.plain[1]]])),
    ("repetition_penalty", lambda c: dict(sequence_bias={(c.plain[0], 40): 9.0, (41,): 3.0})),
    ("repetition_penalty", lambda c: dict(suppress_tokens=[c.plain[3]], begin_suppress_tokens=[c.plain[0]])),
    ("repetition_penalty", lambda c: dict(exponential_decay_length_penalty=(3, 1.5), eos_token_id=c.plain[6])),
    ("repetition_penalty", lambda c: dict(forced_bos_token_id=9, forced_eos_token_id=c.plain[0], max_new_tokens=7)),
    ("repetition_penalty", lambda c: dict(renormalize_logits=True, remove_invalid_values=True)),
    ("watermarking_config", lambda c: dict(watermarking_config=WatermarkingConfig(bias=2.0))),
    ("return_dict_in_generate", lambda c: dict(return_dict_in_generate=True, output_scores=True, output_logits=True)),
    ("num_return_sequences", lambda c: dict(do_sample=True, top_k=1, num_return_sequences=2)),
    ("pad_token_id", lambda c: dict(pad_token_id=3, eos_token_id=c.plain[2], bos_token_id=4)),
    ("decoder_start_token_id", lambda c: dict(decoder_start_token_id=3)),
    ("num_assistant_tokens", lambda c: dict(num_assistant_tokens=[1, 3])),
    ("num_assistant_tokens_schedule", lambda c: dict(num_assistant_tokens_schedule="constant")),
    ("prompt_lookup_num_tokens", lambda c: dict(prompt_lookup_num_tokens=2, max_matching_ngram_size=1)),
    ("assistant_early_exit", lambda c: dict(assistant_early_exit=1)),
    ("assistant_lookbehind", lambda c: dict(assistant_lookbehind=3, target_lookbehind=3)),
    ("transformers_version", lambda c: dict(transformers_version="5.0.0")),
    ("inputs", lambda c: dict()),
    ("attention_mask", lambda c: dict()),
    ("generation_config", lambda c: dict(generation_config=GenerationConfig(
        max_new_tokens=7, repetition_penalty=1.2, no_repeat_ngram_size=3, pad_token_id=0))),
    ("logits_processor", lambda c: dict(
        logits_processor=LogitsProcessorList([SuppressTokensLogitsProcessor([c.plain[1]])]),
        prefix_allowed_tokens_fn=lambda batch_id, ids: list(range(3, 60 + 20 * batch_id)))),
    ("stopping_criteria", lambda c: dict(stopping_criteria=StoppingCriteriaList([LengthCriterion(12)]))),
    ("streamer", lambda c: dict(streamer=Collect())),
    ("assistant_model", lambda c: dict(assistant_model=c.draft)),
    ("tokenizer", lambda c: dict(tokenizer=c.tok)),
    ("assistant_tokenizer", lambda c: dict(tokenizer=c.tok, assistant_tokenizer=c.tok)),
    ("trust_remote_code", lambda c: dict(trust_remote_code=False)),
]

# (row, keywords, the option the error names)
REFUSED_EXAMPLES = [
    ("num_beams", dict(num_beams=2), "num_beams"),
    ("num_beams", dict(force_words_ids=[[5]]), "force_words_ids"),
    ("penalty_alpha", dict(penalty_alpha=0.6, top_k=4), "penalty_alpha"),
    ("penalty_alpha", dict(dola_layers="high"), "dola_layers"),
    ("use_mtp", dict(use_mtp=True), "use_mtp"),
    ("use_mtp", dict(speculation_type="dflash"), "speculation_type"),
    ("cache_implementation", dict(cache_implementation="offloaded"), "cache_implementation='offloaded'"),
    ("watermarking_config", dict(watermarking_config=SynthIDTextWatermarkingConfig(keys=[1, 2, 3], ngram_len=3)),
     "watermarking_config"),
    ("encoder_repetition_penalty", dict(encoder_repetition_penalty=1.5), "encoder_repetition_penalty=1.5"),
    ("encoder_no_repeat_ngram_size", dict(encoder_no_repeat_ngram_size=2), "encoder_no_repeat_ngram_size=2"),
    ("guidance_scale", dict(guidance_scale=1.5), "guidance_scale=1.5"),
    ("token_healing", dict(token_healing=True), "token_healing=True"),
    ("output_attentions", dict(output_attentions=True), "output_attentions=True"),
    ("output_attentions", dict(output_hidden_states=True), "output_hidden_states=True"),
    ("num_assistant_tokens_schedule", dict(num_assistant_tokens_schedule="heuristic"),
     "num_assistant_tokens_schedule='heuristic'"),
    ("assistant_confidence_threshold", dict(assistant_confidence_threshold=0.2), "assistant_confidence_threshold"),
    ("assistant_ensemble_weight", dict(assistant_ensemble_weight=0.5), "assistant_ensemble_weight"),
    ("is_assistant", dict(is_assistant=True), "is_assistant"),
    ("synced_gpus", dict(synced_gpus=True), "synced_gpus"),
    ("negative_prompt_ids", dict(negative_prompt_ids=torch.tensor([[7, 8]])), "negative_prompt_ids"),
    ("custom_generate", dict(custom_generate=lambda *a, **k: None), "custom_generate"),
    ("inputs_embeds", dict(inputs_embeds=torch.zeros(1, 2, 32)), "inputs_embeds"),
    ("position_ids", dict(position_ids=torch.tensor([[0, 1]])), "position_ids"),
    ("past_key_values", dict(past_key_values=DynamicCache()), "past_key_values"),
    (MODEL_INPUTS, dict(token_type_ids=torch.zeros(1, 2, dtype=torch.long)), "token_type_ids"),
]


@pytest.fixture(scope="module")
def context(target, assistants, tokenizer):  # noqa: F811
    ids = torch.tensor([ROWS[0]])
    plain = target.generate(ids, max_new_tokens=24, do_sample=False)[0, ids.shape[1]:].tolist()
    return SimpleNamespace(tok=tokenizer, plain=plain, draft=assistants[0])


def _generate(model, example, c, **flash):
    """``model.generate`` on ROWS (the first alone with a streamer, which takes one sequence) with ``example(c)``;
    ``max_new_tokens=12`` unless the example limits the length. Returns sequences, and scores and logits if any."""
    kw = example(c)
    rows = ROWS[:1] if "streamer" in kw else ROWS
    ids, mask = left_padded(rows)
    if "max_length" not in kw and "generation_config" not in kw:
        kw.setdefault("max_new_tokens", 12)
    if not flash:
        kw = {k: v for k, v in kw.items() if k not in DRAFT_SETTINGS}
    kw.setdefault("do_sample", False)
    out = model.generate(ids, attention_mask=mask, **kw, **flash)
    return (out,) if isinstance(out, torch.Tensor) else (out.sequences, *(out.scores or ()), *(out.logits or ()))


@pytest.mark.parametrize("row, example", HONOURED, ids=[f"{e[0]}-{i}" for i, e in enumerate(HONOURED)])
def test_honoured_options_give_stock_output(target, assistants, context, row, example):
    want = _generate(target, example, context)
    got = _generate(target, example, context, assistant_models=assistants, flashspec=True)
    assert torch.equal(got[0], want[0])
    assert len(got) == len(want)
    for mine, theirs in zip(got[1:], want[1:]):
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "row, kwargs, named", REFUSED_EXAMPLES, ids=[f"{e[0]}-{i}" for i, e in enumerate(REFUSED_EXAMPLES)]
)
def test_refused_options_raise_naming_the_option(target, assistants, row, kwargs, named):
    with pytest.raises(ValueError, match=re.escape(named)):
        target.generate(torch.tensor([[5, 17]]), max_new_tokens=4, assistant_models=assistants, flashspec=True,
                        **kwargs)


def _all_rows():
    return [*(o for rows in GENERATION_CONFIG_OPTIONS.values() for o in rows), *GENERATE_INPUTS]


def test_every_row_is_backed_by_a_test():
    """Honoured and no-effect rows compare with stock, refused rows (and refused values of honoured rows) raise."""
    compared = {row for row, _ in HONOURED}
    raised = {row for row, _, _ in REFUSED_EXAMPLES}
    for option in _all_rows():
        key = option.names[0]
        assert option.status == REFUSED or key in compared, f"no comparison with stock for {option.names}"
        assert (option.status != REFUSED and option.accepts is None) or key in raised, f"no error test: {option.names}"


def test_the_registry_classifies_every_generation_config_field():
    """A field that a new transformers adds fails here until the registry (and so the README) says what it does."""
    fields = {name for name in GenerationConfig().to_dict() if not name.startswith("_")}
    classified = [name for rows in GENERATION_CONFIG_OPTIONS.values() for option in rows for name in option.names]
    assert len(classified) == len(set(classified)), "a field in two rows"
    assert set(classified) == fields, f"unclassified: {fields - set(classified)}; unknown: {set(classified) - fields}"


def test_the_registry_classifies_every_generate_parameter():
    parameters = set(inspect.signature(_original_generate).parameters) - {"self", "kwargs"}
    assert parameters <= {name for option in GENERATE_INPUTS for name in option.names}


def test_the_readme_table_is_the_registry():
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    assert render_table() in readme, "README's option table is stale: paste flashspec_hf.options.render_table()"


def test_an_unclassified_field_is_refused(target, assistants, monkeypatch):
    """What a newer transformers adds is refused at call time until the registry classifies it."""
    import flashspec_hf.options

    monkeypatch.setattr(flashspec_hf.options, "_FIELDS", flashspec_hf.options._FIELDS | {"brand_new_knob"})
    with pytest.raises(ValueError, match="brand_new_knob=3 .* does not know"):
        target.generate(torch.tensor([[5, 17]]), max_new_tokens=4, assistant_models=assistants, flashspec=True,
                        generation_config=GenerationConfig(brand_new_knob=3, max_new_tokens=4))


def test_prompt_lookup_num_tokens_alone_drafts_by_prompt_lookup(target, context):
    """HF's knob (issue 14 item 6): a PromptLookup source with γ = prompt_lookup_num_tokens, no assistant_models."""
    kw = dict(max_new_tokens=20, do_sample=False, prompt_lookup_num_tokens=3, max_matching_ngram_size=1)
    want = _generate(target, lambda c: dict(kw), context)
    got = _generate(target, lambda c: dict(kw), context, flashspec=True)
    stats = target.flashspec_stats
    assert torch.equal(got[0], want[0])
    assert stats.arm_names == ["prompt_lookup"] and stats.num_assistant_tokens == 3


def test_prompt_lookup_num_tokens_must_be_one_of_the_gammas(target, assistants):
    ids = torch.tensor([[5, 17]])
    with pytest.raises(ValueError, match=re.escape("prompt_lookup_num_tokens=3 and num_assistant_tokens=5")):
        target.generate(ids, max_new_tokens=4, prompt_lookup_num_tokens=3, num_assistant_tokens=5, flashspec=True)
    target.generate(ids, max_new_tokens=4, prompt_lookup_num_tokens=3, num_assistant_tokens=[3, 5],
                    assistant_models=assistants, flashspec=True)
    assert target.flashspec_stats.arm_names[4:6] == ["prompt_lookup@3", "prompt_lookup@5"]  # after two models
    with pytest.raises(ValueError, match="prompt_lookup_num_tokens must be an integer >= 1"):
        target.generate(ids, max_new_tokens=4, prompt_lookup_num_tokens=0, flashspec=True)


def test_assistant_early_exit_drafts_with_the_first_layers(target):
    target.generate(torch.tensor([[5, 17]]), max_new_tokens=8, assistant_early_exit=1, flashspec=True)
    assert target.flashspec_stats.arm_names[0].endswith("-first1")
    with pytest.raises(ValueError, match=r"assistant_early_exit=2: a draft of a 2-layer target keeps 1 to 1 layers"):
        target.generate(torch.tensor([[5, 17]]), max_new_tokens=4, assistant_early_exit=2, flashspec=True)


@pytest.mark.parametrize("where", ["generation_config", "model"])
def test_stop_strings_from_a_generation_config(context, where):
    """Issue 13 item 8: stop strings set in a passed GenerationConfig or on model.generation_config, tokenizer=tok."""
    target = tiny_llama(layers=2, seed=0, peak=8.0)
    draft = tiny_llama(layers=1, seed=0, peak=8.0)
    stop = _word(context, 4)
    settings = dict(stop_strings=[stop], max_new_tokens=12, do_sample=False, pad_token_id=0)
    if where == "model":
        target.generation_config.update(**settings)
        kw = {}
    else:
        kw = dict(generation_config=GenerationConfig(**settings))
    ids = torch.tensor([ROWS[0]])
    want = target.generate(ids, tokenizer=context.tok, **kw)
    got = target.generate(ids, tokenizer=context.tok, assistant_models=[draft], flashspec=True, **kw)
    assert torch.equal(got, want) and context.tok.decode(got[0, -1]) == stop


def _tokenizer(words: list[str]) -> PreTrainedTokenizerFast:
    """A word-level tokenizer whose token ``i`` is ``words[i]`` (0 = <pad>, 1 = <s>, 2 = </s>)."""
    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<pad>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", bos_token="<s>", eos_token="</s>")


def test_a_draft_with_other_special_tokens_is_accepted(target):
    """Issue 13 item 9: a base draft of an instruct target (same vocabulary, other EOS and pad) drafts; only the
    target's special tokens are used."""
    base = tiny_llama(layers=1, seed=0, peak=8.0, eos=7)
    base.load_state_dict(target.state_dict(), strict=False)
    base.generation_config.pad_token_id = 5
    ids, mask = left_padded(ROWS)
    want = target.generate(ids, attention_mask=mask, max_new_tokens=16, do_sample=False)
    got = target.generate(ids, attention_mask=mask, max_new_tokens=16, do_sample=False, assistant_models=[base],
                          flashspec=True)
    assert torch.equal(got, want) and sum(map(sum, target.flashspec_stats.step_accepted)) > 0


def test_tokens_decide_when_both_tokenizers_are_given(target, tokenizer):  # noqa: F811
    """Same tokens: a draft whose vocabulary size is far from the target's is accepted; other tokens: refused."""
    ids = torch.tensor([[5, 17]])
    wide = tiny_llama(layers=1, vocab=4000)
    with pytest.raises(ValueError, match="do not share a tokenizer"):
        target.generate(ids, max_new_tokens=4, assistant_models=[wide], flashspec=True)
    target.generate(ids, max_new_tokens=4, assistant_models=[wide], flashspec=True, tokenizer=tokenizer,
                    assistant_tokenizer=tokenizer)
    vocab = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    swapped = _tokenizer(vocab[:3] + vocab[4:5] + vocab[3:4] + vocab[5:])
    with pytest.raises(ValueError, match="tokenizer and assistant_tokenizer differ .* id 3"):
        target.generate(ids, max_new_tokens=4, assistant_models=[wide], flashspec=True, tokenizer=tokenizer,
                        assistant_tokenizer=swapped)
    with pytest.raises(ValueError, match="pass tokenizer=... too"):
        target.generate(ids, max_new_tokens=4, assistant_models=[wide], flashspec=True, assistant_tokenizer=swapped)


def test_a_masked_lm_draft_is_a_type_error(target):
    """Issue 13 item 10: a clear TypeError naming the class and what is accepted, not an AttributeError."""
    bert = BertForMaskedLM(BertConfig(vocab_size=97, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                      intermediate_size=37))
    with pytest.raises(TypeError, match=r"assistant_models\[0\] must be a transformers causal LM .* BertForMaskedLM"):
        target.generate(torch.tensor([[5, 17]]), max_new_tokens=4, assistant_models=[bert], flashspec=True)


@pytest.mark.parametrize("cache_implementation", ["dynamic", "static"])
@pytest.mark.parametrize("do_sample", [False, True])
@pytest.mark.parametrize("default", ["device", "dtype"])
def test_any_default_device_or_dtype(target, assistants, default, do_sample, cache_implementation):
    """Issue 13 item 6: every buffer flashspec creates has an explicit device and dtype, so a call under
    ``torch.set_default_device`` (here "meta", where a tensor created on the default device has no data) or
    ``torch.set_default_dtype(torch.float64)`` equals stock (sampling with top_k=1 is deterministic)."""
    ids, mask = left_padded(ROWS)
    kw = dict(attention_mask=mask, max_new_tokens=12, do_sample=do_sample, top_k=1)
    want = target.generate(ids, **kw)
    try:
        if default == "device":
            torch.set_default_device("meta")
        else:
            torch.set_default_dtype(torch.float64)
        got = target.generate(ids, **kw, assistant_models=[*assistants, PromptLookup()], num_assistant_tokens=[1, 3],
                              flashspec=True, cache_implementation=cache_implementation)
    finally:
        torch.set_default_device(None)
        torch.set_default_dtype(torch.float32)
    assert torch.equal(got, want)
