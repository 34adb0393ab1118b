"""Evaluation: plain ``generate`` against flashspec on the same prompts, per category (domain).

Metrics (Spec-Bench style): tokens/s of each engine (generated tokens / wall seconds, batch 1), speed-up, τ
(mean tokens per step, bonus included), α per arm (accepted / tested draft tokens), share of steps per arm, and
whether the greedy output is identical to plain ``generate`` (else where it first differs and the target's top-2
logit margin there).

:func:`evaluate` runs all of it on a ``datasets.Dataset`` or local json / csv / parquet files and writes JSON, CSV,
Markdown and a PNG plot; ``flashspec-eval`` (:mod:`flashspec_hf.eval_cli`) is its command line.
"""

from __future__ import annotations

import csv
import io
import json
import os
import platform
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import transformers
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .selection import SELECTORS, FixedArm, Selector
from .stats import FlashSpecStats

if TYPE_CHECKING:
    from datasets import Dataset


def _timed_generate(model: PreTrainedModel, inputs: dict, **kwargs) -> tuple[torch.Tensor, float]:
    """Output ``[1, L + N]`` and wall seconds (CUDA synchronised before and after)."""
    if model.device.type == "cuda":
        torch.cuda.synchronize(model.device)
    start = time.perf_counter()
    out = model.generate(**inputs, **kwargs)
    if model.device.type == "cuda":
        torch.cuda.synchronize(model.device)
    return out, time.perf_counter() - start


def compare_on_prompts(
    target: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    assistants: list[PreTrainedModel],
    prompts: "Dataset",
    progress: bool = True,
    keep_text: bool = False,
    **generate_kwargs,
) -> list[dict]:
    """Run plain ``generate`` and flashspec on every prompt (batch 1) with the same ``generate_kwargs``.

    Args:
        prompts: Dataset with ``prompt`` (str) and ``domain`` (str) columns.
        progress: show a tqdm progress bar (stderr).
        keep_text: also return each engine's decoded continuation (``plain_text``, ``flash_text``).
        generate_kwargs: e.g. ``max_new_tokens``, ``do_sample``, ``temperature``, ``num_assistant_tokens``,
            ``selector`` (the flashspec-only ones are not passed to the plain run).

    Returns:
        One dict per prompt: ``domain``, ``prompt_tokens``, ``new_tokens`` (tokens) and ``seconds`` (wall
        seconds) of each engine (``plain_*``, ``flash_*``), ``identical`` (bool), ``divergence`` (see
        :func:`first_divergence`; None when sampling), ``steps``, ``accepted`` (accepted draft tokens per step),
        ``arms`` (arm per step), ``arm_names``, ``gamma``, ``arm_gammas`` (γ per arm).
    """
    flash_only = {"num_assistant_tokens", "selector"}
    sampled = bool(generate_kwargs.get("do_sample"))  # outputs differ by chance: no divergence to explain
    plain_kwargs = {k: v for k, v in generate_kwargs.items() if k not in flash_only}
    warm = tokenizer(prompts[0]["prompt"], return_tensors="pt").to(target.device)
    target.generate(**warm, max_new_tokens=4, do_sample=False)  # warm-up: allocator, kernels, caches
    target.generate(**warm, max_new_tokens=4, do_sample=False, assistant_models=assistants, flashspec=True)
    results = []
    for row in tqdm(prompts, desc="prompts", disable=not progress):
        inputs = tokenizer(row["prompt"], return_tensors="pt").to(target.device)
        length = inputs["input_ids"].shape[1]
        plain, plain_s = _timed_generate(target, inputs, **plain_kwargs)
        flash, flash_s = _timed_generate(target, inputs, assistant_models=assistants, flashspec=True, **generate_kwargs)
        stats = target.flashspec_stats
        results.append(
            {
                "domain": row["domain"],
                "prompt_tokens": length,
                "plain_new_tokens": plain.shape[1] - length,
                "plain_seconds": plain_s,
                "flash_new_tokens": flash.shape[1] - length,
                "flash_seconds": flash_s,
                "identical": plain.shape == flash.shape and bool(torch.equal(plain, flash)),
                "divergence": None if sampled else first_divergence(target, plain, flash, length),
                "steps": stats.steps,
                "accepted": [step[0] for step in stats.step_accepted],
                "arms": stats.step_arms,
                "arm_names": stats.arm_names,
                "gamma": stats.num_assistant_tokens,
                "arm_gammas": stats.arm_gammas,
            }
        )
        if keep_text:
            results[-1]["plain_text"] = tokenizer.decode(plain[0, length:])
            results[-1]["flash_text"] = tokenizer.decode(flash[0, length:])
    return results


