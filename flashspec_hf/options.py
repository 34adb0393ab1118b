"""What ``generate(..., flashspec=True)`` does with every ``GenerationConfig`` field and every other ``generate``
input: one registry, read at call time (:func:`refuse_unsupported`) and rendered as the README's table
(:func:`render_table`; the tests check that both cover every field of the installed transformers).

Each :class:`Option` row is one of:

- *honoured*: the output is stock ``generate``'s (greedy: token for token; sampling: the same distribution);
- *no effect*: stock ignores it too when decoding greedily or by sampling with a decoder-only model (a beam-search
  or encoder-decoder setting), or it only tunes stock's own caches and compilation, which flashspec replaces with
  its own; the output is stock's;
- *refused*: a value other than unset / transformers' default raises a ValueError naming the option and the fix.

A row that honours some values and refuses others (``cache_implementation``, ``watermarking_config``,
``num_assistant_tokens_schedule``) is honoured and names the refused values.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from transformers import GenerationConfig
from transformers.generation import WatermarkingConfig

HONOURED, NO_EFFECT, REFUSED = "honoured", "no effect", "refused"

MODEL_INPUTS = "**model_kwargs"
"""The row of every ``generate`` keyword that is neither a ``GenerationConfig`` field nor a named input."""

_DEFAULTS = GenerationConfig._get_default_generation_params()  # what generate fills in for unset fields


def _is_default(name: str, value: Any) -> bool:
    """True for an unset option (None, False) or transformers' default value of the field ``name``."""
    return value is None or value is False or (name in _DEFAULTS and value == _DEFAULTS[name])


@dataclass(frozen=True)
class Option:
    """One row: the options it covers, what flashspec does with them, and which values a call may give.

    Attributes:
        names: ``GenerationConfig`` fields or ``generate`` arguments (``MODEL_INPUTS``: any other keyword).
        status: ``HONOURED``, ``NO_EFFECT`` or ``REFUSED``.
        note: what flashspec does; for refused values, why, and the fix (ends the error message).
        accepts: ``(name, value) -> bool``, the values a call may give; None: every value. Refused rows default to
            :func:`_is_default`.
    """

    names: tuple[str, ...]
    status: str
    note: str
    accepts: Callable[[str, Any], bool] | None = None

    def allows(self, name: str, value: Any) -> bool:
        """Whether a call may give ``value`` for ``name``."""
        accepts = self.accepts or (_is_default if self.status == REFUSED else None)
        return accepts is None or accepts(name, value)


