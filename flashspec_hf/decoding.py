"""The speculative decoding loop: draft with the selected assistant, verify with the target, emit, repeat.

Each step, for a batch of ``B`` rows with ragged acceptance:

1. the candidate generator picks an arm (a draft source and its γ) and drafts ``[B, γ]`` tokens
   (:mod:`flashspec_hf.candidates`);
2. the target reads its unseen columns plus the drafts in one forward: logits ``[B, γ + 1, V]``;
3. generate's processors run per position (:mod:`flashspec_hf.processing`);
4. verification emits ``accepted + 1`` tokens per row (:mod:`flashspec_hf.verification`);
5. EOS, ``max_new_tokens`` and stopping criteria cut each row's emitted tokens *inside* the block;
6. one device-to-host copy of three ``[B]`` vectors (accepted, emitted, finished) drives the host side: cache
   crops, the selector's reward, statistics and the loop's exit. A full-information selector adds one more
   (the arms' agreement counts).

Host syncs per step that remain (besides that copy): the attention-mask check inside transformers' mask creation
and, with sampling, ``torch.multinomial`` on CPU only. On CUDA the static loop (:mod:`flashspec_hf.static`), which
has none, runs instead whenever the call needs nothing it lacks.
"""

from __future__ import annotations

import time

import torch
from transformers import GenerationConfig, PreTrainedModel
from transformers.generation.logits_process import LogitsProcessorList
from transformers.generation.stopping_criteria import EosTokenCriteria, MaxLengthCriteria, StoppingCriteriaList
from transformers.generation.utils import GenerateDecoderOnlyOutput

from .candidates import MultiAssistantCandidateGenerator
from .columns import ColumnCache, Columns
from .drafts import DraftContext, DraftSource, ModelDrafts
from .kernels.reference import PLACEHOLDER_TOKEN_ID
from .processing import Groups, LogitsProcessing, Sequences
from .selection import Selector, make_selector
from .static import static_decode, static_unsupported
from .stats import FlashSpecStats
from .verification import verify


