"""Grouped-query attention that reads each cached key and value once, for the static backend's forwards.

The static backend always passes a 4D mask (each row has its own length). Given a mask, transformers' ``sdpa``
attention repeats every key/value head ``n_rep = H / H_kv`` times before calling SDPA (``repeat_kv``; SDPA's own
``enable_gqa`` with a mask falls back to its math kernel on CUDA): per layer and forward, a copy of the layer's
whole static cache ``n_rep`` times its size, which SDPA then reads. On the H200 (SmolLM2-135M, ``n_rep`` = 3,
B = 32, 2026-12-03 profile) those copies took 0.84 ms of a 4.46 ms step and SDPA another 0.69 ms.

:func:`packed_sdpa` folds the ``n_rep`` query heads that share a key/value head into the query axis instead:
query ``[B, H, w, D]`` → ``[B, H_kv, n_rep·w, D]``, mask ``[B, 1, w, N]`` → ``[B, 1, n_rep·w, N]`` (a copy, ``n_rep``
times the mask), so SDPA reads each cached key and value once and nothing of the cache is copied. Every query
attends to the same keys with the same mask row as with ``repeat_kv``: the same attention, rounded by another kernel
tiling. (transformers 5.24 packs the same way for a one-token query outside ``torch.compile``, ``pack_gqa``;
verification queries ``γ + 1`` tokens, compiled.) Past a width where the mask's copy would outweigh the keys' and
values' (a long prefill), it repeats them as transformers does.

:func:`packed_attention` switches models to it for the duration of a block.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
from collections.abc import Iterator

import torch
from transformers import AttentionInterface, PretrainedConfig, PreTrainedModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "flashspec_packed_sdpa"
"""The attention implementation's name in transformers' ``AttentionInterface`` (and, with ``sdpa``'s mask function,
in ``AttentionMaskInterface``)."""

UNPACKED_KWARGS = ("softcap", "position_bias", "s_aux", "indices")
"""Attention arguments that, when given (not None), send a call to transformers' ``sdpa`` as it is (which raises
on soft-capping in recent versions; attention sinks and sparse indices are for implementations other than sdpa)."""

PACKED_MASK = "flashspec_packed_mask"
"""Keyword argument of a forward (and so of its attention calls) holding the mask already packed
(:func:`packed_mask`, :func:`mask_groups`); :func:`packed_sdpa` uses it where its shape fits the call."""


def packed_sdpa(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                is_causal: bool | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: ``query`` ``[B, H, w, D]``, ``key`` ``[B, H_kv, N, D]`` and
    ``value`` ``[B, H_kv, N, D_v]`` (one dtype), ``attention_mask`` bool or additive in the query's dtype
    ``[B | 1, 1, w, N]`` (or any mask transformers' sdpa takes); returns the output ``[B, w, H, D_v]``
    (contiguous) and no weights. Packed (module docstring) on CUDA and the CPU when the heads are grouped
    (``module.num_key_value_groups`` = ``H / H_kv`` > 1), the mask is 4D and shared by the heads, there is no
    dropout, none of :data:`UNPACKED_KWARGS` is given, and the packed mask is no larger than the repeated keys and
    values would be; any other call goes to transformers' ``sdpa_attention_forward`` as given. The packed mask is
    ``kwargs[PACKED_MASK]`` where given with the packed shape on the query's device (the caller packed this call's
    mask once for all layers), else packed here. Raises what SDPA raises on inconsistent shapes."""
    groups = getattr(module, "num_key_value_groups", 1)
    batch, heads, width, dim = query.shape
    packable = (
        groups > 1 and heads == key.shape[1] * groups and query.device.type in ("cuda", "cpu")
        and attention_mask is not None and attention_mask.dim() == 4 and attention_mask.shape[1:3] == (1, width)
        and not dropout and all(kwargs.get(name) is None for name in UNPACKED_KWARGS)
        and groups * width * attention_mask.element_size() <= 2 * heads * dim * key.element_size()
    )
    if not packable:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    packed = query.reshape(batch, key.shape[1], groups * width, dim)  # [B, H_kv, n_rep·w, D]
    given = kwargs.get(PACKED_MASK)
    fits = (given is not None and given.device == query.device
            and given.shape == (attention_mask.shape[0], 1, groups * width, attention_mask.shape[3]))
    mask = given if fits else packed_mask(attention_mask, groups)  # [B | 1, 1, n_rep·w, N]
    out = torch.nn.functional.scaled_dot_product_attention(packed, key, value, attn_mask=mask, scale=scaling)
    return out.reshape(out.shape[0], heads, width, -1).transpose(1, 2).contiguous(), None  # [B, w, H, D_v]


