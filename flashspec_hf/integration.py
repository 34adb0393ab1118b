"""Integration with ``generate``: the ``flashspec=True`` flag, argument checks, and the ``custom_generate`` callable.

``import flashspec_hf`` wraps ``GenerationMixin.generate`` once. Without ``flashspec=True`` every call goes to the
original, untouched. With it, ``generate`` still does all of its own preparation (generation config, special
tokens, attention mask, logits processors, stopping criteria, length limits) and then calls
:class:`FlashSpecDecoding` through its official ``custom_generate`` hook. Models that override ``generate``
themselves (Whisper, Bark, MusicGen) do not see the flag.
"""

from __future__ import annotations

import functools

from transformers import GenerationConfig, PreTrainedModel, PreTrainedTokenizerBase
from transformers.generation.stopping_criteria import StopStringCriteria, StoppingCriteriaList
from transformers.generation.utils import GenerationMixin

from .decoding import speculative_decode
from .drafts import DraftSource
from .selection import Selector

DEFAULT_NUM_ASSISTANT_TOKENS = 4
"""γ when neither ``num_assistant_tokens`` nor a ``generation_config`` sets it (transformers' default, 20, is
tuned for its adaptive schedule, not for a fixed γ)."""

_VOCAB_PADDING_TOLERANCE = 1024  # vocabularies this close are the same tokenizer padded differently
_UNSUPPORTED_KWARGS = {
    "past_key_values": "a pre-filled cache",
    "cache": "a pre-filled cache",
    "output_attentions": "output_attentions",
    "output_hidden_states": "output_hidden_states",
}