@torch.no_grad()
def first_divergence(
    model: PreTrainedModel, plain: torch.Tensor, flash: torch.Tensor, prompt_length: int
) -> dict | None:
    """Where two greedy outputs ``[1, L + N]`` first differ, and the target's top-1 minus top-2 logit there.

    In bf16/fp16 a batched verification forward rounds differently from one-token decoding and can flip near-ties;
    a small margin at the divergence says that is what happened. Returns None when one output is a prefix of the
    other (no divergence), else ``{"position": new-token index, "margin": float}``.
    """
    width = min(plain.shape[1], flash.shape[1])
    differ = (plain[0, :width] != flash[0, :width]).nonzero()
    if len(differ) == 0:
        return None
    at = int(differ[0])
    top2 = model(plain[:, :at]).logits[0, -1].float().topk(2).values
    return {"position": at - prompt_length, "margin": float(top2[0] - top2[1])}


def summarize(results: list[dict]) -> list[dict]:
    """Per domain (in order of first appearance), then ``all``: one dict each with ``domain``, ``prompts``,
    ``plain_tok_s`` and ``flashspec_tok_s`` (generated tokens / wall seconds of that engine, over the domain's
    prompts together), ``speedup`` (their ratio), ``tau`` (tokens per step, bonus included), ``alpha`` and
    ``arm_share`` (per arm name; α only for arms that drafted), ``identical`` (outputs equal to plain ``generate``),
    ``plain_new_tokens``, ``flash_new_tokens`` (tokens), ``plain_seconds``, ``flash_seconds`` (s) and ``steps``."""
    groups = defaultdict(list)
    for r in results:
        groups[r["domain"]].append(r)
    groups["all"] = results
    rows = []
    for domain, rs in groups.items():
        merged = _merged_stats(rs)
        plain_tps = sum(r["plain_new_tokens"] for r in rs) / sum(r["plain_seconds"] for r in rs)
        flash_tps = sum(r["flash_new_tokens"] for r in rs) / sum(r["flash_seconds"] for r in rs)
        rows.append(
            {
                "domain": domain,
                "prompts": len(rs),
                "plain_tok_s": plain_tps,
                "flashspec_tok_s": flash_tps,
                "speedup": flash_tps / plain_tps,
                "tau": merged.tau,
                "alpha": merged.alpha,
                "arm_share": merged.arm_share,
                "identical": sum(r["identical"] for r in rs),
                "plain_new_tokens": sum(r["plain_new_tokens"] for r in rs),
                "flash_new_tokens": sum(r["flash_new_tokens"] for r in rs),
                "plain_seconds": sum(r["plain_seconds"] for r in rs),
                "flash_seconds": sum(r["flash_seconds"] for r in rs),
                "steps": merged.steps,
            }
        )
    return rows


@torch.no_grad()
def acceptance(
    target: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    assistant: PreTrainedModel,
    prompts: list[str],
    num_assistant_tokens: int = 4,
    max_new_tokens: int = 64,
    batch_size: int = 8,
) -> dict:
    """τ and α of one assistant on ``prompts`` (greedy, padded batches): ``{"tau", "alpha", "steps"}``."""
    merged = FlashSpecStats(["assistant"], num_assistant_tokens)
    for i in range(0, len(prompts), batch_size):
        inputs = tokenizer(prompts[i : i + batch_size], return_tensors="pt", padding=True).to(target.device)
        target.generate(
            **inputs, max_new_tokens=max_new_tokens, do_sample=False, num_assistant_tokens=num_assistant_tokens,
            assistant_models=[assistant], selector=FixedArm(0), flashspec=True,
        )
        merged.step_arms += target.flashspec_stats.step_arms
        merged.step_accepted += target.flashspec_stats.step_accepted
    return {"tau": merged.tau, "alpha": merged.alpha.get("assistant", 0.0), "steps": merged.steps}


# ---------------------------------------------------------------------------------------------------------------
# evaluate(): a dataset in, Spec-Bench-style metrics per category out (JSON, CSV, Markdown, PNG).

DATA_FORMATS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}
"""File extension -> ``load_dataset`` builder for :func:`load_prompt_files`."""

CATEGORY_COLUMNS = ("domain", "category")
"""Columns tried, in order, as the category when none is named; without either every prompt is in ``"all"``."""

