"""flashspec_hf: exact multi-assistant speculative decoding for transformers' ``generate``.

``import flashspec_hf`` adds ``flashspec=True``, ``assistant_models=[...]`` and ``selector=...`` to every causal
LM's ``generate`` (and so to ``pipeline("text-generation")``)::

    import flashspec_hf
    out = model.generate(**inputs, assistant_models=[a1, a2], flashspec=True, max_new_tokens=64)
    model.flashspec_stats.tau   # mean tokens per step, bonus included

``flashspec_hf.evaluate(target, tokenizer, assistants, dataset)`` (CLI ``flashspec-eval``) measures tokens/s, τ,
α and identical greedy outputs per category against plain ``generate``.
"""

from .drafts import DraftSource, PromptLookup
from .evaluation.report import Evaluation
from .evaluation.run import evaluate
from .integration import DEFAULT_NUM_ASSISTANT_TOKENS, install
from .selection import SELECTORS, FixedArm, Hedge, RoundRobin, Selector, ThompsonSampling, UCB1
from .stats import FlashSpecStats

install()

__version__ = "0.1.0"
__all__ = [
    "DEFAULT_NUM_ASSISTANT_TOKENS",
    "Evaluation",
    "SELECTORS",
    "DraftSource",
    "FixedArm",
    "FlashSpecStats",
    "Hedge",
    "PromptLookup",
    "RoundRobin",
    "Selector",
    "ThompsonSampling",
    "UCB1",
    "evaluate",
]