def speculative_decode(
    model: PreTrainedModel,
    input_ids: torch.LongTensor,
    logits_processor: LogitsProcessorList,
    stopping_criteria: StoppingCriteriaList,
    generation_config: GenerationConfig,
    assistants: list[PreTrainedModel | DraftSource],
    selector: str | Selector | None,
    num_assistant_tokens: int | list[int],
    attention_mask: torch.Tensor | None = None,
    streamer=None,
    static: bool | None = None,
) -> GenerateDecoderOnlyOutput | torch.LongTensor:
    """Generate with the target ``model`` and draft ``assistants``; same distribution as ``model`` alone.

    Args:
        model: the target.
        input_ids: int64 ``[B, L]`` left-padded prompts (``attention_mask`` ``[B, L]`` marks the padding).
        logits_processor, stopping_criteria, generation_config: as prepared by ``generate``.
        assistants: draft models sharing the target's tokenizer, or other draft sources
            (:class:`~flashspec_hf.drafts.PromptLookup`).
        selector: picks the arm of each step; a name or a :class:`~flashspec_hf.selection.Selector`.
        num_assistant_tokens: ``γ`` >= 1, or several: every source is then paired with every γ (one arm each).
        streamer: a transformers streamer (batch 1), fed each step's emitted tokens.
        static: run the static-shape loop of :mod:`flashspec_hf.static` (static caches, no per-step
            synchronisation, CUDA graphs on the GPU); None: on CUDA whenever the call needs nothing it lacks.

    Raises:
        ValueError: ``static=True`` with a feature the static loop does not support.

    Returns:
        ``[B, L + N]`` sequences, or a ``GenerateDecoderOnlyOutput`` (``sequences``, ``scores``, ``logits``; no
        cache) when ``generation_config.return_dict_in_generate``. Statistics go to
        ``model.flashspec_stats`` (:class:`~flashspec_hf.stats.FlashSpecStats`).
    """
    start = time.perf_counter()
    prompt_length = input_ids.shape[1]
    gammas = [num_assistant_tokens] if isinstance(num_assistant_tokens, int) else list(num_assistant_tokens)
    arms = [(source, g) for source in range(len(assistants)) for g in gammas]  # (source index, γ) per arm
    selector = make_selector(selector, len(arms), [g for _, g in arms])
    device = input_ids.device
    pad = generation_config._pad_token_tensor
    pad_token_id = int(pad) if pad is not None else 0
    eos, max_length, criteria = _split_criteria(stopping_criteria, generation_config.max_length)
    eos = eos.to(device) if eos is not None else None
    max_new_tokens = max_length - prompt_length
    vocab_size = model.config.get_text_config().vocab_size

    processing = LogitsProcessing(logits_processor)
    sources = [a if isinstance(a, DraftSource) else ModelDrafts(a, vocab_size) for a in assistants]
    names = arm_names(assistants)
    stats = FlashSpecStats(
        [names[s] if len(gammas) == 1 else f"{names[s]}@{g}" for s, g in arms], max(gammas), [g for _, g in arms]
    )
    want_scores, want_logits = _recording(generation_config)
    unsupported = static_unsupported(model, sources, processing, criteria, streamer, want_scores or want_logits, selector)
    if static and unsupported:
        raise ValueError(
            f"cache_implementation='static' does not support {unsupported}; drop it, or pass "
            "cache_implementation='dynamic' (or nothing) for flashspec's dynamic loop"
        )
    if static or (static is None and unsupported is None and device.type == "cuda"):
        sequences = static_decode(
            model, input_ids, attention_mask, processing, eos, max_new_tokens, pad_token_id, sources, arms,
            selector, generation_config.do_sample, stats,
        )
        recorded = ([], [], [])  # the static loop records no scores (it refuses calls that ask for them)
    else:
        sequences, recorded = _dynamic_decode(
            model, input_ids, attention_mask, processing, criteria, eos, max_new_tokens, pad_token_id, sources,
            arms, selector, generation_config.do_sample, stats, streamer, want_scores, want_logits,
        )

    stats.new_tokens = int(sequences.num_new.sum())
    stats.seconds = time.perf_counter() - start
    model.flashspec_stats = stats
    if not generation_config.return_dict_in_generate:
        return sequences.result()
    recorded_scores, recorded_logits, emitted_counts = recorded
    return GenerateDecoderOnlyOutput(
        sequences=sequences.result(),
        scores=_per_token(recorded_scores, emitted_counts) if want_scores else None,
        logits=_per_token(recorded_logits, emitted_counts) if want_logits else None,
    )


