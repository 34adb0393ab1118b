"""generate / pipeline integration: kwargs keep their meaning, stock behaviour without the flag, clear errors."""


import pytest
import torch
from transformers import GenerationConfig, pipeline
from transformers.generation.streamers import BaseStreamer

from flashspec_hf import FlashSpecStats, ThompsonSampling, UCB1

from .conftest import assert_rows_equal_stock, left_padded, tiny_llama

PROMPT = "w5 w17 w33 w8 w90"


def test_without_the_flag_generate_is_stock(target, assistants):
    ids = torch.tensor([[5, 17, 33]])
    assert torch.equal(target.generate(ids, max_new_tokens=5), target.generate(ids, max_new_tokens=5, flashspec=False))
    with pytest.raises(ValueError, match="assistant_models need flashspec=True"):
        target.generate(ids, max_new_tokens=5, assistant_models=assistants)
    with pytest.raises(TypeError, match="flashspec takes True or False, got 'yes'"):  # not read as truthy
        target.generate(ids, max_new_tokens=5, assistant_models=assistants, flashspec="yes")


def test_pipeline_passes_flashspec_kwargs(target, assistants, tokenizer):
    pipe = pipeline("text-generation", model=target, tokenizer=tokenizer)
    kw = dict(max_new_tokens=12, do_sample=False, return_full_text=False)
    want = pipe(PROMPT, **kw)
    got = pipe(PROMPT, assistant_models=assistants, flashspec=True, **kw)
    assert got == want and isinstance(target.flashspec_stats, FlashSpecStats)
    batch = pipe([PROMPT, "w12 w60"], assistant_models=assistants, flashspec=True, batch_size=2, **kw)
    assert batch[0] == want


def test_pipeline_stop_sequence(target, assistants, tokenizer):
    pipe = pipeline("text-generation", model=target, tokenizer=tokenizer)
    full = pipe(PROMPT, max_new_tokens=12, do_sample=False, return_full_text=False)[0]["generated_text"].split()
    stop = full[4]  # a word the target produces mid-block
    kw = dict(max_new_tokens=12, do_sample=False, return_full_text=False, stop_sequence=stop)
    got = pipe(PROMPT, assistant_models=[target], flashspec=True, num_assistant_tokens=6, **kw)
    assert got == pipe(PROMPT, **kw)
    assert got[0]["generated_text"].split() == full[: full.index(stop) + 1]


def test_streamer_receives_prompt_then_every_token(target, assistants):
    class Collect(BaseStreamer):
        def __init__(self):
            self.chunks, self.ended = [], False

        def put(self, value):
            self.chunks.append(value.flatten().tolist())

        def end(self):
            self.ended = True

    streamer = Collect()
    ids = torch.tensor([[5, 17, 33, 8]])
    out = target.generate(ids, max_new_tokens=15, assistant_models=assistants, flashspec=True, streamer=streamer)
    assert streamer.ended and streamer.chunks[0] == ids[0].tolist()
    assert sum(streamer.chunks[1:], []) == out[0, 4:].tolist()


def test_return_dict_scores_match_stock(target, assistants):
    ids = torch.tensor([[5, 17, 33, 8]])
    kw = dict(max_new_tokens=9, do_sample=False, return_dict_in_generate=True, output_scores=True, output_logits=True)
    want = target.generate(ids, **kw)
    got = target.generate(ids, assistant_models=assistants, flashspec=True, **kw)
    assert torch.equal(got.sequences, want.sequences)
    assert len(got.scores) == len(want.scores) == len(got.logits) == 9
    for mine, theirs in zip(got.scores + got.logits, want.scores + want.logits):
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-4)


def test_num_return_sequences_with_sampling(target, assistants):
    out = target.generate(
        torch.tensor([[5, 17]]), do_sample=True, num_return_sequences=3, max_new_tokens=6,
        assistant_models=assistants, flashspec=True,
    )
    assert out.shape == (3, 8)


def test_generation_config_sets_gamma(target, assistants):
    config = GenerationConfig(num_assistant_tokens=2, max_new_tokens=8, do_sample=False, pad_token_id=0)
    target.generate(torch.tensor([[5, 17]]), generation_config=config, assistant_models=assistants, flashspec=True)
    assert target.flashspec_stats.num_assistant_tokens == 2


@pytest.mark.parametrize("selector", ["ucb1", "thompson", UCB1(), ThompsonSampling(seed=3)])
def test_selectors_by_name_or_instance(target, assistants, selector):
    target.generate(torch.tensor([[5, 17]]), max_new_tokens=10, assistant_models=assistants, flashspec=True, selector=selector)
    assert set(target.flashspec_stats.step_arms) <= {0, 1}


