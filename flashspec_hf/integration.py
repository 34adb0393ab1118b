"""Integration with ``generate``: the ``flashspec=True`` flag, the request's checks, HF's assisted-generation
arguments turned into draft sources, and the ``custom_generate`` callable.

``import flashspec_hf`` wraps ``GenerationMixin.generate`` once. Without ``flashspec=True`` every call goes to the
original, untouched. With it, every option of the call is checked against :mod:`flashspec_hf.options` (honoured,
no effect, or refused with an error that names it), then ``generate`` still does its own preparation (generation
config, special tokens, attention mask, logits processors, stopping criteria, length limits) and calls
:class:`FlashSpecDecoding` through its official ``custom_generate`` hook. The hook drops ``tokenizer``,
``assistant_tokenizer`` and ``assistant_model``, so what needs them (stop strings, the draft sources and their
tokenizer check) is settled here first, from the call's keywords, a passed ``generation_config`` and the model's
own, in generate's order. Models that override ``generate`` themselves (Whisper, Bark, MusicGen) do not see the
flag.
"""

from __future__ import annotations

import copy
import functools
import inspect

from transformers import PreTrainedModel, PreTrainedTokenizerBase
from transformers.generation.stopping_criteria import StopStringCriteria, StoppingCriteriaList
from transformers.generation.utils import GenerationMixin

from .decoding import speculative_decode
from .drafts import DraftSource, PromptLookup
from .models import early_exit_assistants
from .options import refuse_unsupported
from .selection import Selector

DEFAULT_NUM_ASSISTANT_TOKENS = 4
"""γ when neither ``num_assistant_tokens`` nor ``prompt_lookup_num_tokens`` sets it (transformers' default, 20, is
tuned for its adaptive schedule, not for a fixed γ)."""

_VOCAB_PADDING_TOLERANCE = 1024  # vocabularies this close are the same tokenizer padded differently
_HIDDEN_FROM_GENERATE = ("stop_strings", "prompt_lookup_num_tokens", "assistant_early_exit", "cache_implementation")
# fields flashspec acts on itself: generate would need the tokenizer it drops (stop strings), switch to its
# assisted-generation checks (prompt lookup, early exit) or allocate a cache that flashspec does not use

_original_generate = GenerationMixin.generate
_GENERATE_SIGNATURE = inspect.signature(_original_generate)


class FlashSpecDecoding:
    """The callable handed to ``generate(custom_generate=...)``: runs :func:`~flashspec_hf.decoding.speculative_decode`.

    Args:
        assistants: validated draft models and other draft sources (:class:`~flashspec_hf.drafts.PromptLookup`).
        selector: a :class:`~flashspec_hf.selection.Selector` or a name (``"thompson"``, ``"ucb1"``, …).
        num_assistant_tokens: ``γ``, or a list of them (arms pair every source with every γ).
        streamer: the call's streamer (generate's hook drops it, so it travels here).
        static: True for ``cache_implementation="static"`` (the static backend, :mod:`flashspec_hf.backends`),
            False for ``"dynamic"``, None to let flashspec choose (static on CUDA when supported).
    """

    def __init__(self, assistants: list, selector, num_assistant_tokens: int | list[int], streamer=None, static=None):
        self.assistants = assistants
        self.selector = selector
        self.num_assistant_tokens = num_assistant_tokens
        self.streamer = streamer
        self.static = static

    def __call__(self, model, input_ids, logits_processor, stopping_criteria, generation_config, **model_kwargs):
        if self.streamer is not None and input_ids.shape[0] > 1:
            raise ValueError("a streamer takes one sequence: stream with batch size 1 (flashspec or not)")
        return speculative_decode(
            model,
            input_ids,
            logits_processor,
            stopping_criteria,
            generation_config,
            self.assistants,
            self.selector,
            self.num_assistant_tokens,
            attention_mask=model_kwargs.get("attention_mask"),
            streamer=self.streamer,
            static=self.static,
        )


