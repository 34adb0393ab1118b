"""The compact draft format: a distilled draft stored without the tensors it takes from its target.

A compact folder holds ``config.json``, ``model.safetensors`` (the draft's own weights in fp16: its decoder layers
and final norm, not the names in :data:`SHARED`) and optionally ``vocab.safetensors`` (``token_ids``, int64
``[S]``: the tokens its head keeps). "Sharing with the target" means that at load time the draft's embeddings,
rotary embedding and LM head are the target's own modules (:func:`~flashspec_hf.target_parts.share_target_modules`,
no copy), and a reduced head is a copy of the target's rows for those ``S`` tokens. The bundled assistants
(``flashspec_hf/assistants/``) and the ``compact/`` folder of every :func:`~flashspec_hf.distill.distill` run
are in this format.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import PreTrainedModel

from .target_parts import share_target_modules

SHARED = ("model.embed_tokens.weight", "lm_head.weight")
"""Tensors a compact draft takes from its target (state-dict names; not stored in its folder)."""


def save_compact(draft: PreTrainedModel, folder: str | Path, vocab_ids: torch.Tensor | None = None) -> Path:
    """Write ``draft`` to ``folder`` (created if needed) in the compact format: its own weights (fp16 safetensors,
    without the target's embeddings and head), its config, and optionally the token ids its head keeps.

    Args:
        draft: the trained draft (any device and dtype).
        folder: where ``config.json``, ``model.safetensors`` and (with ``vocab_ids``) ``vocab.safetensors`` go.
        vocab_ids: int ``[S]`` token ids the draft's head keeps (see :func:`~flashspec_hf.distill.frequent_tokens`);
            None: the full head.

    Returns:
        ``folder`` as a Path.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    own = {k: v.detach().to("cpu", torch.float16).contiguous() for k, v in draft.state_dict().items() if k not in SHARED}
    save_file(own, folder / "model.safetensors")
    draft.config.to_json_file(folder / "config.json")
    if vocab_ids is not None:
        save_file({"token_ids": vocab_ids.to(torch.long).contiguous()}, folder / "vocab.safetensors")
    return folder


def load_compact(folder: str | Path, target: PreTrainedModel, name: str | None = None) -> PreTrainedModel:
    """A compact draft on the target's device and dtype, sharing the target's embeddings (no copy).

    Its LM head is the target's, or, with a ``vocab.safetensors``, the target's rows for those ``S`` tokens only
    (``S / V`` of the head's cost per drafted token); the model then has a ``draft_vocab_ids`` int64 ``[S]``
    attribute, its logits are ``[..., S]``, and the other tokens have draft probability 0.

    Args:
        folder: a compact folder (see :func:`save_compact`).
        target: the model the draft was distilled for; it is left untouched (no cast, no move).
        name: the draft's ``name_or_path`` (the arm's name in :class:`~flashspec_hf.stats.FlashSpecStats`);
            default the folder's name.

    Raises:
        ValueError: the draft was trained for a target with other dimensions.
    """
    folder = Path(folder)
    config = type(target.config).from_json_file(folder / "config.json")
    if config.hidden_size != target.config.hidden_size or config.vocab_size != target.config.vocab_size:
        raise ValueError(f"{folder} was distilled for another target (hidden/vocab sizes differ)")
    config.name_or_path = name or folder.name
    with torch.device("meta"):
        draft = type(target)(config)
    # weights converted before assignment: no whole-model .to(), which would also cast the modules shared with the
    # target (its fp32 rotary frequencies) or move them off their devices
    device, dtype = target.get_input_embeddings().weight.device, target.dtype
    weights = {k: v.to(device, dtype) for k, v in load_file(folder / "model.safetensors").items()}
    draft.load_state_dict(weights, strict=False, assign=True)
    draft = share_target_modules(draft, target).eval()
    if (folder / "vocab.safetensors").exists():
        head_weight = target.lm_head.weight
        ids = load_file(folder / "vocab.safetensors")["token_ids"].to(head_weight.device)
        draft.lm_head = nn.Linear(config.hidden_size, len(ids), bias=False, device=head_weight.device, dtype=dtype)
        draft.lm_head.weight.data = head_weight.data[ids]  # [S, hidden], a copy
        draft.register_buffer("draft_vocab_ids", ids, persistent=False)  # moves with the draft
    return draft
