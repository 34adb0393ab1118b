"""Distil a small assistant (draft) for a target by matching the target's next-token distributions.

The draft keeps the target's architecture, embeddings, final norm and LM head and only ``num_layers`` decoder
layers (initialised from the target's first ones). The embeddings and head stay frozen: the draft shares them with
the target at run time (:func:`~flashspec_hf.compact.load_compact`), so it adds ``num_layers`` layers of weights
and costs ``num_layers`` layers plus the head per drafted token.

Loss: cross-entropy of the draft against the target's distribution restricted to its top-``k`` tokens
(renormalised): ``-Σ_{v ∈ top-k(p)} p̃(v) log q(v)``. It equals the forward KL ``KL(p̃ ‖ q)`` up to a constant,
and the forward KL is what drives acceptance (α = 1 - TV(p, q), Leviathan et al. 2023, Thm 3.5; DistillSpec,
Zhou et al. 2024). The training text can be the target's own greedy continuations of prompts like the ones it
will serve (:func:`target_continuations`; sequence-level distillation, Kim & Rush 2016): the draft then learns the
target where greedy decoding takes it. The bundled SmolLM2 drafts were trained on such continuations alone
(``model_cards/smollm2-135m-pool.md`` compares the configurations tried).
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .compact import SHARED, save_compact
from .model_card import model_card
from .models import load_target
from .target_parts import truncated_config

CHECKPOINT = "checkpoint.pt"
"""Written into the output folder every ``checkpoint_every`` steps: the trainable weights, optimiser and schedule
state, step, losses, training seconds, and ``made_from`` (see :func:`check_previous_run`)."""

RECORD = "training.json"
"""Written last into the output folder: the finished run's settings, sizes, time, loss and ``made_from``."""


def make_draft(target: PreTrainedModel, num_layers: int, intermediate_size: int | None = None) -> PreTrainedModel:
    """A trainable copy of the target's first ``num_layers`` layers, final norm, embeddings and head.

    With ``intermediate_size`` below the target's, each MLP keeps its first ``intermediate_size`` hidden units
    (rows of the gate/up projections, columns of the down projection) as the starting point.

    Raises:
        ValueError: ``num_layers`` not in ``[1, target layers)`` or ``intermediate_size`` above the target's.
    """
    config = truncated_config(target.config, num_layers)
    width = intermediate_size or target.config.intermediate_size
    if width > target.config.intermediate_size:
        raise ValueError(f"intermediate_size {width} is above the target's {target.config.intermediate_size}")
    config.intermediate_size = width
    draft = type(target)(config).to(device=target.device, dtype=torch.float32)
    state = {k: _slice_mlp(k, v, width) for k, v in target.state_dict().items()}
    draft.load_state_dict(state, strict=False)  # the keys of the first layers match
    draft.generation_config = copy.deepcopy(target.generation_config)
    for name, param in draft.named_parameters():
        param.requires_grad = name not in SHARED and not name.endswith("embed_tokens.weight")
    return draft


def _slice_mlp(name: str, weight: torch.Tensor, width: int) -> torch.Tensor:
    if name.endswith(("mlp.gate_proj.weight", "mlp.up_proj.weight")):
        return weight[:width]  # [width, hidden]
    if name.endswith("mlp.down_proj.weight"):
        return weight[:, :width]  # [hidden, width]
    return weight


def pack(tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], seq_len: int) -> torch.Tensor:
    """Tokenise ``texts``, join them with EOS and cut the stream into int64 ``[N, seq_len]`` blocks."""
    eos = tokenizer.eos_token_id
    stream = []
    for ids in tokenizer(list(texts), add_special_tokens=False)["input_ids"]:
        stream.extend(ids + [eos])
    blocks = len(stream) // seq_len
    return torch.tensor(stream[: blocks * seq_len], dtype=torch.long).view(blocks, seq_len)