def packed_mask(attention_mask: torch.Tensor, groups: int) -> torch.Tensor:
    """``attention_mask`` ``[B | 1, 1, w, N]`` (any dtype) repeated for ``groups`` packed query heads: ``[B | 1, 1,
    groups·w, N]``, row ``i·w + j`` being query ``j``'s (a copy)."""
    mask_batch, _, width, columns = attention_mask.shape
    return attention_mask.unsqueeze(2).expand(mask_batch, 1, groups, width, columns).reshape(
        mask_batch, 1, groups * width, columns)


def mask_groups(model: PreTrainedModel) -> int:
    """``n_rep`` for which a caller may pass ``model`` the packed mask once per forward (keyword
    :data:`PACKED_MASK`, which transformers hands to every attention call), instead of each layer packing it (inside a
    compiled forward, one copy per layer): the one ``num_key_value_groups`` of its attention modules, or 1 (pass
    nothing) when they differ, none is grouped, or its ``forward`` takes no extra keyword arguments."""
    groups = {m.num_key_value_groups for m in model.modules() if hasattr(m, "num_key_value_groups")}
    takes_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD
                       for p in inspect.signature(type(model).forward).parameters.values())
    return groups.pop() if len(groups) == 1 and takes_kwargs else 1


AttentionInterface.register(NAME, packed_sdpa)
AttentionMaskInterface.register(NAME, sdpa_mask)


def model_configs(models: list[PreTrainedModel]) -> list[PretrainedConfig]:
    """Every config the modules of ``models`` read, once each (an early-exit draft's layers read the target's),
    except those of models whose code reads the attention implementation's name (:func:`_reads_the_name`)."""
    found = {id(m.config): m.config for model in models if not _reads_the_name(model) for m in model.modules()
             if isinstance(getattr(m, "config", None), PretrainedConfig)}
    return list(found.values())


def _reads_the_name(model: PreTrainedModel) -> bool:
    """Whether the Python module of any of ``model``'s modules names ``"sdpa"`` (some models branch on the
    implementation's name, e.g. to build a sparse mask only for ``eager`` and ``sdpa``: another name would change what
    they compute), or has no source to tell."""
    return any(_names_sdpa(type(m).__module__) for m in model.modules())


@functools.cache
def _names_sdpa(module_name: str) -> bool:
    module = sys.modules.get(module_name)
    try:
        source = inspect.getsource(module)
    except (TypeError, OSError):
        return True
    return '"sdpa"' in source or "'sdpa'" in source


@contextlib.contextmanager
def packed_attention(configs: list[PretrainedConfig]) -> Iterator[bool]:
    """Within the block (given whether any of the configs then reads :func:`packed_sdpa`), the configs
    (:func:`model_configs`) whose attention implementation is ``sdpa`` use :func:`packed_sdpa` instead, while ``sdpa``
    is transformers' own function (not one registered over it); each gets its own value back after the block, also on an
    error. Each config is switched alone (transformers' setter would also set its sub-configs), and only where it reads
    ``sdpa``, so nested blocks and other implementations (eager, flash) are left as they are. Meant for forwards that
    pass a 4D mask (transformers then builds none: a 2D mask would get ``sdpa``'s). The configs are shared state:
    another thread using the same models meanwhile runs :func:`packed_sdpa` too (the same attention), and forwards
    compiled inside the block specialise on its name (as flashspec's compiled forwards, which run only inside it)."""
    ours = AttentionInterface._global_mapping.get("sdpa") is sdpa_attention_forward
    switched = [c for c in configs if ours and c._attn_implementation == "sdpa"]
    for config in switched:
        config._attn_implementation_internal = NAME
    try:
        yield any(c._attn_implementation == NAME for c in configs)  # this block's switches, or an outer block's
    finally:
        for config in switched:
            config._attn_implementation_internal = "sdpa"
