"""Benchmarks (run as ``python -m benchmarks.<name>``) and what they share."""

from flashspec_hf import SELECTORS

DEFAULT_SELECTOR = "cost_aware_discounted_thompson"
"""The selector a user gets (``flashspec-demo``, ``flashspec-eval``, the README's pool)."""


PROMPT_WEIGHT = 16.0
"""The prompt prior's weight the benchmarks compare the default with (the default's own until 2026-12-04)."""


def default_selector(prompt_prior: bool = False):
    """A fresh :data:`DEFAULT_SELECTOR` from ``flashspec_hf.SELECTORS`` (it does not read the prompt), or the same
    reading the prompt (``prompt_weight =`` :data:`PROMPT_WEIGHT`), to measure what the prior adds."""
    selector = SELECTORS[DEFAULT_SELECTOR]()
    selector.prompt_weight = PROMPT_WEIGHT if prompt_prior else 0.0
    return selector
