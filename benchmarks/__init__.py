"""Benchmarks (run as ``python -m benchmarks.<name>``) and what they share."""

from flashspec_hf import SELECTORS

DEFAULT_SELECTOR = "cost_aware_discounted_thompson"
"""The selector a user gets (``flashspec-demo``, ``flashspec-eval``, the README's pool)."""


VARIANTS = {"conservative": dict(conservative=0.05), "prompt prior": dict(prompt_weight=16.0)}
"""Changes to the default the benchmarks compare it with: the conservative guard at δ = 0.05 (opt-in, 2026-12-05),
and reading the prompt with a weight of 16 (the default until 2026-12-04)."""


def default_selector(variant: str | None = None):
    """A fresh :data:`DEFAULT_SELECTOR` from ``flashspec_hf.SELECTORS``, or the same with a :data:`VARIANTS` change
    (attributes set after construction)."""
    selector = SELECTORS[DEFAULT_SELECTOR]()
    for name, value in (VARIANTS[variant] if variant else {}).items():
        setattr(selector, name, value)
    return selector