OUTPUT_FILES = ("results.json", "prompts.csv", "summary.csv", "summary.md", "plot.png")
"""What :func:`evaluate` writes into ``output_dir`` (``plot.png`` only with ``plot=True``)."""


@dataclass
class Evaluation:
    """What :func:`evaluate` measured.

    Attributes:
        setup: models, generation settings, data source, software versions, date and machine.
        summary: one row per category, then ``all`` (see :func:`summarize`; tokens/s, τ in tokens per step).
        prompts: one row per prompt (see :func:`compare_on_prompts`), plus ``index``, ``prompt``, ``plain_tok_s``,
            ``flash_tok_s`` (tokens/s), ``speedup``, ``tau``, ``alpha``, ``arm_share`` of that prompt alone.
        files: name -> path of each file written (empty without ``output_dir``).
    """

    setup: dict
    summary: list[dict]
    prompts: list[dict]
    files: dict[str, Path] = field(default_factory=dict)

    def to_dict(self) -> dict:
        """``{"setup", "summary", "prompts"}``, JSON-serialisable (what ``results.json`` holds)."""
        return {"setup": self.setup, "summary": self.summary, "prompts": self.prompts}

    def markdown(self) -> str:
        """The summary as a Markdown table with a setup line above and, for greedy runs, any output that
        differs from plain ``generate`` below (see :func:`markdown_table`)."""
        return markdown_table(self.summary, self.setup, self.prompts)


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
        ValueError: no files, an unknown format or extension, an empty file, or a file ``datasets`` cannot read.
    """
    from datasets import load_dataset

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
    try:
        return load_dataset(data_format, data_files=[str(p) for p in paths], split=split)
    except Exception as error:  # datasets' own errors on malformed files say little about the file
        if "corresponds to no data" in str(error):
            raise ValueError(f"{[str(p) for p in paths]} hold no rows (a header only?); add prompts") from error
        raise ValueError(
            f"could not read {[str(p) for p in paths]} as {data_format}, split {split!r} ({type(error).__name__}: "
            f"{error}); check the files, data_format (--format) and split (--split)"
        ) from error


def _has_content(path: Path, data_format: str) -> bool:
    with path.open("rb") as f:
        head = f.read(1 << 16)
    return bool(head) if data_format == "parquet" else bool(head.strip())


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
    category_column = _category_column(columns, prompt_column, category_column)
    prompts = data[prompt_column]
    not_str = [(i, type(p).__name__) for i, p in enumerate(prompts) if not isinstance(p, str)]
    if not_str:
        raise ValueError(
            f"column {prompt_column!r} must hold strings; rows {_rows(not_str)} hold "
            f"{sorted({t for _, t in not_str})}: fix those rows or choose the text column with prompt_column="
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
                "or pass another category_column"
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


def _category_column(columns: list[str], prompt_column: str, category_column: str | None) -> str | None:
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
    """Row indices for an error message: the first ``show`` and how many more."""
    head = ", ".join(str(i) for i, _ in bad[:show])
    return head + (f" and {len(bad) - show} more" if len(bad) > show else "")


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
    """Check :func:`evaluate`'s generation settings without running anything.

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