def _dynamic_decode(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    processing: LogitsProcessing,
    criteria: StoppingCriteriaList,
    eos: torch.Tensor | None,
    max_new_tokens: int,
    pad_token_id: int,
    sources: list[DraftSource],
    arms: list[tuple[int, int]],
    selector: Selector,
    do_sample: bool,
    stats: FlashSpecStats,
    streamer,
    want_scores: bool,
    want_logits: bool,
) -> tuple[Sequences, tuple[list, list, list[list[int]]]]:
    """The dynamic loop (module docstring): fills ``stats``; returns the filled :class:`Sequences` and, when
    recording, the per-step scores ``[B, γ + 1, V]``, raw logits and emitted counts (empty lists otherwise)."""
    batch_size = input_ids.shape[0]
    device = input_ids.device
    vocab_size = model.config.get_text_config().vocab_size
    columns = Columns.from_prompt(input_ids, attention_mask)
    sequences = Sequences(input_ids, max_new_tokens, max(g for _, g in arms), pad_token_id)
    groups = sequences.groups([True] * batch_size)  # rows by tokens generated, refreshed every step

    def process_draft(logits: torch.Tensor, drafts: torch.Tensor) -> torch.Tensor:
        if processing.is_identity:
            return logits.float()
        return processing(logits, sequences, groups, drafts, drafts[:, :0])

    generator = MultiAssistantCandidateGenerator(
        sources, arms, selector, DraftContext(columns, sequences, process_draft, vocab_size, do_sample)
    )
    target = ColumnCache(model, vocab_size)
    if batch_size > 1:
        for cache in [target] + [s.cache for s in sources if isinstance(s, ModelDrafts)]:
            cache.check_holes_allowed()
    recorded_scores, recorded_logits, emitted_counts = [], [], []
    finished = torch.zeros(batch_size, dtype=torch.bool, device=device)  # [B]
    active = [True] * batch_size
    steps_left = max_new_tokens > 0
    step_start = time.perf_counter()
    while steps_left:
        length = columns.length
        candidates, draft_logits = generator.get_candidates(columns.tokens)
        drafts = candidates[:, length:]  # [B, γ]
        gamma = drafts.shape[1]
        logits = target.forward(columns, drafts, logits_to_keep=gamma + 1).to(device)  # [B, γ+1, V]
        if processing.is_identity:
            scores = logits
        else:
            scores = processing(logits, sequences, groups, drafts[:, :0], drafts)  # [B, γ+1, V] fp32
        output, num_accepted = verify(scores, drafts, draft_logits)  # [B, γ+1], [B]
        was_active = ~finished  # [B]
        output = output.masked_fill(output == PLACEHOLDER_TOKEN_ID, pad_token_id)
        num_emitted, finished = _cut_block(
            output, num_accepted, scores, finished, sequences, groups, criteria, eos, max_new_tokens
        )
        # the step's only device-to-host copy
        accepted_h, emitted_h, finished_h = torch.stack([num_accepted, num_emitted, finished.long()]).tolist()
        now = time.perf_counter()
        seconds, step_start = now - step_start, now

        max_accepted = max(accepted_h)
        num_new_before = sequences.num_new.clone() if selector.full_information else None  # [B]
        sequences.append(output, num_emitted, emitted_h)
        _append_columns(columns, output, num_accepted, max_accepted, holes=min(accepted_h) < max_accepted)
        target.crop(length + max_accepted)
        generator.crop(length + max_accepted)
        active_accepted = [n for n, a in zip(accepted_h, active, strict=True) if a]
        verified = (output, num_accepted, was_active, num_new_before, max_accepted) if selector.full_information else None
        generator.update_candidate_strategy(columns.tokens, scores, active_accepted, seconds, verified)
        stats.record(generator.arm, active_accepted, seconds)
        if streamer is not None:
            streamer.put(output[0, : emitted_h[0]].cpu())
        if want_scores or want_logits:
            recorded_scores.append(scores if want_scores else None)
            recorded_logits.append(logits.float() if want_logits else None)
            emitted_counts.append(emitted_h)
        active = [not f for f in finished_h]
        steps_left = any(active)
        groups = sequences.groups(active)
    if streamer is not None:
        streamer.end()
    return sequences, (recorded_scores, recorded_logits, emitted_counts)