GENERATION_CONFIG_OPTIONS: dict[str, tuple[Option, ...]] = {
    "Length and stopping": (
        Option(("max_length", "max_new_tokens"), HONOURED, "a row stops inside a verified block, where stock stops"),
        Option(("min_length", "min_new_tokens"), HONOURED, "per row: the processors see each row's own length"),
        Option(("stop_strings",), HONOURED, "with `tokenizer=`, from the call, a passed `generation_config` or the "
               "model's; checked at every emitted position, so a stop inside a block ends the row there"),
        Option(("max_time",), HONOURED, "checked at every emitted position"),
        Option(("early_stopping", "length_penalty", "diversity_penalty"), NO_EFFECT,
               "beam search only: no effect at `num_beams=1`, as in stock"),
    ),
    "Decoding method": (
        Option(("do_sample",), HONOURED, "greedy: stock's tokens; sampling: stock's distribution"),
        Option(("num_beams", "num_beam_groups", "constraints", "force_words_ids"), REFUSED,
               "beam search and its variants keep several hypotheses per row, flashspec verifies one: set "
               "num_beams=1 (no constraints) or drop flashspec=True"),
        Option(("penalty_alpha", "dola_layers"), REFUSED,
               "contrastive search and DoLa are other decoding methods (moved to the Hub by transformers): drop it "
               "or drop flashspec=True", accepts=lambda name, value: not value),
        Option(("low_memory",), NO_EFFECT, "contrastive search only: no effect without it, as in stock"),
        Option(("use_mtp", "speculation_type"), REFUSED,
               "multi-token-prediction heads and DFlash drafters are other speculative methods: drop it, or drop "
               "flashspec=True and use stock's"),
    ),
    "Cache and compilation": (
        Option(("cache_implementation",), HONOURED,
               "flashspec builds its own caches: cache_implementation='static' insists on its static loop (static "
               "caches, CUDA graphs), 'dynamic' declines it, unset (or 'hybrid', which transformers treats as "
               "unset) lets flashspec choose; any other value (offloaded, quantized, paged … caches) is refused: pass "
               "'static', 'dynamic' or nothing",
               accepts=lambda name, value: value in (None, "dynamic", "static", "hybrid")),  # hybrid: as unset
        Option(("use_cache",), NO_EFFECT, "flashspec always caches (stock without a cache recomputes the prefix "
               "and gives the same tokens)"),
        Option(("compile_config", "disable_compile"), HONOURED,
               "on CUDA the static loop compiles the target's and the draft models' forwards inside its captured steps "
               "with compile_config's settings (its mode aside: flashspec captures the CUDA graphs itself); "
               "disable_compile=True keeps them eager"),
        Option(("cache_config", "max_cache_len", "prefill_chunk_size", "continuous_batching_config"), NO_EFFECT,
               "tune stock's caches, prefill and continuous batching; flashspec sizes its own caches and prefills in "
               "one forward"),
    ),
    "Logits processors and warpers": (
        Option(("temperature", "top_k", "top_p", "min_p", "top_h", "typical_p", "epsilon_cutoff", "eta_cutoff"),
               HONOURED, "applied to target and draft logits; draft tokens are drawn from the warped draft scores, "
               "so sampling stays exact under any warper"),
        Option(("repetition_penalty", "no_repeat_ngram_size", "bad_words_ids",
                "sequence_bias", "suppress_tokens", "begin_suppress_tokens", "exponential_decay_length_penalty",
                "forced_bos_token_id", "forced_eos_token_id", "renormalize_logits", "remove_invalid_values"),
               HONOURED, "applied at every position to the row's own prefix, as stock applies them token by token"),
        Option(("watermarking_config",), HONOURED,
               "`WatermarkingConfig` (or a dict) is honoured; `SynthIDTextWatermarkingConfig` is refused: its "
               "processor keeps state from call to call, which speculative steps would advance for every draft "
               "position; drop it or drop flashspec=True",
               accepts=lambda name, value: value is None or isinstance(value, (dict, WatermarkingConfig))),
        Option(("encoder_repetition_penalty",), REFUSED,
               "its processor keeps every row's prompt and indexes it by batch position, while flashspec calls "
               "processors on subsets of rows: drop it or drop flashspec=True",
               accepts=lambda name, value: value in (None, 1, 1.0)),
        Option(("guidance_scale",), REFUSED,
               "classifier-free guidance runs the model on a negative prompt and keeps that cache from call to "
               "call, which speculative steps would advance for every draft position; drop it or drop "
               "flashspec=True", accepts=lambda name, value: value in (None, 1)),
        Option(("token_healing",), REFUSED,
               "it needs generate's tokenizer, which generate drops for a custom_generate callable such as "
               "flashspec: heal the prompt first (model.heal_tokens(input_ids, tokenizer)) and pass the result"),
    ),
    "Outputs": (
        Option(("return_dict_in_generate", "output_scores", "output_logits"), HONOURED,
               "`sequences`, `scores` and `logits` as stock's (no cache is returned)"),
        Option(("num_return_sequences",), HONOURED, "each prompt repeated, as stock does"),
        Option(("output_attentions", "output_hidden_states"), REFUSED,
               "flashspec's forwards span several positions and models, so per-token attentions and hidden states "
               "are not kept: drop it or drop flashspec=True"),
    ),
    "Special tokens": (
        Option(("pad_token_id", "bos_token_id", "eos_token_id"), HONOURED,
               "the target's; a draft's own special tokens do not matter"),
        Option(("decoder_start_token_id",), NO_EFFECT,
               "encoder-decoder models only: no effect on a decoder-only target, as in stock (flashspec refuses "
               "encoder-decoder targets)"),
        Option(("encoder_no_repeat_ngram_size",), REFUSED,
               "on a decoder-only target stock bans n-grams of each row's prompt with a processor that keeps every "
               "row's prompt and indexes it by batch position, while flashspec calls processors on subsets of rows: "
               "drop it or drop flashspec=True"),
    ),
    "Assisted generation": (
        Option(("num_assistant_tokens",), HONOURED,
               "γ, the draft tokens per step (default 4, not transformers' 20, which is tuned for its adaptive "
               "schedule); a list makes (draft source, γ) arms"),
        Option(("num_assistant_tokens_schedule",), HONOURED,
               "`'constant'` is what flashspec does; `'heuristic'` and `'heuristic_transient'` are refused: give "
               "several γ (num_assistant_tokens=[2, 4, 8]) and the selector picks among them from past steps",
               accepts=lambda name, value: value in (None, "constant")),
        Option(("assistant_confidence_threshold",), REFUSED,
               "stock's draft stops below this confidence, flashspec's drafts γ tokens per arm: give several γ "
               "(num_assistant_tokens=[2, 4, 8]) and the selector picks among them from past steps",
               accepts=lambda name, value: _is_default(name, value) or value == 0),
        Option(("prompt_lookup_num_tokens", "max_matching_ngram_size"), HONOURED,
               "a `PromptLookup(max_ngram=max_matching_ngram_size or 2)` joins the draft sources; "
               "`prompt_lookup_num_tokens` is the call's γ unless `num_assistant_tokens` sets it (then it must be "
               "one of its values)"),
        Option(("assistant_early_exit",), HONOURED,
               "the target's first k layers, with its norm and LM head, join the draft sources "
               "(`flashspec_hf.models.early_exit_assistants`, Llama-style models)"),
        Option(("assistant_lookbehind", "target_lookbehind"), NO_EFFECT,
               "used by stock only for drafts with another tokenizer, which flashspec refuses"),
        Option(("assistant_ensemble_weight",), REFUSED,
               "ensemble verification accepts drafts against a mix of target and draft, so the output is not the "
               "target's distribution; flashspec is exact: drop it"),
        Option(("is_assistant",), REFUSED, "it marks a draft's own generation config, not the target's: drop it"),
    ),
    "Metadata": (
        Option(("transformers_version",), NO_EFFECT, "the version that wrote the config"),
    ),
}