def evaluate(
    target: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    assistants: list[PreTrainedModel],
    data: "Dataset | str | os.PathLike | Sequence[str | os.PathLike]",
    *,
    prompt_column: str = "prompt",
    category_column: str | None = None,
    num_prompts: int | None = None,
    data_format: str | None = None,
    split: str = "train",
    max_new_tokens: int = 48,
    do_sample: bool = False,
    temperature: float = 0.7,
    gamma: int = 4,
    selector: "str | Selector" = "thompson",
    seed: int = 0,
    output_dir: str | os.PathLike | None = None,
    plot: bool = True,
    progress: bool = True,
    setup: dict | None = None,
    **generate_kwargs,
) -> Evaluation:
    """Plain ``generate`` against flashspec on every prompt of a dataset (batch 1), with metrics per category.

    Every input is checked before any model runs or any file is written. Each prompt runs once with plain
    ``generate`` and once with flashspec, with the same settings; after one warm-up of each.

    Args:
        target, tokenizer: the target model and its tokenizer.
        assistants: the draft models flashspec selects from (at least one).
        data: a ``datasets.Dataset``, or local json / jsonl / csv / parquet file path(s)
            (see :func:`load_prompt_files`).
        prompt_column, category_column, num_prompts: see :func:`prepare_prompts` (``num_prompts`` is per
            category).
        data_format, split: for file paths (see :func:`load_prompt_files`).
        max_new_tokens: new tokens per prompt (tokens).
        do_sample, temperature: sample at ``temperature`` instead of greedy decoding.
        gamma: draft tokens per step (``num_assistant_tokens``).
        selector: a name in :data:`~flashspec_hf.selection.SELECTORS` (a fresh selector per prompt) or a
            :class:`~flashspec_hf.selection.Selector` (keeps learning across prompts).
        seed: ``torch.manual_seed`` before the first prompt (sampling reproducible on one machine).
        output_dir: if given, write ``results.json`` (setup, summary, prompts), ``prompts.csv``, ``summary.csv``,
            ``summary.md`` (the Markdown table) and ``plot.png`` there, each atomically (temporary file, then
            ``os.replace``), all after the last prompt.
        plot: make ``plot.png`` (needs matplotlib): tokens/s per category of both engines, and τ.
        progress: tqdm progress bar over the prompts (stderr).
        setup: extra entries for the ``setup`` record (e.g. how the models were chosen).
        generate_kwargs: more ``generate`` arguments for both engines (e.g. ``top_p``).

    Returns:
        An :class:`Evaluation`: per-category summary (tokens/s, speed-up, τ in tokens per step, α and share per
        arm, identical outputs), per-prompt rows (wall seconds, tokens, greedy divergence position and top-2
        logit margin), setup, and the files written.

    Raises:
        ValueError: bad data (see :func:`prepare_prompts`, :func:`load_prompt_files`), no assistants, bad
            settings (see :func:`check_settings`), or an ``output_dir`` that is a file.
        FileNotFoundError: a data file does not exist.
        ImportError: ``plot=True`` without matplotlib.
    """
    if not assistants:
        raise ValueError("no assistants: pass at least one draft model in assistants=[...]")
    check_settings(max_new_tokens, gamma, do_sample, temperature, selector, plot)
    if isinstance(data, (str, os.PathLike)) or (
        isinstance(data, (list, tuple)) and all(isinstance(f, (str, os.PathLike)) for f in data)
    ):
        source = {"data_files": [str(f) for f in ([data] if isinstance(data, (str, os.PathLike)) else data)]}
        data = load_prompt_files(data, data_format, split)
    else:
        source = {"dataset": f"{type(data).__name__} with columns {getattr(data, 'column_names', '?')}"}
    prompts = prepare_prompts(data, prompt_column, category_column, num_prompts)
    category_column = _category_column(data.column_names, prompt_column, category_column)  # the one used
    out = check_output_dir(output_dir)

    kwargs = dict(max_new_tokens=max_new_tokens, do_sample=do_sample, num_assistant_tokens=gamma, selector=selector)
    if do_sample:
        kwargs["temperature"] = temperature
    load_before = _load_average()
    torch.manual_seed(seed)
    results = compare_on_prompts(
        target, tokenizer, assistants, prompts, progress=progress, keep_text=True, **kwargs, **generate_kwargs
    )
    for i, (row, r) in enumerate(zip(prompts, results, strict=True)):
        stats = _merged_stats([r])
        r.update(
            index=i,
            prompt=row["prompt"],
            plain_tok_s=r["plain_new_tokens"] / r["plain_seconds"],
            flash_tok_s=r["flash_new_tokens"] / r["flash_seconds"],
            tau=stats.tau,
            alpha=stats.alpha,
            arm_share=stats.arm_share,
        )
        r["speedup"] = r["flash_tok_s"] / r["plain_tok_s"]
    record = {
        "target": str(target.config.name_or_path or type(target).__name__),
        "assistants": results[0]["arm_names"],
        "device": str(target.device),
        "dtype": str(target.dtype).removeprefix("torch."),
        **{k: v if isinstance(v, (str, int, float, bool, type(None))) else repr(v) for k, v in kwargs.items()},
        **{k: v if isinstance(v, (str, int, float, bool, type(None))) else repr(v) for k, v in generate_kwargs.items()},
        "seed": seed,
        "batch_size": 1,
        "prompt_column": prompt_column,
        "category_column": category_column,
        "num_prompts_per_category": num_prompts,
        **source,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}",
        "load_average_before_after": [load_before, _load_average()],  # other work on the machine slows tokens/s
    }
    if isinstance(selector, Selector):
        record["selector"] = type(selector).__name__
    record.update(setup or {})
    evaluation = Evaluation(record, summarize(results), results)
    if out is not None:
        evaluation.files = write_outputs(evaluation, out, plot=plot)
    return evaluation


