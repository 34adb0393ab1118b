"""Draft sources: what proposes the γ draft tokens of a step. A draft model with its own KV cache (through either
runner of :mod:`flashspec_hf.runners`; an early exit of the target reads the target's in the static backend), or
prompt lookup (model-free n-gram matching). Each source also predicts the tokens a step verified, which
full-information selection scores (:func:`~flashspec_hf.evidence.score_arms`), and guesses the prompt's own last
tokens, which gives a selector its prior before the first step (:func:`prompt_agreement`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .columns import Columns
from .runners import Runner
from .sequences import Sequences
from .streams import fork

DraftProcessor = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""``(logits [B, 1, V], drafted so far int64 [B, i]) -> float32 [B, 1, V]``: generate's processors applied to one
position of draft logits (the draft scores ``q``)."""


@dataclass
class DraftContext:
    """What a source may read and write: the shared columns, the rows' tokens and the generation settings.

    Attributes:
        columns: the column layout shared with the target (:mod:`flashspec_hf.columns`); a source writes its drafts
            at columns ``[T, T + γ)``.
        sequences: prompt + generated tokens of every row.
        process: generate's processors for one position of draft logits.
        vocab_size: the target's vocabulary size ``V``.
        do_sample: sample drafts from ``q`` (True) or take its argmax.
        plain_greedy: greedy with no processors: a draft model's token is the argmax of its own logits, and ``q`` on
            the target's vocabulary is never built (nothing reads it).
        fewer_drafts: a source may draft fewer than the arm's γ tokens in a step, down to none (the dynamic backend;
            a captured step's shapes are fixed).
        side_stream: where a source may run work beside its own, joining it before the step goes on
            (:func:`~flashspec_hf.streams.fork`; the static backend's side stream on CUDA), or None: in line.
    """

    columns: Columns
    sequences: Sequences
    process: DraftProcessor
    vocab_size: int
    do_sample: bool
    fewer_drafts: bool = False
    side_stream: torch.cuda.Stream | None = None
    plain_greedy: bool = False