_original_generate = GenerationMixin.generate


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
        if generation_config.num_beams > 1:
            raise ValueError("flashspec does not support beam search: set num_beams=1 (or drop flashspec=True)")
        if self.streamer is not None and input_ids.shape[0] > 1:
            raise ValueError("a streamer takes one sequence: stream with batch size 1 (flashspec or not)")
        if model_kwargs.get("synced_gpus"):
            raise ValueError("flashspec does not support synced_gpus (DeepSpeed ZeRO-3 / FSDP generation)")
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

    ``assistant_models`` may mix models and :class:`~flashspec_hf.drafts.PromptLookup`; ``num_assistant_tokens``
    may be a list of γ values (every source is paired with every γ, and the selector picks among the pairs).
    Assistants may sit on other devices than the target, and the target may be spread by accelerate
    (``device_map``): tokens and logits move where they must. On CUDA, flashspec runs its static backend
    (:class:`~flashspec_hf.backends.StaticBackend`: static caches, no per-step sync, CUDA graphs when the model sits
    on one GPU) whenever the call needs nothing it lacks; ``cache_implementation="static"`` insists on it,
    ``"dynamic"`` declines it.

    Raises:
        ValueError: ``assistant_models`` or ``selector`` without ``flashspec=True``; ``flashspec=True`` without
            assistants, an empty list, an assistant with another tokenizer (vocabulary sizes, or the tokens of
            ``tokenizer`` and ``assistant_tokenizer``), an encoder-decoder model, beam search, an invalid γ, or an
            unsupported option.
        TypeError: an assistant that is not a transformers causal LM (a masked LM, a base model, …).
    """
    if not flashspec:
        given = [k for k, v in (("assistant_models", assistant_models), ("selector", selector)) if v is not None]
        if given:
            raise ValueError(f"{' and '.join(given)} need flashspec=True: add it, or drop {', '.join(given)}")
        return _original_generate(self, *args, **kwargs)
    assistants = _collect_assistants(assistant_models, kwargs.pop("assistant_model", None))
    _check_request(self, assistants, kwargs)
    gamma = _num_assistant_tokens(args, kwargs)
    _move_stop_strings(kwargs)
    static = _static_cache(kwargs)
    decoding = FlashSpecDecoding(assistants, selector, gamma, kwargs.get("streamer"), static)
    return _original_generate(self, *args, custom_generate=decoding, **kwargs)


def install() -> None:
    """Wrap ``GenerationMixin.generate`` (idempotent; done by ``import flashspec_hf``)."""
    GenerationMixin.generate = generate


def _collect_assistants(assistant_models, assistant_model) -> list:
    if assistant_models is None and assistant_model is None:
        raise ValueError("flashspec=True needs draft models: pass assistant_models=[draft_1, ...]")
    if isinstance(assistant_models, (PreTrainedModel, DraftSource)):
        assistant_models = [assistant_models]
    assistants = list(assistant_models or []) + ([assistant_model] if assistant_model is not None else [])
    if not assistants:
        raise ValueError("assistant_models is empty: pass at least one draft model")
    return assistants


def _check_request(target: PreTrainedModel, assistants: list, kwargs: dict) -> None:
    if target.config.is_encoder_decoder:
        raise ValueError("flashspec supports decoder-only targets; this model is an encoder-decoder")
    for key, what in _UNSUPPORTED_KWARGS.items():
        if kwargs.get(key) not in (None, False):
            raise ValueError(f"flashspec does not support {what} ({key}=...); drop it or drop flashspec=True")
    same_tokens = _same_tokenizer(kwargs.get("tokenizer"), kwargs.pop("assistant_tokenizer", None))
    for i, assistant in enumerate(assistants):
        _check_draft(target, assistant, f"assistant_models[{i}]", same_tokens)


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
            "tokenizer= and assistant_tokenizer= to compare tokens rather than sizes)"
        )


def _num_assistant_tokens(args: tuple, kwargs: dict) -> int | list[int]:
    """γ from ``num_assistant_tokens=`` (an int or a list of them), else from a passed ``generation_config`` that
    changed it, else the default."""
    gamma = kwargs.get("num_assistant_tokens")
    config = kwargs.get("generation_config", args[1] if len(args) > 1 else None)
    if gamma is None and isinstance(config, GenerationConfig):
        if config.num_assistant_tokens != GenerationConfig().num_assistant_tokens:
            gamma = config.num_assistant_tokens
    gamma = DEFAULT_NUM_ASSISTANT_TOKENS if gamma is None else gamma
    values = list(gamma) if isinstance(gamma, (list, tuple)) else [gamma]
    if not values or any(not isinstance(g, int) or isinstance(g, bool) or g < 1 for g in values):
        raise ValueError(f"num_assistant_tokens (γ) must be an integer >= 1 or a list of them, got {gamma!r}")
    if len(set(values)) < len(values):
        raise ValueError(f"num_assistant_tokens lists a γ twice: {gamma!r}; give each value once")
    return gamma if isinstance(gamma, int) else values


def _static_cache(kwargs: dict) -> bool | None:
    """Pop ``cache_implementation``: True for ``"static"``, False for ``"dynamic"``, None (not given) to let
    flashspec choose; flashspec builds its own caches either way."""
    implementation = kwargs.pop("cache_implementation", None)
    if implementation not in (None, "dynamic", "static"):
        raise ValueError(
            f"flashspec supports cache_implementation='static' (static caches, CUDA graphs) or the default dynamic "
            f"cache, not {implementation!r}"
        )
    return None if implementation is None else implementation == "static"


def _move_stop_strings(kwargs: dict) -> None:
    """``stop_strings`` + ``tokenizer`` -> a ``StopStringCriteria``: generate's callable hook drops the tokenizer."""
    stop_strings = kwargs.pop("stop_strings", None)
    tokenizer = kwargs.pop("tokenizer", None)
    if stop_strings is None:
        return
    if tokenizer is None:
        raise ValueError("stop_strings needs the tokenizer: pass tokenizer=... to generate")
    criteria = StoppingCriteriaList(kwargs.get("stopping_criteria") or [])
    criteria.append(StopStringCriteria(tokenizer, stop_strings))
    kwargs["stopping_criteria"] = criteria


__all__ = ["DEFAULT_NUM_ASSISTANT_TOKENS", "FlashSpecDecoding", "generate", "install"]