@functools.wraps(_original_generate)
def generate(self, *args, flashspec: bool = False, assistant_models=None, selector: str | Selector | None = None, **kwargs):
    """``GenerationMixin.generate`` plus ``flashspec=True``, ``assistant_models=[...]`` and ``selector=...``.

    ``assistant_models`` may mix models and :class:`~flashspec_hf.drafts.DraftSource` s such as
    :class:`~flashspec_hf.drafts.PromptLookup`; HF's own ``assistant_model``, ``prompt_lookup_num_tokens`` (with
    ``max_matching_ngram_size``) and ``assistant_early_exit`` add their draft source. ``num_assistant_tokens`` may be a
    list of γ values (every source is paired with every γ, and the selector picks among the pairs). What every other
    ``GenerationConfig`` field and ``generate`` input does is in :mod:`flashspec_hf.options` (the README's table).
    Assistants may sit on other devices than the target, and the target may be spread by accelerate
    (``device_map``): tokens and logits move where they must. On CUDA, flashspec runs its static backend
    (:class:`~flashspec_hf.backends.StaticBackend`: static caches, no per-step sync, CUDA graphs when the model sits
    on one GPU) whenever the call needs nothing it lacks; ``cache_implementation="static"`` insists on it,
    ``"dynamic"`` declines it.

    Raises:
        ValueError: ``assistant_models`` or ``selector`` without ``flashspec=True``; with it: no draft source, a
            draft model with another tokenizer (vocabulary sizes, or the tokens of ``tokenizer`` and
            ``assistant_tokenizer``), an encoder-decoder model, an invalid γ, ``stop_strings`` without
            ``tokenizer``, a logits processor that may keep state (:mod:`flashspec_hf.processing`), or an option that
            :mod:`flashspec_hf.options` refuses (beam search, …).
        TypeError: ``flashspec`` not a bool; a draft that is neither a causal LM nor a
            :class:`~flashspec_hf.drafts.DraftSource`.
    """
    if flashspec not in (True, False):  # numpy's bool too; not a truthy string
        raise TypeError(f"flashspec takes True or False, got {flashspec!r}")
    if not flashspec:
        given = [k for k, v in (("assistant_models", assistant_models), ("selector", selector)) if v is not None]
        if given:
            raise ValueError(f"{' and '.join(given)} need flashspec=True: add it, or drop {', '.join(given)}")
        return _original_generate(self, *args, **kwargs)
    call = _arguments(self, args, kwargs)
    refuse_unsupported(functools.partial(_setting, self, call), call)
    if self.config.is_encoder_decoder:
        raise ValueError("flashspec supports decoder-only targets; this model is an encoder-decoder")
    tokenizer = call.pop("tokenizer", None)
    same_tokens = _same_tokenizer(tokenizer, call.pop("assistant_tokenizer", None))
    assistants = _draft_sources(self, call, assistant_models, same_tokens)
    gamma = _num_assistant_tokens(self, call)
    _move_stop_strings(self, call, tokenizer)
    static = _static_cache(_setting(self, call, "cache_implementation"))
    _hide_from_generate(self, call)
    decoding = FlashSpecDecoding(assistants, selector, gamma, call.get("streamer"), static)
    return _original_generate(self, custom_generate=decoding, **call)


def install() -> None:
    """Wrap ``GenerationMixin.generate`` (idempotent; done by ``import flashspec_hf``)."""
    GenerationMixin.generate = generate


def _arguments(model: PreTrainedModel, args: tuple, kwargs: dict) -> dict:
    """Every argument of a ``generate`` call by name, positional ones included."""
    bound = _GENERATE_SIGNATURE.bind_partial(model, *args, **kwargs).arguments
    bound.pop("self")
    extra = bound.pop("kwargs", {})
    return {**bound, **extra}


def _setting(model: PreTrainedModel, call: dict, name: str):
    """A ``GenerationConfig`` field as generate resolves it, before transformers' own defaults: the call's keyword,
    else a passed ``generation_config``'s value, else the model's ``generation_config``'s; None when none sets it."""
    if name in call:
        return call[name]
    for config in (call.get("generation_config"), model.generation_config):
        value = getattr(config, name, None)
        if value is not None:
            return value
    return None


