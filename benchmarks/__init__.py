"""Benchmarks (run as ``python -m benchmarks.<name>``) and what they share."""

from flashspec_hf import SELECTORS

DEFAULT_SELECTOR = "cost_aware_discounted_thompson"
"""The selector a user gets (``flashspec-demo``, ``flashspec-eval``, the README's pool)."""


def default_selector(prompt_prior: bool = True):
    """A fresh :data:`DEFAULT_SELECTOR` from ``flashspec_hf.SELECTORS``, or the same with its prompt prior off
    (``prompt_weight = 0``), to measure what the prior adds."""
    selector = SELECTORS[DEFAULT_SELECTOR]()
    if not prompt_prior:
        selector.prompt_weight = 0.0
    return selector