def _load_average() -> float | None:
    """The machine's 1-minute load average (runnable processes), None where the OS has none."""
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


def _merged_stats(results: list[dict]) -> FlashSpecStats:
    """One FlashSpecStats over several prompts' steps (batch 1: one accepted count per step)."""
    return FlashSpecStats(
        results[0]["arm_names"],
        results[0]["gamma"],
        results[0].get("arm_gammas"),
        step_arms=[a for r in results for a in r["arms"]],
        step_accepted=[[n] for r in results for n in r["accepted"]],
    )


def markdown_table(summary: list[dict], setup: dict, prompts: list[dict] | None = None) -> str:
    """Markdown: setup lines (models, settings; date, machine and load when recorded), then per category (and
    ``all``) prompts, tokens/s of plain ``generate`` and of flashspec, speed-up, τ (tokens per step), α and share
    of steps per arm, and (greedy) identical outputs.
    With ``prompts`` and greedy decoding, each output that differs from plain ``generate`` is listed below with
    its divergence position (new-token index) and the target's top-2 logit margin there."""
    greedy = not setup.get("do_sample")
    names = list(summary[0]["arm_share"])
    head = ["category", "prompts", "plain tok/s", "flashspec tok/s", "speedup", "τ"]
    head += [f"{n} α (share)" for n in names] + (["identical"] if greedy else [])
    decoding = "greedy" if greedy else f"sampling T={setup.get('temperature')}"
    lines = [
        f"target {setup['target']} on {setup['device']} ({setup['dtype']}), γ={setup['num_assistant_tokens']}, "
        f"selector={setup['selector']}, max_new_tokens={setup['max_new_tokens']}, {decoding}, batch 1; "
        f"torch {setup['torch']}, transformers {setup['transformers']}",
    ]
    if "machine" in setup:
        load = setup.get("load_average_before_after") or [None, None]
        lines.append(f"{setup['date']}, {setup['machine']}, 1-min load average {load[0]} before, {load[1]} after")
    lines += [
        "",
        "| " + " | ".join(head) + " |",
        "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|",
    ]
    for r in summary:
        cells = [r["domain"], str(r["prompts"]), f"{r['plain_tok_s']:.1f}", f"{r['flashspec_tok_s']:.1f}",
                 f"{r['speedup']:.2f}×", f"{r['tau']:.2f}"]
        for name in names:
            alpha = r["alpha"].get(name)
            cells.append(f"{'–' if alpha is None else f'{alpha:.2f}'} ({r['arm_share'][name]:.0%})")
        if greedy:
            cells.append(f"{r['identical']}/{r['prompts']}")
        lines.append("| " + " | ".join(cells) + " |")
    notes = []
    for p in prompts if greedy and prompts is not None else []:
        if p["identical"]:
            continue
        note = f"- prompt {p.get('index', '?')} ({p['domain']}): "
        if p["divergence"] is None:
            note += (f"one output is a prefix of the other ({p['plain_new_tokens']} plain, "
                     f"{p['flash_new_tokens']} flashspec tokens)")
        else:
            note += (f"first differs at new token {p['divergence']['position']}, target's top-2 logit margin "
                     f"{p['divergence']['margin']:.3f}")
        notes.append(note)
    if notes:
        lines += ["", "Greedy outputs that differ from plain generate:", *notes]
    return "\n".join(lines)