def _draft_sources(target: PreTrainedModel, call: dict, assistant_models, same_tokens: bool) -> list:
    """``assistant_models``, then the draft sources HF's own arguments ask for: ``assistant_model``, the target's
    first layers (``assistant_early_exit``) and prompt lookup (``prompt_lookup_num_tokens``). Draft models are
    checked with :func:`_check_draft` (``same_tokens``: their tokenizer was compared with the target's).

    Raises:
        ValueError: no draft source; a draft model that is an encoder-decoder or has another tokenizer.
        TypeError: a draft that is neither a causal LM nor a :class:`~flashspec_hf.drafts.DraftSource`.
    """
    if isinstance(assistant_models, (PreTrainedModel, DraftSource)):
        assistant_models = [assistant_models]
    named = [(f"assistant_models[{i}]", a) for i, a in enumerate(assistant_models or [])]
    if (assistant := call.pop("assistant_model", None)) is not None:
        named.append(("assistant_model", assistant))
    for name, draft in named:
        _check_draft(target, draft, name, same_tokens)
    sources = [draft for _, draft in named]
    if (depth := _setting(target, call, "assistant_early_exit")) is not None:
        sources.append(_early_exit_draft(target, depth))
    if _setting(target, call, "prompt_lookup_num_tokens") is not None:
        max_ngram = _setting(target, call, "max_matching_ngram_size") or 2  # stock's default
        if not isinstance(max_ngram, int) or max_ngram < 1:
            raise ValueError(f"max_matching_ngram_size must be an integer >= 1, got {max_ngram!r}")
        sources.append(PromptLookup(max_ngram=max_ngram))
    if not sources:
        if assistant_models is not None:
            raise ValueError("assistant_models is empty: pass at least one draft model or flashspec_hf.PromptLookup()")
        raise ValueError(
            "flashspec=True needs draft models: pass assistant_models=[draft_1, ...] (a model-free source: "
            "flashspec_hf.PromptLookup(); or HF's assistant_model=, prompt_lookup_num_tokens= or assistant_early_exit=)"
        )
    return sources


def _same_tokenizer(tokenizer: PreTrainedTokenizerBase | None, assistant_tokenizer: PreTrainedTokenizerBase | None):
    """True when ``tokenizer`` (the target's) and ``assistant_tokenizer`` (the draft models') are both given and every
    id both define stands for the same token; False when ``assistant_tokenizer`` is not given (vocabulary sizes
    then decide).

    Raises:
        ValueError: ``assistant_tokenizer`` without ``tokenizer``, or tokenizers that give an id different tokens.
    """
    if assistant_tokenizer is None:
        return False
    if tokenizer is None:
        raise ValueError("assistant_tokenizer is compared with the target's tokenizer: pass tokenizer=... too")
    tokens = {i: token for token, i in tokenizer.get_vocab().items()}
    vocab = assistant_tokenizer.get_vocab()
    differ = [(i, tokens[i], token) for token, i in vocab.items() if tokens.get(i, token) != token]
    if differ:
        i, mine, theirs = min(differ)
        raise ValueError(
            f"tokenizer and assistant_tokenizer differ ({len(differ)} ids, e.g. id {i} is {mine!r} for the target and "
            f"{theirs!r} for the drafts): flashspec needs drafts with the target's tokenizer (stock's universal "
            "assisted decoding, without flashspec=True, handles different tokenizers)"
        )
    return True


def _check_draft(target: PreTrainedModel, draft, name: str, same_tokens: bool) -> None:
    """Check that ``draft`` can draft for ``target``: a :class:`~flashspec_hf.drafts.DraftSource`, or a decoder-only
    causal LM with the target's tokenizer: the same tokens (``same_tokens``), else vocabulary sizes at most
    :data:`_VOCAB_PADDING_TOLERANCE` apart. Special tokens and other generation settings may differ (an instruct
    target with a base draft): only the target's are used.

    Raises:
        TypeError: not a causal LM (a base model, a masked LM, …). ValueError: an encoder-decoder model, or a
            vocabulary of another size.
    """
    if isinstance(draft, DraftSource):
        return
    if not isinstance(draft, PreTrainedModel) or not draft.can_generate() or draft.get_output_embeddings() is None:
        raise TypeError(
            f"{name} must be a transformers causal LM (a …ForCausalLM model, whose can_generate() is True) or a "
            f"flashspec_hf.DraftSource such as flashspec_hf.PromptLookup(); got a {type(draft).__name__}"
        )
    if draft.config.is_encoder_decoder:
        raise ValueError(f"{name} is an encoder-decoder model; drafts must be decoder-only")
    target_vocab = target.config.get_text_config().vocab_size
    draft_vocab = draft.config.get_text_config().vocab_size
    if not same_tokens and abs(draft_vocab - target_vocab) > _VOCAB_PADDING_TOLERANCE:
        raise ValueError(
            f"{name} has a vocabulary of {draft_vocab} tokens, the target {target_vocab}: they do not share a "
            "tokenizer. flashspec needs drafts with the target's tokenizer (padded vocabularies are fine; pass "
            "tokenizer= and assistant_tokenizer= to compare tokens rather than sizes). For a draft with another "
            "tokenizer, drop flashspec=True and use transformers' universal assisted decoding (assistant_model=, "
            "tokenizer=, assistant_tokenizer=)"
        )


