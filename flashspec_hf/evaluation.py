"""Evaluation: plain ``generate`` against flashspec on the same prompts, per domain.

Metrics (Spec-Bench style): tokens/s of each engine (generated tokens / wall seconds, batch 1), speed-up, τ
(mean tokens per step, bonus included), α per arm (accepted / tested draft tokens), share of steps per arm, and
whether the greedy output is identical to plain ``generate``.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import TYPE_CHECKING

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .selection import FixedArm
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
    **generate_kwargs,
) -> list[dict]:
    """Run plain ``generate`` and flashspec on every prompt (batch 1) with the same ``generate_kwargs``.

    Args:
        prompts: Dataset with ``prompt`` (str) and ``domain`` (str) columns.
        generate_kwargs: e.g. ``max_new_tokens``, ``do_sample``, ``temperature``, ``num_assistant_tokens``,
            ``selector`` (the flashspec-only ones are not passed to the plain run).

    Returns:
        One dict per prompt: ``domain``, ``new_tokens`` and ``seconds`` of each engine (``plain_*``,
        ``flash_*``), ``identical`` (bool), ``divergence`` (see :func:`first_divergence`), ``steps``,
        ``accepted`` (list per step), ``arms`` (arm per step),
        ``arm_names``, ``gamma``.
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
                "plain_new_tokens": plain.shape[1] - length,
                "plain_seconds": plain_s,
                "flash_new_tokens": flash.shape[1] - length,
                "flash_seconds": flash_s,
                "identical": plain.shape == flash.shape and bool(torch.equal(plain, flash)),
                "divergence": None if sampled else first_divergence(target, plain, flash, length),
                "steps": stats.steps,
                "accepted": [step[0] for step in stats.accepted],
                "arms": stats.arms,
                "arm_names": stats.arm_names,
                "gamma": stats.num_assistant_tokens,
            }
        )
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
    """Per domain, then ``all``: tokens/s of both engines, speed-up, τ, α and step share per arm, identical count."""
    groups = defaultdict(list)
    for r in results:
        groups[r["domain"]].append(r)
    groups["all"] = results
    rows = []
    for domain, rs in groups.items():
        merged = FlashSpecStats(
            rs[0]["arm_names"],
            rs[0]["gamma"],
            arms=[a for r in rs for a in r["arms"]],
            accepted=[[n] for r in rs for n in r["accepted"]],
        )
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
        merged.arms += target.flashspec_stats.arms
        merged.accepted += target.flashspec_stats.accepted
    return {"tau": merged.tau, "alpha": merged.alpha.get("assistant", 0.0), "steps": merged.steps}
