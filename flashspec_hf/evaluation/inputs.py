"""Evaluation inputs: local prompt files read with ``datasets`` (a malformed line named by its number), a prompt
dataset checked and normalised, plain-text prompts put in a chat template, and the settings and output folder
checked, all before any model runs or any file is written."""

from __future__ import annotations

import csv
import json
import os
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from transformers import PreTrainedTokenizerBase

from ..selection import SELECTORS, Selector

if TYPE_CHECKING:
    from datasets import Dataset

DATA_FORMATS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}
"""File extension -> ``load_dataset`` builder for :func:`load_prompt_files`."""

CATEGORY_COLUMNS = ("domain", "category")
"""Columns tried, in order, as the category when none is named; without either every prompt is in ``"all"``."""


def load_prompt_files(
    data_files: str | os.PathLike | Sequence[str | os.PathLike], data_format: str | None = None, split: str = "train"
) -> "Dataset":
    """Local json / jsonl / csv / parquet files as one Dataset, via ``datasets.load_dataset``.

    Args:
        data_files: one path or several (same format).
        data_format: ``"json"``, ``"csv"`` or ``"parquet"``; None: from the extensions (``.json``, ``.jsonl``,
            ``.csv``, ``.parquet``).
        split: the ``load_dataset`` split (local files load as ``"train"``).

    Raises:
        FileNotFoundError: a file does not exist.
        ValueError: no files, an unknown format or extension, an empty file, a file that is not UTF-8 text, a
            json / jsonl line that is not valid JSON or not an object, a csv record with more fields than the
            header or a broken quote (these name the file and the line: ``prompts.jsonl line 3: not valid JSON
            ...``), or a file ``datasets`` cannot read (the message gives its underlying error).
    """
    import datasets

    files = [data_files] if isinstance(data_files, (str, os.PathLike)) else list(data_files)
    if not files:
        raise ValueError("no data files given: pass one or more json / jsonl / csv / parquet paths")
    paths = [Path(f) for f in files]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"data files not found: {missing}")
    formats = sorted(set(DATA_FORMATS.values()))
    if data_format is None:
        found = {DATA_FORMATS.get(p.suffix.lower()) for p in paths}
        if None in found or len(found) != 1:
            raise ValueError(
                f"cannot tell the format of {[str(p) for p in paths]} from their extensions: name it with "
                f"data_format= (CLI: --format), one of {formats}"
            )
        data_format = found.pop()
    elif data_format not in formats:
        raise ValueError(f"unknown data format {data_format!r}: choose one of {formats}")
    empty = [str(p) for p in paths if not _has_content(p, data_format)]
    if empty:
        raise ValueError(f"{empty}: empty file, no prompts in it; give files with one prompt per row")
    for path in paths:  # datasets' errors on a malformed file name neither the file nor the line
        _check_syntax(path, data_format)
    quiet = datasets.are_progress_bars_disabled()
    datasets.disable_progress_bars()  # "Generating train split" for a local file says nothing useful
    try:
        return datasets.load_dataset(data_format, data_files=[str(p) for p in paths], split=split)
    except Exception as error:
        if "corresponds to no data" in str(error):
            raise ValueError(f"{[str(p) for p in paths]} hold no rows (a header only?); add prompts") from error
        cause = error  # datasets wraps the error that says what went wrong (DatasetGenerationError)
        while cause.__cause__ is not None or cause.__context__ is not None:
            cause = cause.__cause__ or cause.__context__
        raise ValueError(
            f"could not read {[str(p) for p in paths]} as {data_format}, split {split!r} ({type(cause).__name__}: "
            f"{str(cause).strip()}); check the files, data_format (--format) and split (--split)"
        ) from error
    finally:
        if not quiet:
            datasets.enable_progress_bars()


def _has_content(path: Path, data_format: str) -> bool:
    with path.open("rb") as f:
        head = f.read(1 << 16)
    return bool(head) if data_format == "parquet" else bool(head.strip())


_JSON_KINDS = {list: "list", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}
_ONE_OBJECT_PER_LINE = 'write one JSON object per line, e.g. {"prompt": "..."}'


def _check_syntax(path: Path, data_format: str) -> None:
    """Raise ValueError naming the file and line of the first json / jsonl / csv syntax error (parquet: none)."""
    if data_format == "parquet":
        return
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start}); save it as UTF-8") from None
    if data_format == "json":
        _check_json(path, text)
    else:
        _check_csv(path, text)