@torch.no_grad()
def teacher_topk(
    target: PreTrainedModel, blocks: torch.Tensor, k: int, batch_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's next-token distribution at every position of ``blocks`` (int64 ``[N, L]``), kept to its
    top ``k`` tokens and renormalised: probabilities fp16 ``[N, L, k]`` and token ids int32 ``[N, L, k]``, on the
    target's device (``6 N L k`` bytes). Computed once, so training steps run the draft only (bf16 autocast on
    CUDA); ``batch_size`` blocks per target forward."""
    target.eval()
    device = target.device
    probs = torch.empty(*blocks.shape, k, dtype=torch.float16, device=device)  # [N, L, k]
    ids = torch.empty(*blocks.shape, k, dtype=torch.int32, device=device)  # [N, L, k]
    for i in range(0, len(blocks), batch_size):
        with _autocast(device):
            logits = target(blocks[i : i + batch_size].to(device)).logits.float()  # [b, L, V]
        top, idx = logits.topk(k, dim=-1)  # [b, L, k]
        probs[i : i + batch_size], ids[i : i + batch_size] = top.softmax(dim=-1), idx
    return probs, ids


@torch.no_grad()
def target_continuations(
    target: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    max_new_tokens: int = 96,
    batch_size: int = 64,
    max_prompt_tokens: int = 512,
) -> list[str]:
    """Prompts followed by the target's own greedy continuations (text, what greedy acceptance rewards), for
    distillation.

    Args:
        target, tokenizer: the model that continues (its tokenizer must pad on the left).
        prompts: the texts to continue.
        max_new_tokens: tokens added to each prompt at most (fewer when the target ends with EOS, which is kept).
        batch_size: prompts per ``generate`` call; batches are made in order of prompt length, so they pad little.
        max_prompt_tokens: longer prompts are left out.

    Returns:
        ``prompt + continuation`` strings, shortest prompt first.
    """
    lengths = [len(ids) for ids in tokenizer(list(prompts), add_special_tokens=False)["input_ids"]]
    prompts = [p for n, p in sorted(zip(lengths, prompts)) if n <= max_prompt_tokens]
    out = []
    for i in range(0, len(prompts), batch_size):
        chunk = prompts[i : i + batch_size]
        batch = tokenizer(chunk, return_tensors="pt", padding=True).to(target.device)
        ids = target.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False)
        for prompt, new in zip(chunk, ids[:, batch["input_ids"].shape[1] :].tolist(), strict=True):
            if tokenizer.eos_token_id in new:  # keep the EOS, drop the padding after it
                new = new[: new.index(tokenizer.eos_token_id) + 1]
            out.append(prompt + tokenizer.decode(new))
    return out


def distill(
    target: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    texts,
    output_dir: str | Path,
    *,
    text_column: str = "text",
    num_layers: int = 1,
    intermediate_size: int | None = None,
    vocab_size: int | None = None,
    seq_len: int = 256,
    batch_size: int = 32,
    steps: int = 1000,
    lr: float = 1e-3,
    top_k: int = 64,
    checkpoint_every: int = 250,
    seed: int = 0,
    progress: bool = True,
    card: dict | None = None,
) -> Path:
    """Train a draft for ``target`` on ``texts`` and write a ``from_pretrained`` folder with its model card.

    Args:
        target: the model to imitate (frozen; bf16 autocast on CUDA).
        tokenizer: the target's tokenizer (saved with the draft).
        texts: a ``datasets.Dataset`` with a ``text_column`` of strings, or a list of strings.
        output_dir: where ``config.json``, ``model.safetensors``, the tokenizer, ``README.md`` (model card),
            ``compact/`` (the draft's own weights only, see :func:`~flashspec_hf.compact.save_compact`) and
            ``training.json`` (written last) go. A ``checkpoint.pt`` there (every ``checkpoint_every`` steps)
            resumes an interrupted run made from the same inputs; a finished run made from the same inputs is
            left as it is (nothing trained or written). See :func:`check_previous_run`.
        num_layers: decoder layers of the draft; ``intermediate_size``: its MLP width (default the target's).
        vocab_size: if set, the draft head keeps only the ``vocab_size`` most frequent tokens of ``texts``
            (:func:`frequent_tokens`; stored in ``compact/vocab.safetensors``).
        seq_len, batch_size: tokens per training block, blocks per step.
        steps: optimiser steps (AdamW, cosine schedule, 3% warm-up).
        top_k: target tokens per position kept for the loss; :func:`teacher_topk` keeps them for the whole corpus
            on the target's device for the blocks training visits, at most ``steps × batch_size`` (6 bytes per
            token per kept token: 0.42 GB for the bundled chat draft's 4,298 blocks of 256 tokens at ``k`` = 64).
        card: extra fields for the model card (``name``, ``domain``, ``data``, ``base_model``).

    Returns:
        ``output_dir``.

    Raises:
        ValueError: no text, fewer tokens than one batch, or ``output_dir`` holds a run made from other inputs
            (settings, corpus or target; see :func:`check_previous_run`), checked before any training.
    """
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    texts = list(texts[text_column]) if hasattr(texts, "column_names") else list(texts)
    if not texts:
        raise ValueError("distill needs text: the dataset is empty")
    torch.manual_seed(seed)
    blocks = pack(tokenizer, texts, seq_len)  # [N, seq_len]
    if len(blocks) < batch_size:
        raise ValueError(f"{len(blocks)} blocks of {seq_len} tokens is less than one batch of {batch_size}")
    made_from = {
        "num_layers": num_layers, "intermediate_size": intermediate_size or target.config.intermediate_size,
        "vocab_size": vocab_size, "seq_len": seq_len, "batch_size": batch_size, "steps": steps, "lr": lr,
        "top_k": top_k, "seed": seed, "corpus": corpus_fingerprint(blocks), "target": target_fingerprint(target),
    }
    if check_previous_run(output_dir, made_from) == "finished":
        if progress:
            print(f"[flashspec] {output_dir} holds this run, finished: nothing to train", file=sys.stderr)
        return output_dir
    device = target.device
    corpus_blocks = len(blocks)
    order = torch.randperm(corpus_blocks, generator=torch.Generator().manual_seed(seed))
    blocks = blocks[order[: steps * batch_size]]  # [N', seq_len]: the blocks training visits, in visiting order
    teacher_p, teacher_i = teacher_topk(target, blocks, top_k, batch_size)  # [N', seq_len, k] fp16, int32
    draft = make_draft(target, num_layers, intermediate_size).train()
    params = [p for p in draft.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0, betas=(0.9, 0.95))
    warmup = max(1, steps * 3 // 100)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps))
    )
    start, losses, seconds = _resume(output_dir / CHECKPOINT, draft, optimizer, schedule)
    started = time.time() - seconds
    bar = tqdm(range(start, steps), desc="distill", disable=not progress, initial=start, total=steps)
    for step in bar:
        pick = (torch.arange(batch_size) + step * batch_size) % len(blocks)
        ids = blocks[pick].to(device)  # [batch, seq_len]
        pick = pick.to(device)
        top_p, top_i = teacher_p[pick].float(), teacher_i[pick].long()  # [batch, seq_len, k]
        with _autocast(device):
            student = draft(ids).logits.float()  # [batch, seq_len, V]
        loss = -(top_p * student.log_softmax(dim=-1).gather(-1, top_i)).sum(-1).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        bar.set_postfix(loss=f"{sum(losses[-50:]) / len(losses[-50:]):.3f}")
        if (step + 1) % checkpoint_every == 0 or step + 1 == steps:
            _checkpoint(output_dir / CHECKPOINT, made_from, draft, optimizer, schedule, step + 1, losses,
                        time.time() - started)
    draft.eval()
    vocab_ids = frequent_tokens(tokenizer, texts, vocab_size) if vocab_size else None
    info = {
        "steps": steps,
        "tokens_seen": steps * batch_size * seq_len,
        "training_blocks": corpus_blocks,
        "seconds": round(time.time() - started, 1),
        "final_loss": sum(losses[-50:]) / max(len(losses[-50:]), 1) if losses else None,
        "num_layers": num_layers,
        "intermediate_size": draft.config.intermediate_size,
        "draft_vocab": len(vocab_ids) if vocab_ids is not None else None,
        "top_k": top_k,
        "lr": lr,
        "batch_size": batch_size,
        "seq_len": seq_len,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else str(device),
        **(card or {}),
        "made_from": made_from,
    }
    draft.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    save_compact(draft, output_dir / "compact", vocab_ids)
    (output_dir / "README.md").write_text(model_card(info))
    (output_dir / RECORD).write_text(json.dumps(info, indent=1))  # last: its presence marks a finished run
    return output_dir


def corpus_fingerprint(blocks: torch.Tensor) -> str:
    """SHA-256 (hex) of the packed training corpus, int64 ``[N, seq_len]`` (see :func:`pack`): the token ids the
    teacher and the draft see, so it changes with the texts, the tokenizer and ``seq_len``."""
    return hashlib.sha256(blocks.to(torch.int64).contiguous().numpy().tobytes()).hexdigest()


def target_fingerprint(target: PreTrainedModel, values: int = 16) -> str:
    """SHA-256 (hex) of the teacher's identity: its class and, for every parameter, its name, shape, dtype and
    first and last ``values`` values. Cheap at any size (no pass over the weights) and independent of where the
    target was loaded from; another checkpoint of the same architecture (fine-tuned, another dtype) differs."""
    digest = hashlib.sha256(type(target).__name__.encode())
    for name, param in target.named_parameters():
        flat = param.detach().reshape(-1)
        sample = torch.cat([flat[:values], flat[-values:]]).float().cpu().tolist()
        digest.update(f"{name} {tuple(param.shape)} {param.dtype} {sample}".encode())
    return digest.hexdigest()


def check_previous_run(output_dir: str | Path, made_from: dict) -> str | None:
    """What ``output_dir`` holds from an earlier :func:`distill` call, checked against what this one is made from.

    Args:
        output_dir: the run's folder.
        made_from: this run's settings (``num_layers``, ``intermediate_size``, ``vocab_size``, ``seq_len``,
            ``batch_size``, ``steps``, ``lr``, ``top_k``, ``seed``) and fingerprints (``corpus``:
            :func:`corpus_fingerprint`, ``target``: :func:`target_fingerprint`). Only the keys given are compared,
            so a command line can check its settings before it loads any model.

    Returns:
        None: no earlier run (start afresh); ``"finished"``: a finished run (:data:`RECORD`) made from the same
        inputs; ``"interrupted"``: a :data:`CHECKPOINT` made from the same inputs, to resume.

    Raises:
        ValueError: an earlier run made from other inputs (the message names what differs), or one that does not
            record what it was made from (written before flashspec_hf recorded it); either way the fix is another
            output folder, or deleting that one.
    """
    output_dir = Path(output_dir)
    if (output_dir / RECORD).exists():
        status, found = "finished", "a finished run"
        recorded = json.loads((output_dir / RECORD).read_text()).get("made_from")
    elif (output_dir / CHECKPOINT).exists():
        state = torch.load(output_dir / CHECKPOINT, map_location="cpu", weights_only=True)
        status, found = "interrupted", f"an interrupted run (stopped after step {state['step']})"
        recorded = state.get("made_from")
    else:
        return None
    fix = f"write to another folder, or delete {output_dir} to start over"
    if recorded is None:
        raise ValueError(f"{output_dir} holds {found} that does not record what it was made from: {fix}")
    differ = [
        f"another {key}" if key in ("corpus", "target") else f"{key} {recorded.get(key)!r} there, {value!r} now"
        for key, value in made_from.items()
        if recorded.get(key) != value
    ]
    if differ:
        raise ValueError(f"{output_dir} holds {found} made from other inputs: {'; '.join(differ)}; {fix}")
    return status


def frequent_tokens(tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], num: int) -> torch.Tensor:
    """The ``num`` most frequent token ids of ``texts`` plus the special tokens, int64 ``[<= num + specials]``,
    ascending: the vocabulary of a draft head that skips rare tokens (FR-Spec, Zhao et al. 2025).

    Special tokens: the tokenizer's named ones and every added token marked special (a chat template's end-of-turn
    token among them: some converted tokenizers name only one of them, and a draft without it never proposes the end
    of a reply)."""
    counts = torch.zeros(len(tokenizer), dtype=torch.long)
    for ids in tokenizer(list(texts), add_special_tokens=False)["input_ids"]:
        counts += torch.bincount(torch.tensor(ids, dtype=torch.long), minlength=len(counts))
    specials = set(tokenizer.all_special_ids) | {i for i, t in tokenizer.added_tokens_decoder.items() if t.special}
    keep = set(counts.topk(min(num, len(counts))).indices.tolist()) | specials
    return torch.tensor(sorted(keep), dtype=torch.long)


def _autocast(device: torch.device):
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")


def _checkpoint(
    path: Path, made_from: dict, draft, optimizer, schedule, step: int, losses: list[float], seconds: float
) -> None:
    trainable = {k: v for k, v in draft.state_dict().items() if k not in SHARED}
    state = {"draft": trainable, "optimizer": optimizer.state_dict(), "schedule": schedule.state_dict(),
             "made_from": made_from}
    tmp = path.with_suffix(".tmp")
    torch.save({"step": step, "losses": losses, "seconds": seconds, **state}, tmp)
    tmp.replace(path)


def _resume(path: Path, draft, optimizer, schedule) -> tuple[int, list[float], float]:
    """Step, losses so far and training seconds so far (0, [], 0.0 without a checkpoint)."""
    if not path.exists():
        return 0, [], 0.0
    state = torch.load(path, map_location=draft.device, weights_only=True)
    draft.load_state_dict(state["draft"], strict=False)
    optimizer.load_state_dict(state["optimizer"])
    schedule.load_state_dict(state["schedule"])
    return state["step"], state["losses"], state["seconds"]


def main(argv: list[str] | None = None) -> None:
    """``flashspec-distill``: distil a draft for the bundled SmolLM2 target (or ``--model``) on a domain corpus
    (``chat``, ``code``, ``general``) or on a json / jsonl / csv / parquet file's text column. Bad options, a bad
    file or an output folder holding another run stop it before the target loads (one line, exit status 2)."""
    # the command line needs the demo extra (datasets); training itself does not
    from .cli import Parser, positive_int, user_errors
    from .data import distill_corpus
    from .evaluation.inputs import load_prompt_files

    p = Parser(prog="flashspec-distill", description=main.__doc__)
    p.add_argument("--domain", choices=["chat", "code", "general"], help="built-in corpus")
    p.add_argument("--data-files", nargs="+", metavar="FILE",
                   help="local json / jsonl / csv / parquet file(s) loaded with datasets.load_dataset")
    p.add_argument("--text-column", default="text", help="column of --data-files with the texts (default text)")
    p.add_argument("--output", required=True,
                   help="folder to write; an interrupted run there made from the same settings and corpus resumes "
                        "from its checkpoint.pt, a finished one is left as it is, any other run is refused")
    p.add_argument("--model", help="target: a preset (smollm2-135m, the default; qwen2.5-coder-1.5b), a hub name "
                                   "or a folder")
    p.add_argument("--num-layers", type=positive_int, default=2)
    p.add_argument("--intermediate-size", type=positive_int, default=768,
                   help="MLP width of the draft layers (at most the target's)")
    p.add_argument("--draft-vocab", type=int, default=8192, help="frequent tokens the draft head keeps (0: all)")
    p.add_argument("--steps", type=positive_int, default=4000,
                   help="optimiser steps (default 4000; the code draft used 8000)")
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument("--seq-len", type=positive_int, default=256)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--top-k", type=positive_int, default=64)
    p.add_argument("--num-texts", type=int, default=0,
                   help="documents of the built-in corpus trained on besides the target's continuations (default 0, "
                        "as the bundled drafts)")
    p.add_argument("--self-generated", type=int, default=6000,
                   help="built-in prompts (or file texts, cut to 400 characters) continued by the target (default "
                        "6000; about 7,900 function prompts exist for code)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args(argv)
    if (args.domain is None) == (args.data_files is None):
        p.error("give exactly one of --domain and --data-files")
    settings = {"num_layers": args.num_layers, "vocab_size": args.draft_vocab or None, "seq_len": args.seq_len,
                "batch_size": args.batch_size, "steps": args.steps, "lr": args.lr, "top_k": args.top_k}
    with user_errors(p.prog):  # before any model loads; distill() checks the rest (MLP width, corpus, target)
        check_previous_run(args.output, settings)
        if args.data_files:
            data = load_prompt_files(args.data_files)
            if args.text_column not in data.column_names:
                raise ValueError(f"{', '.join(args.data_files)}: no column {args.text_column!r}; the columns are "
                                 f"{data.column_names}: name the one with the texts with --text-column")
    with user_errors(p.prog):
        target, tokenizer = load_target(args.model, device=args.device)
    if args.domain:
        texts, prompts = distill_corpus(args.domain, tokenizer, args.num_texts, args.self_generated)
        data_name = f"{args.num_texts:,} documents of the built-in {args.domain} corpus"
    else:
        texts = data[args.text_column]
        prompts, data_name = [t[:400] for t in texts], ", ".join(args.data_files)
    if args.self_generated:
        batch, new_tokens = (256 if target.device.type == "cuda" else 8), 96
        generated = target_continuations(target, tokenizer, prompts[: args.self_generated], new_tokens, batch)
        texts = list(texts) + generated
        data_name += f" + greedy target continuations ({new_tokens} tokens) of {len(generated):,} prompts"
    card = {"name": Path(args.output).name, "domain": args.domain or "custom", "data": data_name,
            "base_model": str(target.config.name_or_path)}
    with user_errors(p.prog):
        distill(target, tokenizer, texts, args.output, **settings, card=card,
                intermediate_size=min(args.intermediate_size, target.config.intermediate_size))
    print(f"draft in {args.output}")
