"""Drafts made of a target's own parts: a copy of its config cut to its first layers, and the modules a draft shares
with its target (embeddings, rotary embedding, LM head) instead of holding copies.

Used by the early-exit drafts (:func:`flashspec_hf.models.early_exit_assistants`), draft construction for
distillation (:func:`flashspec_hf.distill.make_draft`) and the compact draft format
(:func:`flashspec_hf.compact.load_compact`).
"""

from __future__ import annotations

import copy

from transformers import PretrainedConfig, PreTrainedModel


def truncated_config(config: PretrainedConfig, num_layers: int) -> PretrainedConfig:
    """A deep copy of ``config`` for a model of its first ``num_layers`` decoder layers: ``num_hidden_layers`` set
    and, where the config lists a type per layer (``layer_types``: full / sliding attention, ...), that list cut to
    the first ``num_layers``. ``config`` itself is left unchanged.

    Raises:
        ValueError: ``num_layers`` not in ``[1, num_hidden_layers)`` (a draft must be shallower than its target).
    """
    total = config.num_hidden_layers
    if not 0 < num_layers < total:
        raise ValueError(f"a draft of a {total}-layer target keeps 1 to {total - 1} layers, got {num_layers}")
    cut = copy.deepcopy(config)
    cut.num_hidden_layers = num_layers
    if getattr(cut, "layer_types", None):
        cut.layer_types = cut.layer_types[:num_layers]
    return cut


def share_target_modules(draft: PreTrainedModel, target: PreTrainedModel) -> PreTrainedModel:
    """Point the draft's embeddings, rotary embedding and LM head at the target's modules (no copy) and give it
    the target's generation config (same special tokens). Both need the Llama module layout (``model.embed_tokens``,
    ``model.rotary_emb``, ``lm_head``). Returns ``draft``."""
    draft.model.embed_tokens = target.model.embed_tokens
    draft.model.rotary_emb = target.model.rotary_emb
    draft.lm_head = target.lm_head
    draft.generation_config = copy.deepcopy(target.generation_config)
    return draft


def is_early_exit_of(draft: PreTrainedModel, target: PreTrainedModel) -> bool:
    """True when the draft's decoder layers are the target's first ones (the same modules, as
    :func:`flashspec_hf.models.early_exit_assistants` builds them) and it embeds tokens with the target's
    embeddings: the keys and values the target caches for those layers are then the ones the draft would compute
    (the shared KV cache of LayerSkip's self-speculative decoding, Elhoushi et al., 2024), so the static loop lets
    it read and write the target's cache instead of keeping its own."""
    draft_base, target_base = getattr(draft, "model", None), getattr(target, "model", None)
    draft_layers, target_layers = getattr(draft_base, "layers", None), getattr(target_base, "layers", None)
    if draft is target or draft_layers is None or target_layers is None or len(draft_layers) >= len(target_layers):
        return False
    return draft_base.embed_tokens is target_base.embed_tokens and all(
        mine is theirs for mine, theirs in zip(draft_layers, target_layers)
    )