def test_stats_are_consistent(target, assistants):
    ids = torch.tensor([[5, 17, 33]])
    out = target.generate(ids, max_new_tokens=16, assistant_models=assistants, flashspec=True, num_assistant_tokens=3)
    s = target.flashspec_stats
    assert s.new_tokens == out.shape[1] - 3 == 16
    assert sum(map(sum, s.step_accepted)) + s.steps >= 16 and 1.0 <= s.tau <= 4.0
    assert abs(sum(s.arm_share.values()) - 1.0) < 1e-9 and s.tokens_per_second > 0
    assert len(s.step_seconds) == s.steps and min(s.step_seconds) > 0 and sum(s.step_seconds) <= s.seconds


def _error(target, match, exc=ValueError, **kw):
    with pytest.raises(exc, match=match):
        target.generate(torch.tensor([[5, 17]]), max_new_tokens=4, **{"flashspec": True, **kw})


def test_bad_input_raises_clear_errors(target, assistants):
    _error(target, "needs draft models")
    _error(target, "is empty", assistant_models=[])
    _error(target, "beam search", assistant_models=assistants, num_beams=2)
    _error(target, "cache_implementation='static'", assistant_models=assistants, cache_implementation="offloaded")
    _error(target, "must be a transformers causal LM", TypeError, assistant_models=[object()])
    _error(target, "do not share a tokenizer", assistant_models=[tiny_llama(layers=1, vocab=5000)])
    _error(target, "num_assistant_tokens", assistant_models=assistants, num_assistant_tokens=0)
    _error(target, "or a list of them", assistant_models=assistants, num_assistant_tokens=[2, 0])
    _error(target, "a γ twice", assistant_models=assistants, num_assistant_tokens=[2, 2])
    _error(target, "unknown selector", assistant_models=assistants, selector="greedy-bandit")
    _error(target, "stop_strings needs the tokenizer", assistant_models=assistants, stop_strings=["w5"])


def test_user_eos_criteria_is_honoured(target, assistants):
    from transformers.generation.stopping_criteria import EosTokenCriteria, StoppingCriteriaList

    ids = torch.tensor([[5, 17, 33, 8]])
    plain = target.generate(ids, max_new_tokens=20, do_sample=False)[0, 4:]
    stop = int(plain[6])
    criteria = StoppingCriteriaList([EosTokenCriteria(stop)])
    want = target.generate(ids, max_new_tokens=20, do_sample=False, stopping_criteria=criteria)
    got = target.generate(ids, max_new_tokens=20, do_sample=False, stopping_criteria=criteria,
                          assistant_models=[target], flashspec=True)
    assert torch.equal(got, want) and int(got[0, -1]) == stop


@pytest.mark.parametrize("prompt_prior", [False, True])
@pytest.mark.parametrize("cache_implementation", [None, "static"])
def test_target_spread_by_accelerate_device_map(target, assistants, tmp_path, cache_implementation, prompt_prior):
    """A target whose second layer is offloaded to disk by accelerate (hooks move its weights in at each
    forward): both loops stay exact. With the prompt prior, its prefill keeps the window's logits (a slice, which
    the hooks leave alone) and every source is scored."""
    from transformers import AutoModelForCausalLM

    from flashspec_hf import RoundRobin, ThompsonSampling

    target.save_pretrained(tmp_path / "target")
    device_map = {"model.embed_tokens": "cpu", "model.layers.0": "cpu", "model.layers.1": "disk",
                  "model.norm": "cpu", "model.rotary_emb": "cpu", "lm_head": "cpu"}
    spread = AutoModelForCausalLM.from_pretrained(tmp_path / "target", device_map=device_map,
                                                  offload_folder=tmp_path / "offload")
    assert "disk" in spread.hf_device_map.values()
    rows = [[5, 17, 33, 8, 90, 41, 7], [12, 60]]
    ids, mask = left_padded(rows)
    class Recording(ThompsonSampling):
        def prior(self, successes, trials):
            self.trials = trials

    selector = Recording(prompt_weight=16) if prompt_prior else RoundRobin()
    out = spread.generate(ids, attention_mask=mask, max_new_tokens=16, do_sample=False, assistant_models=assistants,
                          flashspec=True, cache_implementation=cache_implementation, selector=selector)
    assert_rows_equal_stock(target, rows, out[:, ids.shape[1]:], 16)
    if prompt_prior:
        assert min(selector.trials) > 0, "every draft was scored on the prompt"
