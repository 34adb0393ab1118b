"""flashspec_hf: exact multi-assistant speculative decoding for transformers' ``generate``.

``import flashspec_hf`` adds ``flashspec=True``, ``assistant_models=[...]`` and ``selector=...`` to every causal
LM's ``generate`` (and so to ``pipeline("text-generation")``)::

    import flashspec_hf
    out = model.generate(**inputs, assistant_models=[a1, a2], flashspec=True, max_new_tokens=64)
    model.flashspec_stats.tau   # mean tokens per step, bonus included

``flashspec_hf.evaluate(target, tokenizer, assistants, dataset)`` (CLI ``flashspec-eval``) measures tokens/s, τ,
α and identical greedy outputs per category against plain ``generate``.

Glossary (every module's names follow it):

- *target*: the model whose distribution is reproduced; *draft model* (transformers: assistant model): a smaller
  model with the target's tokenizer; *draft source*: a draft model or a model-free proposer (prompt lookup).
- *γ* (``num_assistant_tokens``): draft tokens proposed per step; *arm*: a (draft source, γ) pair, one of which
  drafts each step, chosen by a *selector* from past steps only.
- *step*: one draft of γ tokens, one target forward over ``γ + 1`` positions, one verification.
- *draft tokens* ``x_1 … x_γ``; *draft scores* ``q``: generate's processors applied to the draft logits (what
  the drafts were sampled from); *target scores* ``p``: the same processors applied to the target logits.
- *accepted tokens*: the longest prefix of the draft tokens that passes verification; *recovered token*: drawn
  from the residual ``max(0, p − q)`` at the first rejection (the target's argmax when greedy); *bonus token*:
  drawn from ``p`` after all γ drafts were accepted. A step *emits* its accepted tokens and one recovered or
  bonus token, cut at EOS, the length limit or a stopping criterion.
- *τ*: mean tokens emitted per row per step (accepted + 1); *α*: per-token acceptance rate, accepted / tested
  draft tokens, where a step tests its accepted tokens plus the first rejected one (``FlashSpecStats.alpha``; the
  bandits' Beta posterior counts the same trials). UCB1's reward is accepted / drafted (``accepted / γ``), a value
  in ``[0, 1]`` per step.
- *columns*: the cache slots shared by every model (:mod:`flashspec_hf.columns`); *holes*: rejected draft columns
  kept masked at batch > 1 (the dynamic backend; the static one writes over them); *pending column*: the last
  emitted token, not yet fed to the target.
- *backend*: how columns and caches are laid out and whether forwards are CUDA graphs (dynamic or static,
  :mod:`flashspec_hf.backends`); *runner*: one model's forward over the columns with its own KV cache.
"""

from . import openmp  # noqa: F401  (first: OpenMP reads its wait policy when torch loads)
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
