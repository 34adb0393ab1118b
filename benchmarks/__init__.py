"""Benchmarks (run as ``python -m benchmarks.<name>``) and what they share."""

import random

from flashspec_hf import SELECTORS, FixedArm

DEFAULT_SELECTOR = "cost_aware_discounted_thompson"
"""The selector a user gets (``flashspec-demo``, ``flashspec-eval``, the README's pool)."""


def selector_from_spec(spec: str = "default"):
    """A fresh selector from ``name[:attr=value]...``: ``name`` is ``default`` (:data:`DEFAULT_SELECTOR`) or a name in
    ``flashspec_hf.SELECTORS``; each ``attr=value`` is set after construction (a float, or ``None``), and ``seed=N``
    reseeds the selector's own generator (Thompson sampling, Hedge). The variants the benchmarks compare the default
    with: ``default:conservative=0.05`` (the conservative guard, opt-in since 2026-12-05) and
    ``default:prompt_weight=16`` (reading the prompt, the default until 2026-12-04).

    Raises:
        ValueError: an unknown name, or a setting not written ``attr=value``.
    """
    name, *settings = spec.split(":")
    name = DEFAULT_SELECTOR if name == "default" else name
    if name not in SELECTORS:
        raise ValueError(f"unknown selector {name!r} in {spec!r}: use 'default' or one of {sorted(SELECTORS)}, "
                         "optionally followed by :attr=value settings")
    selector = SELECTORS[name]()
    for setting in settings:
        attr, sep, value = setting.partition("=")
        if not sep:
            raise ValueError(f"selector setting {setting!r} in {spec!r} is not written attr=value")
        if attr == "seed":
            selector.rng = random.Random(int(value))
        else:
            setattr(selector, attr, None if value == "None" else float(value))
    return selector


def pinned_with_evidence(arm: int) -> FixedArm:
    """A :class:`FixedArm` whose calls gather side evidence (the selector ignores it): the default's step, pinned."""
    selector = FixedArm(arm)
    selector.side_evidence = True
    return selector
