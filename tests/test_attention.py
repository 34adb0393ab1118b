"""Packed grouped-query attention (flashspec_hf.attention): equal to transformers' sdpa with repeated keys and values,
used by the static loop's forwards only while they run."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AttentionInterface, FalconConfig, FalconForCausalLM
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from flashspec_hf import attention
from flashspec_hf.attention import NAME, model_configs, packed_attention, packed_mask, packed_sdpa
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


def _count_fallbacks(monkeypatch) -> list:
    """Records the calls packed_sdpa hands to transformers' sdpa."""
    calls, stock = [], attention.sdpa_attention_forward
    monkeypatch.setattr(attention, "sdpa_attention_forward", lambda *a, **k: calls.append(1) or stock(*a, **k))
    return calls


@pytest.mark.parametrize("case", ["no mask", "per-head mask", "query-broadcast mask", "dropout", "softcap",
                                  "position bias", "sinks", "ungrouped", "wide"])
def test_calls_it_cannot_pack_go_to_transformers_sdpa(monkeypatch, case):
    fallbacks = _count_fallbacks(monkeypatch)
    groups = 1 if case == "ungrouped" else 2
    width = 40 if case == "wide" else 3  # per column: 2 * 40 * 4 bytes of packed mask > 2 * 4 * 8 * 4 of keys, values
    query = torch.randn(2, 2 * groups, width, 8)
    key = value = torch.randn(2, 2, 50, 8)
    mask = torch.zeros(2, 1, width, 50)
    kwargs = {}
    if case == "no mask":
        mask = None
    elif case == "per-head mask":
        mask = torch.zeros(2, 2 * groups, width, 50)
    elif case == "query-broadcast mask":
        mask = torch.zeros(2, 1, 1, 50)
    elif case == "dropout":
        kwargs["dropout"] = 0.1
    elif case == "softcap":
        kwargs["softcap"] = 0.0
    elif case == "position bias":
        kwargs["position_bias"] = torch.zeros(1, 2 * groups, width, 50)
    elif case == "sinks":
        kwargs["s_aux"] = torch.zeros(2 * groups)
    try:
        packed_sdpa(_Module(groups), query, key, value, mask, **kwargs)
    except ValueError:  # transformers' sdpa refusing soft-capping (5.24)
        assert case == "softcap"
    assert len(fallbacks) == 1
    packed_sdpa(_Module(2), torch.randn(2, 4, 3, 8), key, value, torch.zeros(2, 1, 3, 50))
    assert len(fallbacks) == 1  # the packable call next to it is packed


def test_the_static_loop_packs_every_attention_and_restores_the_models_implementation(monkeypatch):
    target, draft = tiny_llama(seed=0), tiny_llama(seed=1)  # 4 query heads over 2 key/value heads
    draft.config._attn_implementation = "eager"  # left alone
    heads, sdpa = [], torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention",
                        lambda query, *a, **k: heads.append(query.shape[1]) or sdpa(query, *a, **k))
    inner = []
    monkeypatch.setattr(attention, "packed_mask", lambda *a: inner.append(1) or packed_mask(*a))
    target.generate(torch.tensor([[1, 5, 7, 9]]), assistant_models=[draft], flashspec=True,
                    cache_implementation="static", max_new_tokens=6, do_sample=False)
    layers = target.config.num_hidden_layers
    assert heads and set(heads) == {2} and len(heads) % layers == 0  # the target's forwards, all packed
    assert len(inner) == layers  # only the prefill packs in every layer: a step's forward gets its mask packed once
    assert target.config._attn_implementation == "sdpa" and draft.config._attn_implementation == "eager"


def test_a_step_packs_no_mask_for_a_model_whose_attention_is_not_packed(monkeypatch):
    """An eager target and draft (grouped heads, so packable if they were sdpa) get no packed mask in their steps:
    nothing would read it."""
    from flashspec_hf import runners

    target, draft = tiny_llama(seed=0), tiny_llama(seed=1)
    for model in (target, draft):
        model.config._attn_implementation = "eager"
    built = []
    monkeypatch.setattr(runners, "packed_mask", lambda *a: built.append(1) or packed_mask(*a))
    target.generate(torch.tensor([[1, 5, 7, 9]]), assistant_models=[draft], flashspec=True,
                    cache_implementation="static", max_new_tokens=6, do_sample=False)
    assert built == []
    target.config._attn_implementation = "sdpa"  # the same call with the target's attention packed
    target.generate(torch.tensor([[1, 5, 7, 9]]), assistant_models=[draft], flashspec=True,
                    cache_implementation="static", max_new_tokens=6, do_sample=False)
    assert built


def test_models_whose_code_reads_the_implementations_name_are_not_switched():
    falcon = FalconForCausalLM(FalconConfig(vocab_size=97, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                            new_decoder_architecture=True, num_kv_heads=2))
    assert model_configs([falcon]) == []  # falcon branches on "sdpa"
    assert len(model_configs([tiny_llama()])) == 1


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


def test_a_given_packed_mask_is_used_only_with_the_packed_shape_on_the_querys_device():
    query, key = torch.randn(1, 4, 3, 8), torch.randn(1, 2, 6, 8)
    mask = torch.where(torch.rand(1, 1, 3, 6, generator=torch.Generator().manual_seed(0)) < 0.5, 0.0, -1e9)
    mask[..., 0] = 0.0
    stock, _ = sdpa_attention_forward(_Module(2), query, key, key, mask)
    for given in (torch.zeros(1, 1, 6, 6, device="meta"), torch.zeros(1, 1, 3, 6)):  # another device; unpacked shape
        out, _ = packed_sdpa(_Module(2), query, key, key, mask, **{attention.PACKED_MASK: given})
        torch.testing.assert_close(out, stock)
    unmasked = torch.zeros_like(packed_mask(mask, 2))  # fits, and is wrong: it shows it was used
    out, _ = packed_sdpa(_Module(2), query, key, key, mask, **{attention.PACKED_MASK: unmasked})
    assert not torch.allclose(out, stock)
