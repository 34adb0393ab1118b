"""The CPU demo with the default selector's parameters changed: ``python prior_ab.py KEY=VALUE,... [flashspec-demo
args]``, e.g. ``conservative=0.05``; ``-`` keeps the default
(``ThompsonSampling(discount=0.99, cost_aware=True, call_memory=8)``)."""

import sys

import flashspec_hf.cli as cli
from flashspec_hf import ThompsonSampling
from flashspec_hf.demo import main

settings = dict(discount=0.99, cost_aware=True, call_memory=8.0)
if sys.argv[1] != "-":
    settings |= {key: float(value) for key, value in (item.split("=") for item in sys.argv[1].split(","))}
cli.SELECTORS = {**cli.SELECTORS, "cost_aware_discounted_thompson": lambda: ThompsonSampling(**settings)}
main(sys.argv[2:])
