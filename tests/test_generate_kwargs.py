"""generate under flashspec=True: the draft checks (tokenizers decide, not generation settings; a clear error for
what cannot draft), and any default device or dtype."""

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import BertConfig, BertForMaskedLM, PreTrainedTokenizerFast

from flashspec_hf import PromptLookup

from .conftest import left_padded, tiny_llama
from .test_integration import tokenizer  # noqa: F401  (fixture)

ROWS = [[5, 17, 33, 8, 90, 41, 7], [12, 60]]


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