def _check_json(path: Path, text: str) -> None:
    """A JSON list of objects, one JSON object, or JSON Lines (one object per line; blank lines allowed)."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError:
        document = None  # not one JSON document: JSON Lines, checked line by line below
    else:
        if isinstance(document, dict):
            return
        if isinstance(document, list):
            for number, item in enumerate(document, 1):
                if not isinstance(item, dict):
                    raise ValueError(f"{path} item {number}: a JSON {_JSON_KINDS[type(item)]}, not an object; "
                                     'give a list of objects, e.g. [{"prompt": "..."}]')
            return
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path} line {number}: not valid JSON ({error.msg}, column {error.colno}); "
                             f"{_ONE_OBJECT_PER_LINE}") from None
        if not isinstance(row, dict):
            raise ValueError(f"{path} line {number}: a JSON {_JSON_KINDS[type(row)]}, not an object; "
                             f"{_ONE_OBJECT_PER_LINE}")


def _check_csv(path: Path, text: str) -> None:
    """A header, then records with at most as many fields (fewer: the rest are missing) and closed quotes."""
    reader = csv.reader(text.splitlines(keepends=True), strict=True)
    header, start = None, 1  # start: the line where the next record begins (a quoted field may span lines)
    try:
        for record in reader:
            if header is None:
                header = record or None  # blank lines before the header are skipped
            elif len(record) > len(header):
                raise ValueError(f"{path} line {start}: {len(record)} fields, the header has {len(header)}; "
                                 'put a field that holds commas in double quotes ("a, b")')
            start = reader.line_num + 1
    except csv.Error as error:
        raise ValueError(f"{path} line {start}: {error}; close each quoted field with a double quote, and double "
                         'any quote inside one ("say ""hi""")') from None


def chat_formatted(prompts: "Dataset", tokenizer: PreTrainedTokenizerBase) -> tuple["Dataset", int]:
    """Plain-text prompts as an instruct model expects them: each as one user turn in the tokenizer's chat
    template, with the assistant's turn to speak (``add_generation_prompt=True``).

    A prompt that already holds one of the tokenizer's special tokens (``<|im_start|>``, ``<s>``, ...) is taken as
    formatted and kept; so is every prompt when the tokenizer has no chat template (a base model).

    Args:
        prompts: a Dataset with the columns ``prompt`` (str) and ``domain`` (see :func:`prepare_prompts`).
        tokenizer: the target's tokenizer.

    Returns:
        The prompts (same columns and order) and how many of them were put in the template.
    """
    from datasets import Dataset

    if not getattr(tokenizer, "chat_template", None):
        return prompts, 0
    special = [token for token in tokenizer.all_special_tokens if token]
    texts, wrapped = [], 0
    for prompt in prompts["prompt"]:
        if not any(token in prompt for token in special):
            turn = [{"role": "user", "content": prompt}]
            prompt = tokenizer.apply_chat_template(turn, tokenize=False, add_generation_prompt=True)
            wrapped += 1
        texts.append(prompt)
    return Dataset.from_dict({"prompt": texts, "domain": prompts["domain"]}), wrapped