def _early_exit_draft(target: PreTrainedModel, depth: int) -> PreTrainedModel:
    """HF's ``assistant_early_exit``: the target's first ``depth`` layers as a draft model, kept on the target (so
    static runners and CUDA graphs are reused across calls).

    Raises:
        TypeError: a target without the Llama module layout. ValueError: a depth out of range.
    """
    drafts = target.__dict__.setdefault("_flashspec_early_exit", {})
    if depth not in drafts:
        try:
            (drafts[depth],) = early_exit_assistants(target, (depth,))
        except (TypeError, ValueError) as error:
            raise type(error)(f"assistant_early_exit={depth!r}: {error}") from error
    return drafts[depth]


def _num_assistant_tokens(model: PreTrainedModel, call: dict) -> int | list[int]:
    """γ: ``num_assistant_tokens`` (an int or a list of them) as the call sets it, else ``prompt_lookup_num_tokens``,
    else :data:`DEFAULT_NUM_ASSISTANT_TOKENS`.

    Raises:
        ValueError: an invalid γ, or a ``prompt_lookup_num_tokens`` other than the γ that ``num_assistant_tokens``
            sets.
    """
    gamma = _setting(model, call, "num_assistant_tokens")
    lookup = _setting(model, call, "prompt_lookup_num_tokens")
    if lookup is not None and not _is_gamma(lookup):
        raise ValueError(f"prompt_lookup_num_tokens must be an integer >= 1, got {lookup!r}")
    gamma = next(g for g in (gamma, lookup, DEFAULT_NUM_ASSISTANT_TOKENS) if g is not None)
    values = list(gamma) if isinstance(gamma, (list, tuple)) else [gamma]
    if not values or not all(map(_is_gamma, values)):
        raise ValueError(f"num_assistant_tokens (γ) must be an integer >= 1 or a list of them, got {gamma!r}")
    if len(set(values)) < len(values):
        raise ValueError(f"num_assistant_tokens lists a γ twice: {gamma!r}; give each value once")
    if lookup is not None and lookup not in values:
        raise ValueError(
            f"prompt_lookup_num_tokens={lookup} and num_assistant_tokens={gamma!r} ask for different γ; flashspec "
            f"pairs every draft source with every γ: drop one, or list both (num_assistant_tokens={[*values, lookup]})"
        )
    return gamma if isinstance(gamma, int) else values


def _is_gamma(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _move_stop_strings(model: PreTrainedModel, call: dict, tokenizer: PreTrainedTokenizerBase | None) -> None:
    """The ``stop_strings`` the call sets (keyword, passed or model's config) -> a ``StopStringCriteria`` appended to
    a copy of ``call["stopping_criteria"]``: generate's own would need the tokenizer, which its callable hook drops.

    Raises:
        ValueError: stop strings without ``tokenizer``.
    """
    stop_strings = _setting(model, call, "stop_strings")
    if stop_strings is None:
        return
    if tokenizer is None:
        raise ValueError("stop_strings needs the tokenizer: pass tokenizer=... to generate")
    criteria = StopStringCriteria(tokenizer, stop_strings)
    call["stopping_criteria"] = StoppingCriteriaList([*(call.get("stopping_criteria") or []), criteria])


def _static_cache(implementation: str | None) -> bool | None:
    """True for ``cache_implementation="static"``, False for ``"dynamic"``, None (not given, or ``"hybrid"``, which
    transformers treats as not given) to let flashspec choose; flashspec builds its own caches either way."""
    return None if implementation in (None, "hybrid") else implementation == "static"


def _hide_from_generate(model: PreTrainedModel, call: dict) -> None:
    """Unset the fields of ``_HIDDEN_FROM_GENERATE`` for generate: in a copy of a passed ``generation_config``, and as
    keywords where the call gave them or the model's own generation config would fill them back in (a keyword
    beside a passed config makes transformers log a deprecation notice, so only then)."""
    config = call.get("generation_config")
    if config is not None:
        config = call["generation_config"] = copy.deepcopy(config)
    for name in _HIDDEN_FROM_GENERATE:
        if config is not None:
            setattr(config, name, None)
        if name in call or getattr(model.generation_config, name, None) is not None:
            call[name] = None


__all__ = ["DEFAULT_NUM_ASSISTANT_TOKENS", "FlashSpecDecoding", "generate", "install"]