class DraftSource(ABC):
    """Proposes draft tokens; one source may serve several arms (one per γ).

    Attributes:
        name: a short name for statistics (empty: ``assistant_<i>``).
    """

    name: str = ""

    @abstractmethod
    def propose(self, ctx: DraftContext, gamma: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """γ draft tokens after every row (fewer, down to none, only where :attr:`DraftContext.fewer_drafts`), also
        written to ``ctx.columns`` at ``[T, T + γ)``.

        Returns:
            draft tokens int64 ``[B, γ]`` and the draft scores ``q`` float32 ``[B, γ, V]`` they were sampled from
            (None when greedy: verification then compares tokens only); the step's γ is their width.
        """

    @abstractmethod
    def predict(self, ctx: DraftContext, num_new_before: torch.Tensor, width: int) -> torch.Tensor:
        """Greedy predictions of the step's ``width`` emitted-token positions, each from the emitted tokens before it
        (teacher forcing), called after ``ctx.columns`` and ``ctx.sequences`` received the step's tokens.

        Args:
            num_new_before: int64 ``[B]`` tokens each row had generated before the step.

        Returns:
            int64 ``[B, width]``; only positions up to each row's accepted count are meaningful.
        """

    keeps_current = False
    """Whether :meth:`keep_current` runs a forward (a draft model on the static backend)."""
    gives_side_evidence = False
    """Whether :meth:`keep_current` writes the source's guesses when given a ``guesses`` buffer (a draft model on the
    static backend; :class:`~flashspec_hf.evidence.SideEvidence`)."""

    def keep_current(self, ctx: DraftContext, gamma: int, guesses: torch.Tensor | None = None) -> None:
        """Called on a step that another source drafted (``gamma`` drafts now at columns ``[T, T + γ)``), on the
        static backend's every :data:`~flashspec_hf.backends.KEEP_CURRENT_EVERY`-th step; sources without a cache
        ignore it. A source that :attr:`gives_side_evidence` also writes its greedy guesses of the
        step's verified positions ``0 … γ - 1`` to ``guesses`` (int64 ``[B, >= γ]``, target ids) when given one
        (:class:`~flashspec_hf.evidence.SideEvidence`); the others are never given one.

        A source that :attr:`keeps_current` runs this on the step's side stream in a captured step
        (:func:`~flashspec_hf.streams.fork`), while the main stream runs the target's forward, verification and the
        append to ``ctx.sequences``: it may read ``ctx.columns`` and write only its own state (its cache, its
        ``seen``, ``guesses``), never ``ctx.sequences``, which changes under it."""

    def prompt_guesses(self, ctx: DraftContext, window: range) -> torch.Tensor | None:
        """Greedy guesses int64 ``[B, W]`` of the prompt's tokens at columns ``window.start + 1 … window.stop``, each
        from the columns before it, or None when the source has none (the plain arm; an early exit, whose prefill
        runs no forward of its own)."""
        return None


class ModelDrafts(DraftSource):
    """Drafts from a draft model: one forward that catches up on the columns it has not seen (ending with the
    pending column, :meth:`~flashspec_hf.runners.Runner.catch_up`), then one per further draft token, each token
    drawn from the draft scores ``q`` (generate's processors applied once).

    Args:
        runner: the draft model's runner; its model is a causal LM with the target's tokenizer (its vocabulary may
            be padded differently, or reduced to the ids of a ``draft_vocab_ids`` buffer).
        vocab_size: the target's ``V``.
    """

    def __init__(self, runner: Runner, vocab_size: int):
        self.runner = runner
        self.vocab_size = vocab_size
        self.token_ids = getattr(runner.model, "draft_vocab_ids", None)
        self.name = (runner.model.config.name_or_path or "").rstrip("/").split("/")[-1]

    def propose(self, ctx: DraftContext, gamma: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        columns = ctx.columns
        logits = self.runner.catch_up(columns)  # [B, 1, V_draft]
        slots = columns.draft_slots(gamma)  # [B, γ]
        tokens, scores = [], []  # [B, 1] each
        for i in range(gamma):
            if ctx.plain_greedy:  # a reduced head's argmax, without a [B, 1, V] tensor of -inf around it
                token = self.greedy(logits).to(columns.tokens.device)  # [B, 1]
            else:
                drawn = torch.cat(tokens, dim=1) if tokens else columns.tokens[:, :0]  # [B, i]
                q = ctx.process(self.fit(logits).float().to(columns.tokens.device), drawn)  # [B, 1, V]
                token = draw(q[:, 0], ctx.do_sample)  # [B, 1]
                scores.append(q)
            columns.write_drafts(token, slots[:, i : i + 1])
            tokens.append(token)
            if i + 1 < gamma:
                logits = self.runner.forward(columns, 1, keep=1)
        return torch.cat(tokens, dim=1), torch.cat(scores, dim=1) if ctx.do_sample else None  # [B, γ], [B, γ, V]

    def predict(self, ctx: DraftContext, num_new_before: torch.Tensor, width: int) -> torch.Tensor:
        # the pending column stays unseen: the next draft forward needs one input column (dynamic runners only)
        unseen = ctx.columns.host_length - 1 - self.runner.seen
        logits = self.runner.forward(ctx.columns, unseen, keep=width)  # [B, width, V_draft]
        return self.greedy(logits).to(ctx.columns.tokens.device)  # [B, width]

    @property
    def keeps_current(self) -> bool:
        return self.runner.keeps_current

    gives_side_evidence = keeps_current  # every draft model that runs a keep-current forward can keep its logits

    def keep_current(self, ctx: DraftContext, gamma: int, guesses: torch.Tensor | None = None) -> None:
        scored = guesses is not None and gamma > 0
        logits = self.runner.keep_current(ctx.columns, gamma, logits=scored)  # [B, γ, V_draft] if scored, else None
        if scored:
            guesses[:, :gamma].copy_(self.greedy(logits))

    def prompt_guesses(self, ctx: DraftContext, window: range) -> torch.Tensor | None:
        ids = self.runner.prompt_argmax  # [B, W] indices of the draft's logits, from its prefill
        if ids is None:
            return None
        return (ids if self.token_ids is None else self.token_ids[ids]).to(ctx.columns.tokens.device)

    def greedy(self, logits: torch.Tensor) -> torch.Tensor:
        """The draft's greedy tokens int64 ``[...]`` (target ids) from its logits ``[..., V_draft]``: the argmax of
        :meth:`fit`, without building it (on a tie, the same token where ``draft_vocab_ids`` is sorted, as the
        bundled drafts' are; else the first tied entry of the reduced head)."""
        ids = logits[..., : self.vocab_size].argmax(dim=-1)  # entries past the target's V never win
        return ids if self.token_ids is None else self.token_ids[ids]

    def fit(self, logits: torch.Tensor) -> torch.Tensor:
        """Draft logits on the target's vocabulary, ``[..., V]``; tokens the draft cannot propose get ``-inf``.

        ``logits`` ``[..., V_draft]`` with entry ``i`` for token ``i`` (extra entries dropped, missing ones
        ``-inf``), or ``[..., S]`` with entry ``i`` for token ``token_ids[i]`` (a reduced draft head).
        """
        if self.token_ids is not None:
            full = logits.new_full((*logits.shape[:-1], self.vocab_size), float("-inf"))  # [..., V]
            return full.scatter_(-1, self.token_ids.expand(*logits.shape[:-1], -1), logits)
        extra = logits.shape[-1] - self.vocab_size
        if extra >= 0:
            return logits[..., : self.vocab_size]
        return torch.nn.functional.pad(logits, (0, -extra), value=float("-inf"))


class PromptLookup(DraftSource):
    """Model-free drafts by n-gram lookup in the row's own tokens (prompt lookup decoding, Saxena 2023; the
    idea of transformers' ``prompt_lookup_num_tokens``), on the device for every row at once.

    The row's last ``n`` tokens are searched for in its earlier tokens, longest ``n`` first (``max_ngram`` down to
    ``min_ngram``); the tokens that followed the latest match are proposed, continued periodically when the match
    is close to the end. Where no row has a match, the step drafts nothing (a plain step, as transformers' prompt
    lookup does) when the backend allows it (:attr:`DraftContext.fewer_drafts`); otherwise a row without a match
    repeats its last token (on SmolLM2's CPU demo prompts, 35-45 of 67-100 lookup steps had no match and accepted
    0.00-0.03 tokens a step). The proposal is deterministic, so ``q`` is one-hot and speculative sampling accepts a
    draft with probability ``p(draft)``: exact at any temperature.
    Pass an instance in ``assistant_models``; strong on code and on outputs that repeat the prompt. Beside draft
    models, at batch > 1, it also gives one mixed arm per model (:class:`LookupOrDraft`): lookup where a row's match
    is long enough, the model elsewhere.

    Args:
        max_ngram, min_ngram: lengths of the searched suffix, ``1 <= min_ngram <= max_ngram``.
        mix_min_match: the shortest match (tokens; at most ``max_ngram``) for which a mixed arm takes the lookup's
            drafts; None: no mixed arms.

    Raises:
        ValueError: invalid n-gram or match lengths.
    """

    name = "prompt_lookup"

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1, mix_min_match: int | None = 2):
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"PromptLookup needs 1 <= min_ngram <= max_ngram, got {min_ngram} and {max_ngram}")
        if mix_min_match is not None and mix_min_match < 1:
            raise ValueError(f"PromptLookup needs mix_min_match >= 1 (or None), got {mix_min_match}")
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        self.mix_min_match = None if mix_min_match is None else min(mix_min_match, max_ngram)

    def propose(self, ctx: DraftContext, gamma: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        seq = ctx.sequences
        drafts, matched = self.lookup(seq.buffer, seq.prompt_end + seq.num_new, gamma)  # [B, γ], [B]
        if ctx.fewer_drafts and not matched.any():  # reads one flag on the host (the dynamic backend waits anyway)
            drafts = drafts[:, :0]  # [B, 0]: a plain step
        ctx.columns.write_drafts(drafts)
        return drafts, one_hot_scores(drafts, ctx.vocab_size) if ctx.do_sample else None

    def predict(self, ctx: DraftContext, num_new_before: torch.Tensor, width: int) -> torch.Tensor:
        ends = ctx.sequences.prompt_end + num_new_before  # [B]
        offsets = torch.arange(width, device=ends.device)  # [width]
        return self._next_tokens(ctx.sequences.buffer, ends.unsqueeze(1) + offsets)[0]  # [B, width]

    def prompt_guesses(self, ctx: DraftContext, window: range) -> torch.Tensor | None:
        return self.prompt_lookups(ctx, window)[0]

    def prompt_lookups(self, ctx: DraftContext, window: range) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`prompt_guesses` int64 ``[B, W]`` and the length of each guess's match int64 ``[B, W]``."""
        prompt = ctx.columns.tokens[:, : window.stop + 1]  # [B, c]: lookups never read past the guessed column
        ends = torch.arange(window.start + 1, window.stop + 1, device=prompt.device)  # [W] guessed columns
        return self._next_tokens(prompt, ends.expand(prompt.shape[0], -1))  # [B, W] each

    def _next_tokens(self, buffer: torch.Tensor, ends: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """int64 ``[B, k]``: the one-token proposal after ``buffer[b, :ends[b, j]]`` for every ``j``, and its match
        length, in one lookup over ``B·k`` rows (``buffer`` int64 ``[B, C]``, ``ends`` int64 ``[B, k]``)."""
        rows = buffer.repeat_interleave(ends.shape[1], dim=0)  # [B·k, C]
        tokens, matched = self.lookup(rows, ends.reshape(-1), 1)  # [B·k, 1], [B·k]
        return tokens.view(ends.shape), matched.view(ends.shape)  # [B, k] each

    def lookup(self, buffer: torch.Tensor, ends: torch.Tensor, gamma: int) -> tuple[torch.Tensor, torch.Tensor]:
        """int64 ``[B, γ]`` proposals after ``buffer[b, :ends[b]]`` (``buffer`` int64 ``[B, C]``, ``ends`` ``[B]``)
        and int64 ``[B]`` the length of each row's matched n-gram (0: no match, the last token repeated).

        Every n-gram length at once, in about 30 small kernels whatever ``max_ngram`` (a loop over the lengths took
        about 20 per length): for each column ``e`` of the row, how many of the tokens before it equal the row's last
        tokens (its matched suffix, up to ``max_ngram``); the longest match of at least ``min_ngram`` tokens that
        ends before the row's end wins, the latest among equals, and the tokens from ``e`` on are proposed."""
        size, width = buffer.shape[1], self.max_ngram
        outside = torch.iinfo(torch.long).min  # no token id: before column 0, and (+1) before the row's start
        offsets = torch.arange(1, width + 1, device=buffer.device)  # [N]: k = 1 … N tokens back
        back = ends.unsqueeze(1) - offsets  # [B, N] where the row's k-th last token is
        last = torch.where(back >= 0, buffer.gather(1, back.clamp(min=0)), outside + 1)  # [B, N]
        padded = torch.nn.functional.pad(buffer, (width, 0), value=outside)  # [B, N + C]
        before = padded.unfold(1, width, 1)[:, :size].flip(-1)  # [B, C, N]: [b, e, k - 1] = buffer[b, e - k]
        hits = (before == last.unsqueeze(1)).cumprod(dim=-1, dtype=torch.uint8)  # [B, C, N] leading agreement
        suffix = hits.sum(dim=-1, dtype=torch.long)  # [B, C] matched suffix before column e
        columns = torch.arange(size, device=buffer.device)  # [C]
        usable = (suffix >= self.min_ngram) & (columns < ends.unsqueeze(1))  # [B, C]: a match with a token after it
        best = torch.where(usable, suffix * size + columns, -1).amax(dim=1)  # [B] longest, then latest
        found = best >= 0
        matched = torch.where(found, best // size, 0)  # [B]
        follow = torch.where(found, best % size, ends - 1)  # [B] fallback: the last token, repeated (period 1)
        period = ends - follow  # [B] >= 1
        steps = torch.arange(gamma, device=buffer.device)  # [γ]
        return buffer.gather(1, follow.unsqueeze(1) + steps % period.unsqueeze(1)), matched  # [B, γ], [B]


def one_hot_scores(tokens: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Draft scores ``q`` float32 ``[B, γ, V]`` of a deterministic proposal ``tokens`` int64 ``[B, γ]``: 0 at the
    token, ``-inf`` elsewhere (speculative sampling then accepts the token with probability ``p(token)``)."""
    q = torch.full((*tokens.shape, vocab_size), float("-inf"), device=tokens.device)  # [B, γ, V]
    return q.scatter_(-1, tokens.unsqueeze(-1), 0.0)


class LookupOrDraft(DraftSource):
    """A mixed arm: row by row, prompt lookup's drafts where the row's last ``min_match`` or more tokens occur
    earlier in the row, a draft model's elsewhere (this project's own arm, for batches; see below).

    In a batch the slowest row sets the number of steps; lookup is strong on rows that copy (code, quoted text)
    and useless on the others, where a draft model still accepts (SmolLM2-135M, 32 held-out chat and code
    prompts, 128 tokens, greedy, CPU, ``benchmarks.batch_steps``: the batch took 109 steps with lookup alone, 110
    with the general draft alone, 88 mixed). Exact: which source drafts a row depends on the row's committed tokens
    only, and each row is verified against the scores of the proposal it got (one-hot for lookup's, ``q`` for the
    model's). The lookup runs beside the model's drafting where there is a side stream
    (:attr:`DraftContext.side_stream`), so a mixed step costs about a draft step. The model drafts every row, then
    forgets its own drafts: a static runner is rewound to before the step and, on the steps that keep the others
    current, fed the mixed drafts like any source that did not draft (:meth:`DraftSource.keep_current`, called by
    the step; on the others it reads the columns again at its next catch-up); a dynamic runner keeps the committed
    columns it caught up on and feeds the rest lazily.

    Args:
        lookup: the pool's prompt lookup; model: a draft model's source of the same pool.
    """

    def __init__(self, lookup: PromptLookup, model: ModelDrafts):
        self.prompt_lookup, self.model = lookup, model
        self.min_match = lookup.mix_min_match

    def propose(self, ctx: DraftContext, gamma: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        runner = self.model.runner
        # where the model's own drafts start to be forgotten: a static runner's offsets [B] (its next forward reads
        # the committed columns again); a dynamic runner's committed length (host int), after its catch-up
        keep = runner.seen.clone() if isinstance(runner.seen, torch.Tensor) else ctx.columns.host_length
        seq, found = ctx.sequences, []  # lookup reads the rows' tokens only, which the model's drafting leaves alone
        join = fork(ctx.side_stream, lambda: found.append(
            self.prompt_lookup.lookup(seq.buffer, seq.prompt_end + seq.num_new, gamma)))  # [B, γ], [B]
        drafts, q = self.model.propose(ctx, gamma)  # [B, γ], [B, γ, V] | None
        join()
        guesses, matched = found[0]
        use = (matched >= self.min_match).unsqueeze(1)  # [B, 1] rows that take lookup's drafts
        drafts = torch.where(use, guesses, drafts)  # [B, γ]
        ctx.columns.write_drafts(drafts, ctx.columns.draft_index(gamma))  # the model's propose opened the columns
        runner.rewind(keep)
        if q is not None:  # lookup's rows get one-hot scores (in place: no second [B, γ, V] tensor)
            at_guess = q.gather(-1, guesses.unsqueeze(-1))  # [B, γ, 1] the model's score of lookup's token
            q.masked_fill_(use.unsqueeze(-1), float("-inf"))
            q.scatter_(-1, guesses.unsqueeze(-1), torch.where(use.unsqueeze(-1), 0.0, at_guess))
        return drafts, q

    def predict(self, ctx: DraftContext, num_new_before: torch.Tensor, width: int) -> torch.Tensor:
        """Raises NotImplementedError: mixed arms are not offered to full-information selectors (scoring them would
        feed the draft model a second time)."""
        raise NotImplementedError("mixed arms are not offered to full-information selectors (they would feed the "
                                  "draft model a second time)")

    def prompt_guesses(self, ctx: DraftContext, window: range) -> torch.Tensor | None:
        guesses = self.model.prompt_guesses(ctx, window)  # [B, W] | None
        if guesses is None:
            return None
        lookups, matched = self.prompt_lookup.prompt_lookups(ctx, window)  # [B, W] each
        return torch.where(matched >= self.min_match, lookups, guesses)


class PlainDecoding(DraftSource):
    """No draft: the plain-decoding arm (γ = 0), one target token per step. Cost-aware selectors are offered it, so
    a call never has to be slower than plain decoding when drafts stop paying (large batches, text the drafts never
    saw)."""

    name = "plain"

    def propose(self, ctx: DraftContext, gamma: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        drafts = ctx.columns.tokens[:, :0]  # [B, 0]
        return drafts, drafts.new_zeros(*drafts.shape, ctx.vocab_size, dtype=torch.float32) if ctx.do_sample else None

    def predict(self, ctx: DraftContext, num_new_before: torch.Tensor, width: int) -> torch.Tensor:
        return torch.full_like(ctx.columns.tokens[:, :width], -1)  # [B, width], matches no token


def draw(q: torch.Tensor, do_sample: bool) -> torch.Tensor:
    """One token int64 ``[B, 1]`` from draft scores ``q`` ``[B, V]``: sampled, or the argmax.

    On the CPU, where reading a count costs no synchronisation, a draw after warpers that left few finite scores
    (top-k, top-p, min-p) is made among those alone: the same distribution, without ``multinomial``'s random number
    for every vocabulary entry (SmolLM2, top-k 50: 0.5 instead of 1.5 ms a draft token on this project's CPU).
    """
    if not do_sample:
        return q.argmax(dim=-1, keepdim=True)
    if q.device.type == "cpu":
        candidates = int(torch.isfinite(q).sum(dim=-1).max())  # the most finite scores of any row
        if candidates * 16 <= q.shape[-1]:
            scores, ids = q.topk(candidates, dim=-1)  # [B, k]; a row with fewer keeps -inf (probability 0)
            return ids.gather(-1, torch.multinomial(scores.softmax(dim=-1), num_samples=1))
    return torch.multinomial(q.softmax(dim=-1), num_samples=1)


PROMPT_WINDOW = 32
"""Prompt columns per row on which :func:`prompt_agreement` scores the sources (fewer when the prompt is shorter)."""

PROMPT_POSITIONS = 256
"""Most prompt positions (rows × columns) scored per call: the prefill keeps ``[B, W, V]`` logits for them."""


def prompt_window(columns: Columns) -> range | None:
    """The prompt columns whose next tokens every source guesses for the selector's prior: the last ``W`` before
    column ``T₀ - 2`` (the static backend prefills draft models up to two columns behind the committed prompt of
    ``T₀`` columns, so every model has fed them after its prefill); ``W = min(PROMPT_WINDOW, PROMPT_POSITIONS // B)``, or
    None when the prompt is too short or the batch larger than :data:`PROMPT_POSITIONS` rows."""
    stop = columns.start_length - 2
    width = min(PROMPT_WINDOW, PROMPT_POSITIONS // columns.tokens.shape[0], stop)
    return range(stop - width, stop) if width > 0 else None


def prompt_agreement(
    target: Runner, sources: list[DraftSource], arms: list[tuple[int, int]], ctx: DraftContext, window: range
) -> tuple[list[float], list[float]]:
    """Per arm, how often its source's greedy guess of a prompt token equals the target's greedy token there, read
    from the prefills' logits (the target's, each draft model's); one device-to-host copy per call. The static
    backend prefills every draft model anyway; the dynamic one prefills a draft when it is first picked, so there
    the prior costs a draft prefill for each draft the call would never have picked.

    The prompt is text the target conditions on, not text it generated, yet each source's agreement with the target
    there tracks its acceptance in the answer: measured on the CPU on 2026-12-02 on the built-in prompts
    (:func:`~flashspec_hf.data.builtin_prompts`; SmolLM2-135M, its three bundled drafts, last 32 prompt columns), it
    was 0.68 / 0.22 / 0.64 on chat and 0.13 / 0.62 / 0.56 on code against α of 0.66 / 0.20 / 0.59 and 0.11 / 0.62
    / 0.54 in generation (``model_cards/smollm2-135m-pool.md``); prompt lookup's is lower than in generation (0.25 /
    0.38 against 0.42 / 0.61, α then counting a step without a match as a rejection), where answers copy the
    prompt.

    Args:
        target: the target's runner, prefilled with ``window`` (its ``prompt_argmax`` int64 ``[B, W]``).
        sources, arms: the call's draft sources and ``(source, γ)`` arms; window: :func:`prompt_window`'s columns.

    Returns:
        ``(successes, trials)`` per arm: agreeing and scored positions over the batch's real prompt columns (0 and
        0 for an arm whose source has no guesses: the plain arm, an early exit).
    """
    truth = target.prompt_argmax.to(ctx.columns.tokens.device)  # [B, W]
    scored = ctx.columns.valid[:, window.start : window.stop]  # [B, W] real columns (left padding: so is the next)
    counts = {}  # source -> int64 [2] (successes, trials)
    for s, source in enumerate(sources):
        guesses = source.prompt_guesses(ctx, window)  # [B, W] | None
        if guesses is not None:
            counts[s] = torch.stack([((guesses == truth) & scored).sum(), scored.sum()])
    host = dict(zip(counts, torch.stack(list(counts.values())).tolist(), strict=True)) if counts else {}
    return [host.get(s, (0, 0))[0] for s, _ in arms], [host.get(s, (0, 0))[1] for s, _ in arms]
