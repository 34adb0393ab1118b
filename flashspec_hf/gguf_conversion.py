"""A GGUF checkpoint turned into a plain ``from_pretrained`` folder: dequantised safetensors weights in the dtype
asked for, config, generation config and tokenizer (with its chat template).

One tensor at a time: each is dequantised (``gguf``), renamed and rearranged to its transformers name and layout
(transformers' own GGUF tables and per-architecture processors, as ``from_pretrained(..., gguf_file=...)`` uses
for the architectures it unpacks at load time: llama, qwen2 and most others) and written to a shard of at most
``shard_bytes``. Besides the GGUF's memory-mapped pages and the tokenizer, memory holds one shard and one float32
tensor whatever the model's size (peak 4.5 GB for Qwen2.5-Coder-1.5B-Instruct to bf16, 4.0 GB to fp32), where
``from_pretrained`` followed by ``save_pretrained`` would hold the whole model twice (14 GB for it in fp32).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

INDEX = "model.safetensors.index.json"


def convert_gguf(gguf_path: str | os.PathLike, folder: str | os.PathLike, dtype: torch.dtype,
                 shard_bytes: int = 1 << 30) -> Path:
    """Write ``folder``: the GGUF's weights dequantised to ``dtype`` (safetensors shards of at most ``shard_bytes``
    bytes, 1 GiB by default, and their index), ``config.json``, ``generation_config.json`` and the tokenizer.

    The folder is written as ``folder`` + ``.partial-<pid>`` and renamed at the end, so ``folder`` is never half
    written; when it exists by then (another process converted the same file first), that copy is kept and this
    one dropped.

    Args:
        gguf_path: the ``.gguf`` file (any quantisation ``gguf`` can dequantise).
        folder: where the converted model goes.
        dtype: the weights' dtype (``torch.float32``, ``torch.bfloat16``, ...); also the config's ``dtype``.
        shard_bytes: the largest shard in bytes (a tensor larger than it gets a shard of its own).

    Returns:
        ``folder`` as a Path.

    Raises:
        ImportError: the ``gguf`` package is missing (``pip install gguf``).
        ValueError: the file misses weights the model needs, or holds ones transformers cannot place.
    """
    gguf_path, folder = Path(gguf_path), Path(folder)
    from gguf import GGUFReader

    config = AutoConfig.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    config.dtype = dtype
    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(config)
    config.architectures = [type(skeleton).__name__]
    reader = GGUFReader(gguf_path)
    partial = folder.with_name(f"{folder.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        _write_shards(reader, skeleton, dtype, partial, shard_bytes)
        config.save_pretrained(partial)
        GenerationConfig.from_model_config(config).save_pretrained(partial)
        AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name).save_pretrained(partial)
        if not folder.exists():
            partial.rename(folder)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return folder


def _write_shards(reader, skeleton, dtype: torch.dtype, folder: Path, shard_bytes: int) -> None:
    """Dequantise, rearrange and cast each tensor of ``reader`` (a ``gguf.GGUFReader``), and write them in file
    order into ``model-0000i-of-0000n.safetensors`` shards plus ``model.safetensors.index.json``.

    Raises:
        ValueError: a tensor with no place in ``skeleton`` (the model on the meta device), one the architecture's
            processor renames (split or merged tensors, as in mixtures of experts: not handled here), or a weight
            of the model that the file lacks (of tied weights, one is enough).
    """
    from gguf import dequantize
    from transformers.modeling_gguf_pytorch_utils import TENSOR_PROCESSORS, TensorProcessor, get_gguf_hf_weights_map

    field = reader.fields["general.architecture"]
    architecture = bytes(field.parts[field.data[0]]).decode()
    processor = TENSOR_PROCESSORS.get(architecture, TensorProcessor)(config=skeleton.config.to_dict())
    mapping = get_gguf_hf_weights_map(skeleton, processor)  # GGUF name -> transformers name
    unplaced = [t.name for t in reader.tensors if t.name not in mapping]
    tied = {"lm_head.weight"} if skeleton.config.tie_word_embeddings else set()
    missing = sorted(set(skeleton.state_dict()) - {mapping.get(t.name) for t in reader.tensors} - tied)
    if unplaced or missing:
        raise ValueError(f"{architecture} GGUF: tensors with no place in {type(skeleton).__name__} {unplaced[:5]}, "
                         f"weights of the model missing from the file {missing[:5]}")
    itemsize = torch.empty(0, dtype=dtype).element_size()
    shards, size = [[]], 0  # tensors per shard, planned from element counts before anything is dequantised
    for tensor in reader.tensors:
        nbytes = int(tensor.n_elements) * itemsize
        if shards[-1] and size + nbytes > shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(tensor)
        size += nbytes
    weight_map, total = {}, 0
    for i, shard in enumerate(shards, 1):
        file = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        out = {}
        for tensor in shard:
            result = processor.process(weights=dequantize(tensor.data, tensor.tensor_type), name=tensor.name,
                                       tensor_key_mapping=mapping, parsed_parameters={})
            if result.name != tensor.name:
                raise ValueError(f"{architecture} GGUF: {tensor.name} becomes {result.name}; convert it with "
                                 "from_pretrained(..., gguf_file=...) and save_pretrained instead")
            weights = np.require(result.weights, np.float32, ["C_CONTIGUOUS", "WRITEABLE"])  # transformers' shape
            name = mapping[tensor.name]
            out[name] = torch.from_numpy(weights).to(dtype)
            weight_map[name] = file
            total += out[name].nbytes
        save_file(out, folder / file, metadata={"format": "pt"})
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (folder / INDEX).write_text(json.dumps(index, indent=2) + "\n")
