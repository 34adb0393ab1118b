"""Running the evaluation: plain ``generate`` and flashspec on the same prompts, timed, with flashspec's
statistics (:func:`compare_on_prompts`), on a whole dataset with checks and files (:func:`evaluate`), and τ / α of
one assistant on padded batches (:func:`acceptance`)."""

from __future__ import annotations

import copy
import os
import platform
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING

import torch
import transformers
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..cpu_products import state as few_row_products_state
from ..selection import FixedArm, Selector
from ..stats import FlashSpecStats
from .inputs import check_output_dir, check_settings, find_category_column, load_prompt_files, prepare_prompts
from .report import Evaluation, merged_stats, summarize, write_outputs

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


FLASH_ONLY = frozenset({"num_assistant_tokens", "selector"})
"""``generate`` arguments of flashspec's calls only (:func:`compare_on_prompts` leaves them out of plain ones)."""


def _warm_up(target: PreTrainedModel, inputs: dict, assistants: list[PreTrainedModel], plain_kwargs: dict,
             generate_kwargs: dict) -> list[float]:
    """One untimed call of each engine on ``inputs`` with the run's settings (a selector instance copied: it would
    learn; the random state restored after, so a seeded run samples what it would without them): before the first
    prompt, and on CUDA before every prompt. What a set-up does once then stays out of the timed calls: a cost-aware
    selector's calibration (1.4 s on this project's CPU) and, on CUDA, compiling and capturing the static loop's
    graphs for the prompt's capacity (:meth:`~flashspec_hf.backends.StaticBackend.capacity`: the prompt,
    ``max_new_tokens`` and a few steps' columns, rounded up to 128; on an H100 on 2026-12-07 a 4-token warm-up left
    a 179 s compilation to the first timed call). Returns the wall seconds of the plain and the flashspec call."""
    models = [target, *assistants]  # assistants may include prompt lookup, which has no device
    devices = sorted({str(m.device) for m in models if getattr(m, "device", None) and m.device.type == "cuda"})
    with torch.random.fork_rng(devices=devices):
        _, plain_s = _timed_generate(target, inputs, **plain_kwargs)
        warm_flash = {k: copy.deepcopy(v) if k in FLASH_ONLY else v for k, v in generate_kwargs.items()}
        _, flash_s = _timed_generate(target, inputs, assistant_models=assistants, flashspec=True, **warm_flash)
    return [plain_s, flash_s]


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
        ``arms`` (arm per step), ``step_gammas`` (draft tokens per step), ``arm_names``, ``gamma``, ``arm_gammas``
        (γ per arm), ``warm_up_call_seconds`` (wall seconds of the untimed warm-up calls before the prompt's timed
        ones, ``[plain, flashspec]``, or None: see :func:`_warm_up`).
    """
    sampled = bool(generate_kwargs.get("do_sample"))  # outputs differ by chance: no divergence to explain
    plain_kwargs = {k: v for k, v in generate_kwargs.items() if k not in FLASH_ONLY}
    results = []
    for i, row in enumerate(tqdm(prompts, desc="prompts", disable=not progress)):
        inputs = tokenizer(row["prompt"], return_tensors="pt").to(target.device)
        length = inputs["input_ids"].shape[1]
        warm_up = None
        if i == 0 or target.device.type == "cuda":
            warm_up = _warm_up(target, inputs, assistants, plain_kwargs, generate_kwargs)
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
                "step_gammas": stats.step_gammas,
                "arm_names": stats.arm_names,
                "gamma": stats.num_assistant_tokens,
                "arm_gammas": stats.arm_gammas,
                "warm_up_call_seconds": warm_up,
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
        merged.step_gammas += target.flashspec_stats.step_gammas
    return {"tau": merged.tau, "alpha": merged.alpha.get("assistant", 0.0), "steps": merged.steps}



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
    ``generate`` and once with flashspec, with the same settings; after one untimed warm-up call of each (on CUDA
    before every prompt: :func:`_warm_up`).

    Args:
        target, tokenizer: the target model and its tokenizer.
        assistants: the draft models flashspec selects from (at least one).
        data: a ``datasets.Dataset``, or local json / jsonl / csv / parquet file path(s)
            (see :func:`~flashspec_hf.evaluation.inputs.load_prompt_files`).
        prompt_column, category_column, num_prompts: see
            :func:`~flashspec_hf.evaluation.inputs.prepare_prompts` (``num_prompts`` is per category).
        data_format, split: for file paths (see :func:`~flashspec_hf.evaluation.inputs.load_prompt_files`).
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
        An :class:`~flashspec_hf.evaluation.report.Evaluation`: per-category summary (tokens/s, speed-up, τ in
        tokens per step, α and share per arm, identical outputs), per-prompt rows (wall seconds, tokens, greedy
        divergence position and top-2 logit margin), setup, and the files written.

    Raises:
        ValueError: bad data (see :func:`~flashspec_hf.evaluation.inputs.prepare_prompts`,
            :func:`~flashspec_hf.evaluation.inputs.load_prompt_files`), no assistants, bad
            settings (see :func:`~flashspec_hf.evaluation.inputs.check_settings`), or an ``output_dir`` that is a file.
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
    category_column = find_category_column(data.column_names, prompt_column, category_column)  # the one used
    out = check_output_dir(output_dir)

    kwargs = dict(max_new_tokens=max_new_tokens, do_sample=do_sample, num_assistant_tokens=gamma, selector=selector)
    if do_sample:
        kwargs["temperature"] = temperature
    load_before = load_average()
    torch.manual_seed(seed)
    results = compare_on_prompts(
        target, tokenizer, assistants, prompts, progress=progress, keep_text=True, **kwargs, **generate_kwargs
    )
    for i, (row, r) in enumerate(zip(prompts, results, strict=True)):
        stats = merged_stats([r])
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
        **software(),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}",
        "load_average_before_after": [load_before, load_average()],  # other work on the machine slows tokens/s
    }
    if isinstance(selector, Selector):
        record["selector"] = type(selector).__name__
    record.update(setup or {})
    evaluation = Evaluation(record, summarize(results), results)
    if out is not None:
        evaluation.files = write_outputs(evaluation, out, plot=plot)
    return evaluation


def software() -> dict:
    """What a recorded run ran on besides the machine: torch and transformers versions, torch's CPU thread count,
    OpenMP's wait policy (:mod:`flashspec_hf.openmp`; ``"default (spinning)"`` when unset), and whether few-row
    products were on (:func:`flashspec_hf.cpu_products.state`: ``"on"``, ``"off"``, ``"auto: on (0.831)"`` /
    ``"auto: off (1.042)"`` as last measured, with the ratio, or why nothing was packed, e.g. ``"auto: off (not
    enough memory)"``)."""
    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "torch_threads": torch.get_num_threads(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY") or "default (spinning)",
        "few_row_products": few_row_products_state(),
    }


def load_average() -> float | None:
    """The machine's 1-minute load average (runnable processes), None where the OS has none."""
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None