def prepare_prompts(
    data: "Dataset",
    prompt_column: str = "prompt",
    category_column: str | None = None,
    num_prompts: int | None = None,
) -> "Dataset":
    """Check a prompt dataset and normalise it to the columns ``prompt`` and ``domain`` (the category).

    Runs no model and reads nothing but ``data``, so bad input fails before any work.

    Args:
        data: a ``datasets.Dataset`` (one split).
        prompt_column: the column holding the prompts (non-empty strings).
        category_column: the column holding each prompt's category; None: ``domain``, else ``category``, else one
            category ``"all"`` for every prompt. Categories are turned into strings.
        num_prompts: keep only the first ``num_prompts`` prompts of each category; None keeps all.

    Raises:
        TypeError: ``data`` is not a ``Dataset``.
        ValueError: a ``DatasetDict`` (no split chosen), no rows, no column ``prompt_column`` or
            ``category_column`` (the message lists the columns there are), a prompt that is not a string or is
            empty, a missing or empty category, a category named ``all`` beside others (``all`` is the overall
            row), or ``num_prompts < 1``.
    """
    from datasets import Dataset, DatasetDict

    if isinstance(data, DatasetDict):
        raise ValueError(f"got a DatasetDict with splits {list(data)}: pass one split, e.g. data[{list(data)[0]!r}]")
    if not isinstance(data, Dataset):
        raise TypeError(f"expected a datasets.Dataset, got {type(data).__name__}; e.g. Dataset.from_list(rows)")
    if num_prompts is not None and num_prompts < 1:
        raise ValueError(f"num_prompts must be at least 1 (or None for all prompts), got {num_prompts}")
    if len(data) == 0:
        raise ValueError(f"the dataset is empty (0 rows; columns {data.column_names}): give at least one prompt")
    columns = data.column_names
    if prompt_column not in columns:
        raise ValueError(
            f"no prompt column {prompt_column!r}; the dataset's columns are {columns}: name the one with the "
            "prompts with prompt_column= (CLI: --prompt-column)"
        )
    category_column = find_category_column(columns, prompt_column, category_column)
    prompts = data[prompt_column]
    not_str = [(i, type(p).__name__) for i, p in enumerate(prompts) if not isinstance(p, str)]
    if not_str:
        raise ValueError(
            f"column {prompt_column!r} must hold strings; rows {_rows(not_str)} hold "
            f"{sorted({t for _, t in not_str})}: fix those rows or choose the text column with prompt_column= "
            "(CLI: --prompt-column)"
        )
    blank = [(i, None) for i, p in enumerate(prompts) if not p.strip()]
    if blank:
        raise ValueError(f"empty prompts (only whitespace) in rows {_rows(blank)} of {prompt_column!r}: drop them")
    if category_column is None:
        categories = ["all"] * len(prompts)
    else:
        raw = data[category_column]
        missing = [(i, None) for i, c in enumerate(raw) if c is None or not str(c).strip()]
        if missing:
            raise ValueError(
                f"missing or empty category in rows {_rows(missing)} of column {category_column!r}: fill them in, "
                "or pass another category_column= (CLI: --category-column)"
            )
        categories = [str(c) for c in raw]
        if "all" in categories and len(set(categories)) > 1:
            raise ValueError(
                f"category 'all' in column {category_column!r} would merge with the overall row 'all': rename it"
            )
    keep, seen = [], defaultdict(int)
    for i, category in enumerate(categories):
        if num_prompts is None or seen[category] < num_prompts:
            keep.append(i)
            seen[category] += 1
    return Dataset.from_dict({"prompt": [prompts[i] for i in keep], "domain": [categories[i] for i in keep]})


def find_category_column(columns: list[str], prompt_column: str, category_column: str | None) -> str | None:
    """The category column to use: ``category_column``, else the first of :data:`CATEGORY_COLUMNS` present, else
    None (one category ``all``). Raises ValueError for a named column that is missing or is the prompt column."""
    if category_column is None:
        return next((c for c in CATEGORY_COLUMNS if c in columns and c != prompt_column), None)
    if category_column not in columns:
        raise ValueError(
            f"no category column {category_column!r}; the dataset's columns are {columns}: name one of them with "
            "category_column= (CLI: --category-column), or leave it out to use 'domain' / 'category' if present "
            "and otherwise one category 'all'"
        )
    if category_column == prompt_column:
        raise ValueError(f"the prompt and category columns are both {prompt_column!r}: name two different columns")
    return category_column


def _rows(bad: list[tuple[int, object]], show: int = 5) -> str:
    """Row indices for an error message, counted from 0 as a Dataset's are (a file's line numbers count from 1): the
    first ``show`` and how many more."""
    head = ", ".join(str(i) for i, _ in bad[:show])
    return head + (f" and {len(bad) - show} more" if len(bad) > show else "") + " (counted from 0)"


def check_output_dir(output_dir: str | os.PathLike | None) -> Path | None:
    """Check ``output_dir`` without creating it; returns it as a Path (None stays None).

    Raises:
        ValueError: it exists and is not a directory.
    """
    if output_dir is None:
        return None
    path = Path(output_dir)
    if path.exists() and not path.is_dir():
        raise ValueError(f"output_dir {str(path)!r} exists and is not a directory: pick another path")
    return path


def check_settings(
    max_new_tokens: int, gamma: int, do_sample: bool, temperature: float, selector: "str | Selector", plot: bool
) -> None:
    """Check :func:`~flashspec_hf.evaluation.run.evaluate`'s generation settings without running anything.

    Raises:
        ValueError: ``max_new_tokens`` or ``gamma`` not a positive integer (tokens), ``temperature <= 0`` when
            sampling, or a selector name not in :data:`~flashspec_hf.selection.SELECTORS`.
        ImportError: ``plot`` without matplotlib installed.
    """
    for name, value in (("max_new_tokens", max_new_tokens), ("gamma", gamma)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer (tokens), got {value!r}")
    if do_sample and not (isinstance(temperature, (int, float)) and temperature > 0):
        raise ValueError(f"temperature must be > 0 when sampling, got {temperature!r}; or decode greedily")
    if isinstance(selector, str) and selector not in SELECTORS:
        raise ValueError(f"unknown selector {selector!r}; choose one of {sorted(SELECTORS)} or pass a Selector")
    if plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError as error:
            raise ImportError("the plot needs matplotlib: pip install matplotlib, or plot=False (--no-plot)") from error