GENERATE_INPUTS: tuple[Option, ...] = (
    Option(("inputs", "input_ids"), HONOURED, "token ids, left-padded"),
    Option(("attention_mask",), HONOURED, "padding mask `[B, L]`"),
    Option(("generation_config",), HONOURED, "every field as in the table above"),
    Option(("logits_processor", "prefix_allowed_tokens_fn"), HONOURED,
           "applied at every position, like generate's own processors"),
    Option(("stopping_criteria",), HONOURED, "called at every emitted position of each row"),
    Option(("streamer",), HONOURED, "batch size 1 (a streamer takes one sequence)"),
    Option(("assistant_model",), HONOURED, "joins `assistant_models`"),
    Option(("tokenizer",), HONOURED, "for `stop_strings`, and to compare tokens with `assistant_tokenizer`"),
    Option(("assistant_tokenizer",), HONOURED,
           "the draft models' tokenizer: it must give its tokens the target tokenizer's ids (another tokenizer is "
           "refused; stock's universal assisted decoding handles that)"),
    Option(("trust_remote_code",), NO_EFFECT, "only used to load a Hub `custom_generate`"),
    Option(("synced_gpus",), REFUSED,
           "flashspec does not keep GPUs in step (DeepSpeed ZeRO-3 / FSDP generation): drop flashspec=True"),
    Option(("negative_prompt_ids", "negative_prompt_attention_mask"), REFUSED,
           "classifier-free guidance inputs (see `guidance_scale`): drop them or drop flashspec=True"),
    Option(("custom_generate",), REFUSED,
           "flashspec is itself generate's custom_generate callable: use one or the other"),
    Option(("inputs_embeds",), REFUSED, "draft sources need token ids: pass input_ids"),
    Option(("position_ids",), REFUSED,
           "flashspec derives positions from the attention mask, as generate does by default: drop position_ids or "
           "drop flashspec=True"),
    Option(("past_key_values", "cache"), REFUSED,
           "a pre-filled cache: flashspec builds its own caches; pass the whole prompt instead"),
    Option((MODEL_INPUTS,), REFUSED,
           "flashspec feeds its models token ids, an attention mask and positions only, so other model inputs "
           "(token_type_ids, pixel_values, …) would be dropped: drop them or drop flashspec=True"),
)

_UNKNOWN_FIELD = Option((), REFUSED, "this transformers has a GenerationConfig field that flashspec_hf does not know "
                        "yet, so it cannot tell whether it would be honoured: drop it or drop flashspec=True")
_FIELD_OPTIONS = {name: o for rows in GENERATION_CONFIG_OPTIONS.values() for o in rows for name in o.names}
_INPUT_OPTIONS = {name: option for option in GENERATE_INPUTS for name in option.names}
_FIELDS = frozenset(name for name in GenerationConfig().to_dict() if not name.startswith("_"))


def refuse_unsupported(setting: Callable[[str], Any], arguments: dict[str, Any]) -> None:
    """Raise for the first refused value of a call.

    Args:
        setting: a ``GenerationConfig`` field's value as the call sets it (None when unset).
        arguments: every ``generate`` argument of the call, by name.

    Raises:
        ValueError: naming the option, why flashspec refuses it, and the fix.
    """
    for name, option in _FIELD_OPTIONS.items():
        _check(option, name, setting(name))
    for name in sorted(_FIELDS - _FIELD_OPTIONS.keys()):
        _check(_UNKNOWN_FIELD, name, setting(name))
    for name, value in arguments.items():
        if name not in _FIELDS:
            _check(_INPUT_OPTIONS.get(name, _INPUT_OPTIONS[MODEL_INPUTS]), name, value)


def _check(option: Option, name: str, value: Any) -> None:
    if not option.allows(name, value):
        shown = f"{name}={value!r}" if isinstance(value, (bool, int, float, str)) else name
        raise ValueError(f"{shown} is not supported with flashspec=True: {option.note}")


def render_table() -> str:
    """The README's table (Markdown): every row of the registry, ``GenerationConfig`` fields by theme, then the
    other ``generate`` inputs."""
    lines = ["| option | with `flashspec=True` | what happens |", "|---|---|---|"]
    sections = [*GENERATION_CONFIG_OPTIONS.items(), ("Other `generate` inputs", GENERATE_INPUTS)]
    for title, rows in sections:
        lines.append(f"| **{title}** | | |")
        for option in rows:
            partial = option.accepts and option.status != REFUSED
            status = f"{option.status}; some values refused" if partial else option.status
            lines.append(f"| {', '.join(f'`{n}`' for n in option.names)} | {status} | {option.note} |")
    return "\n".join(lines) + "\n"