def _csv(rows: list[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def _flat_arms(row: dict, names: list[str]) -> dict:
    """α and share per arm as columns ``alpha_<arm>`` (empty when the arm never drafted) and ``share_<arm>``."""
    flat = {f"alpha_{n}": row["alpha"].get(n, "") for n in names}
    flat.update({f"share_{n}": row["arm_share"][n] for n in names})
    return flat


def _prompt_csv_rows(prompts: list[dict]) -> list[dict]:
    names = prompts[0]["arm_names"]
    rows = []
    for p in prompts:
        divergence = p["divergence"] or {}
        rows.append({
            "index": p["index"], "category": p["domain"], "prompt_tokens": p["prompt_tokens"],
            "plain_new_tokens": p["plain_new_tokens"], "plain_seconds": p["plain_seconds"],
            "plain_tok_s": p["plain_tok_s"], "flash_new_tokens": p["flash_new_tokens"],
            "flash_seconds": p["flash_seconds"], "flash_tok_s": p["flash_tok_s"], "speedup": p["speedup"],
            "steps": p["steps"], "tau": p["tau"], **_flat_arms(p, names), "identical": p["identical"],
            "divergence_position": divergence.get("position", ""), "divergence_margin": divergence.get("margin", ""),
            "prompt": p["prompt"],
        })
    return rows


def _summary_csv_rows(summary: list[dict]) -> list[dict]:
    names = list(summary[0]["arm_share"])
    return [
        {"category": r["domain"], "prompts": r["prompts"], "plain_tok_s": r["plain_tok_s"],
         "flashspec_tok_s": r["flashspec_tok_s"], "speedup": r["speedup"], "tau": r["tau"], **_flat_arms(r, names),
         "identical": r["identical"], "plain_new_tokens": r["plain_new_tokens"],
         "flash_new_tokens": r["flash_new_tokens"], "plain_seconds": r["plain_seconds"],
         "flash_seconds": r["flash_seconds"], "steps": r["steps"]}
        for r in summary
    ]


def plot_png(summary: list[dict], setup: dict) -> bytes:
    """PNG bytes (matplotlib, Agg canvas; pyplot's global state untouched): tokens/s of plain ``generate`` and
    flashspec per category with the speed-up above each pair, and τ per category against its ceiling γ + 1."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    categories = [r["domain"] for r in summary]
    x = range(len(categories))
    fig = Figure(figsize=(4 + 1.6 * len(categories), 4), layout="constrained")
    FigureCanvasAgg(fig)
    speed, tau = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    plain = [r["plain_tok_s"] for r in summary]
    flash = [r["flashspec_tok_s"] for r in summary]
    speed.bar([i - 0.2 for i in x], plain, 0.4, label="plain generate", color="0.6")
    bars = speed.bar([i + 0.2 for i in x], flash, 0.4, label="flashspec", color="tab:blue")
    for bar, r in zip(bars, summary, strict=True):
        speed.annotate(f"{r['speedup']:.2f}×", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                       ha="center", va="bottom", fontsize=8)
    speed.set_xticks(list(x), categories)
    speed.set_ylabel("tokens/s")
    speed.set_ylim(0, max(plain + flash) * 1.3)
    speed.legend(loc="upper center", ncols=2, fontsize=8)
    speed.set_title("throughput (batch 1)", fontsize=10)
    tau.bar(list(x), [r["tau"] for r in summary], 0.6, color="tab:orange")
    gamma = setup["num_assistant_tokens"]
    tau.axhline(gamma + 1, color="0.3", linestyle="--", linewidth=1, label=f"ceiling γ+1 = {gamma + 1}")
    tau.axhline(1, color="0.6", linestyle=":", linewidth=1, label="1 (no draft accepted)")
    tau.set_xticks(list(x), categories)
    tau.set_ylabel("τ (tokens per step)")
    tau.set_ylim(0, gamma + 2)
    tau.legend(loc="upper center", fontsize=8)
    tau.set_title("τ, bonus token included", fontsize=10)
    decoding = "greedy" if not setup.get("do_sample") else f"T={setup.get('temperature')}"
    fig.suptitle(f"{Path(setup['target']).name}, {setup['device']} {setup['dtype']}, γ={gamma}, "
                 f"{setup['selector']}, {setup['max_new_tokens']} new tokens, {decoding}", fontsize=10)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120)
    return buffer.getvalue()


def write_outputs(evaluation: Evaluation, output_dir: str | os.PathLike, plot: bool = True) -> dict[str, Path]:
    """Write :data:`OUTPUT_FILES` into ``output_dir`` (created if needed). Every file is rendered in memory first,
    then each is written to a temporary file in ``output_dir`` and renamed over its final name (``os.replace``),
    so a file is either absent, its previous version, or complete. Returns name -> path."""
    payloads = {
        "results.json": json.dumps(evaluation.to_dict(), indent=1, ensure_ascii=False).encode() + b"\n",
        "prompts.csv": _csv(_prompt_csv_rows(evaluation.prompts)).encode(),
        "summary.csv": _csv(_summary_csv_rows(evaluation.summary)).encode(),
        "summary.md": evaluation.markdown().encode() + b"\n",
    }
    if plot:
        payloads["plot.png"] = plot_png(evaluation.summary, evaluation.setup)
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, payload in payloads.items():
        written[name] = _atomic_write(out / name, payload)
    return written


def _atomic_write(path: Path, payload: bytes) -> Path:
    """``payload`` to a temporary file beside ``path``, flushed to disk, then renamed to ``path``."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 -> what open() would have made
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