def _cut_block(
    output: torch.Tensor,
    num_accepted: torch.Tensor,
    scores: torch.Tensor,
    finished: torch.Tensor,
    sequences: Sequences,
    groups: Groups,
    criteria: StoppingCriteriaList,
    eos: torch.Tensor | None,
    max_new_tokens: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens each row keeps of its ``[B, γ + 1]`` output block, and which rows are finished afterwards.

    A row keeps ``accepted + 1`` tokens, cut after the first EOS, at ``max_new_tokens``, and after the first
    position where a stopping criterion fires (checked position by position, so a stop string completed in the
    middle of a block ends the row there); finished rows keep none.

    Returns:
        num_emitted int64 ``[B]``, finished bool ``[B]``.
    """
    width = output.shape[1]
    pos = torch.arange(width, device=output.device)  # [γ+1]
    num_emitted = torch.minimum(num_accepted + 1, max_new_tokens - sequences.num_new)  # [B]
    num_emitted = num_emitted.masked_fill(finished, 0)
    ended = finished.clone()
    if eos is not None:
        is_eos = (output.unsqueeze(-1) == eos).any(-1) & (pos < num_emitted.unsqueeze(1))  # [B, γ+1] (isin syncs)
        first = torch.where(is_eos, pos, width).amin(dim=1)  # [B]
        ended |= first < width
        num_emitted = torch.minimum(num_emitted, first + 1)
    for generated, rows in groups if criteria else []:
        for i in range(width):
            hit = criteria(torch.cat([sequences.prefix(generated), output[:, : i + 1]], dim=1), scores[:, i])
            hit &= i < num_emitted
            hit = hit if rows is None else hit & rows[:, 0]
            num_emitted = torch.where(hit, i + 1, num_emitted)
            ended |= hit
    ended |= sequences.num_new + num_emitted >= max_new_tokens
    return num_emitted, ended


def _split_criteria(
    stopping_criteria: StoppingCriteriaList, default_max_length: int
) -> tuple[torch.Tensor | None, int, StoppingCriteriaList]:
    """EOS ids ``[E]`` and ``max_length`` (applied per row, inside a block) and the criteria checked per position.

    ``EosTokenCriteria`` and ``MaxLengthCriteria`` (generate's or the user's) read ``input_ids.shape[-1]`` or only
    the last token; their parameters are applied per emitted position instead.
    """
    eos_ids = [c.eos_token_id.flatten() for c in stopping_criteria if isinstance(c, EosTokenCriteria)]
    lengths = [c.max_length for c in stopping_criteria if isinstance(c, MaxLengthCriteria)]
    rest = [c for c in stopping_criteria if not isinstance(c, (EosTokenCriteria, MaxLengthCriteria))]
    eos = torch.cat(eos_ids) if eos_ids else None
    return eos, min(lengths, default=default_max_length), StoppingCriteriaList(rest)


def _append_columns(
    columns: Columns, output: torch.Tensor, num_accepted: torch.Tensor, max_accepted: int, holes: bool
) -> None:
    """Append ``max_accepted`` draft columns (holes past each row's accepted count) and the new pending token;
    ``holes`` is whether some row accepted fewer than ``max_accepted``."""
    pos = torch.arange(max_accepted + 1, device=output.device)  # [m + 1]
    keep = pos < num_accepted.unsqueeze(1)  # [B, m+1]
    pending = output.gather(1, num_accepted.unsqueeze(1))  # [B, 1] recovered or bonus token
    tokens = torch.cat([output[:, :max_accepted], pending], dim=1)  # [B, m+1]
    valid = keep.clone()
    valid[:, -1] = True
    base = columns.positions[:, -1:] + 1  # [B, 1]
    positions = torch.where(keep, base + pos, base + num_accepted.unsqueeze(1))  # holes: any position, masked
    columns.append(tokens, valid, positions, holes)


def _recording(generation_config: GenerationConfig) -> tuple[bool, bool]:
    """Whether scores / raw logits are recorded for the returned dict."""
    as_dict = generation_config.return_dict_in_generate
    return bool(as_dict and generation_config.output_scores), bool(as_dict and generation_config.output_logits)


def _per_token(recorded: list[torch.Tensor], emitted: list[list[int]]) -> tuple[torch.Tensor, ...]:
    """Per-step ``[B, γ + 1, V]`` tensors -> one ``[B, V]`` per generated token, as stock ``generate`` returns."""
    stacked = torch.cat(recorded, dim=1)  # [B, steps * (γ+1), V]
    width = recorded[0].shape[1]
    index = []  # per row: flat positions of its emitted tokens
    for row in range(stacked.shape[0]):
        index.append([s * width + j for s, counts in enumerate(emitted) for j in range(counts[row])])
    longest = max(len(ix) for ix in index)
    index = torch.tensor([ix + [ix[-1] if ix else 0] * (longest - len(ix)) for ix in index], device=stacked.device)
    gathered = stacked.gather(1, index.unsqueeze(-1).expand(-1, -1, stacked.shape[-1]))  # [B, N, V]
    return tuple(gathered.unbind(dim=1))


def arm_names(assistants: list[PreTrainedModel | DraftSource]) -> list[str]:
    """A distinct short name per draft source: the last part of ``config.name_or_path`` (models), ``name``
    (other sources), else ``assistant_<i>``."""
    names = [
        getattr(a, "name", "") if isinstance(a, DraftSource) else (a.config.name_or_path or "").rstrip("/").split("/")[-1]
        for a in assistants
    ]
    names = [n or f"assistant_{i}" for i, n in enumerate(names)]
    return [n if names.count(n) == 1 else f"{n}#{i}" for i, n in enumerate(names)]
