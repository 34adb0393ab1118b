"""Packed grouped-query attention (flashspec_hf.attention): equal to transformers' sdpa with repeated keys and values,
used by the static loop's forwards only while they run."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from flashspec_hf.attention import NAME, model_configs, packed_attention, packed_sdpa
from tests.conftest import tiny_llama


class _Module(torch.nn.Module):
    def __init__(self, groups: int):
        super().__init__()
        self.num_key_value_groups = groups


@settings(max_examples=40, deadline=None)
@given(batch=st.integers(1, 3), kv_heads=st.integers(1, 3), groups=st.integers(1, 4), width=st.integers(1, 6),
       columns=st.integers(1, 12), boolean=st.booleans(), broadcast=st.booleans(), seed=st.integers(0, 2**16))
def test_packed_attention_equals_repeated_keys_and_values(batch, kv_heads, groups, width, columns, boolean, broadcast,
                                                          seed):
    gen = torch.Generator().manual_seed(seed)
    query = torch.randn(batch, width, kv_heads * groups, 8, generator=gen).transpose(1, 2)  # [B, H, w, D], as models
    key, value = (torch.randn(batch, kv_heads, columns, 8, generator=gen) for _ in range(2))  # [B, H_kv, N, D]
    allowed = torch.rand(1 if broadcast else batch, 1, width, columns, generator=gen) < 0.6
    allowed[..., 0] = True  # every query sees a column
    mask = allowed if boolean else torch.where(allowed, 0.0, torch.finfo(torch.float32).min)
    module = _Module(groups)
    packed, _ = packed_sdpa(module, query, key, value, mask, scaling=0.3)
    stock, _ = sdpa_attention_forward(module, query, key, value, mask, scaling=0.3)
    assert packed.shape == stock.shape == (batch, width, kv_heads * groups, 8)
    torch.testing.assert_close(packed, stock, rtol=1e-5, atol=1e-6)


def test_the_static_loop_runs_packed_attention_and_restores_the_models_implementation(monkeypatch):
    target, draft = tiny_llama(seed=0), tiny_llama(seed=1)
    draft.config._attn_implementation = "eager"  # left alone
    calls = []

    def spy(module, query, *args, **kwargs):
        calls.append(query.shape)
        return packed_sdpa(module, query, *args, **kwargs)

    monkeypatch.setitem(AttentionInterface._global_mapping, NAME, spy)
    prompt = torch.tensor([[1, 5, 7, 9]])
    target.generate(prompt, assistant_models=[draft], flashspec=True, cache_implementation="static",
                    max_new_tokens=6, do_sample=False)
    layers = target.config.num_hidden_layers
    assert calls and len(calls) % layers == 0  # the target's forwards only: the draft is eager
    assert target.config._attn_implementation == "sdpa" and draft.config._attn_implementation == "eager"


def test_packed_attention_restores_on_error_and_leaves_nested_blocks_alone():
    model = tiny_llama()
    configs = model_configs([model])
    with pytest.raises(RuntimeError):
        with packed_attention(configs):
            with packed_attention(configs):
                assert model.config._attn_implementation == NAME
            assert model.config._attn_implementation == NAME  # the inner block did not switch it back
            raise RuntimeError
    assert model.config._attn_implementation == "sdpa"
