"""The command-line pieces ``flashspec-demo`` and ``flashspec-eval`` share: their run options (prompts per domain,
generation settings, models), the selector they build from them, and loading the models they name."""

from __future__ import annotations

import argparse

import torch

from .drafts import PromptLookup
from .models import distilled_assistants, early_exit_assistants, load_target
from .selection import SELECTORS, Selector


def add_run_args(p: argparse.ArgumentParser, num_prompts: int | None) -> None:
    """The options ``flashspec-demo`` and ``flashspec-eval`` share: prompts per domain, generation settings, models.

    ``num_prompts`` is the default of ``--num-prompts`` (None: every prompt of a file, 3 per built-in domain).
    """
    default = f"default {num_prompts}" if num_prompts else "default: all of a file, 3 per built-in domain"
    p.add_argument("--num-prompts", type=int, default=num_prompts, help=f"prompts per domain ({default})")
    p.add_argument("--max-new-tokens", type=int, default=48, help="new tokens per prompt (default 48)")
    p.add_argument("--do-sample", action="store_true", help="sample instead of greedy decoding")
    p.add_argument("--temperature", type=float, default=0.7, help="with --do-sample (default 0.7)")
    p.add_argument("--gamma", type=int, default=4, help="draft tokens per step, num_assistant_tokens (default 4)")
    p.add_argument("--selector", default="cost_aware_discounted_thompson", choices=sorted(SELECTORS),
                   help="draft selector (default cost_aware_discounted_thompson: tokens per second of step time, "
                        "a memory of about 100 steps)")
    p.add_argument("--fresh-selector", action="store_true",
                   help="a new selector for every prompt (default: one selector learns across all prompts of the "
                        "run, as in a server)")
    p.add_argument("--assistants", default="distilled", choices=["distilled", "early-exit"],
                   help="the bundled distilled drafts (default) or early-exit copies of the target's first layers")
    p.add_argument("--depths", default="2,4,8", help="layers of each early-exit assistant (default 2,4,8)")
    p.add_argument("--prompt-lookup", action=argparse.BooleanOptionalAction, default=True,
                   help="prompt lookup (model-free n-gram drafts) in the pool (default: yes)")
    p.add_argument("--model", help="target hub name or folder (default: the bundled SmolLM2-135M-Instruct)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])


def run_selector(args: argparse.Namespace) -> tuple["str | Selector", str]:
    """``--selector`` as ``generate`` takes it, and its label: the name (a fresh selector per prompt) with
    ``--fresh-selector``, else one instance that keeps learning across all prompts of the run."""
    if args.fresh_selector:
        return args.selector, f"{args.selector} (fresh per prompt)"
    return SELECTORS[args.selector](), f"{args.selector} (one for all prompts)"


def load_models(args: argparse.Namespace) -> tuple:
    """``(target, tokenizer, assistants)`` from :func:`add_run_args`' ``--model``, ``--dtype``, ``--device``,
    ``--assistants``, ``--depths`` and ``--prompt-lookup``."""
    target, tokenizer = load_target(args.model, dtype=getattr(torch, args.dtype), device=args.device)
    if args.assistants == "distilled":
        assistants = distilled_assistants(target)
    else:
        assistants = early_exit_assistants(target, tuple(int(d) for d in args.depths.split(",")))
    return target, tokenizer, assistants + ([PromptLookup()] if args.prompt_lookup else [])
