"""Evaluation: plain ``generate`` against flashspec on the same prompts, per category (domain).

Metrics (Spec-Bench style): tokens/s of each engine (generated tokens / wall seconds, batch 1), speed-up, τ
(mean tokens per step, bonus included), α per arm (accepted / tested draft tokens), share of steps per arm, and
whether the greedy output is identical to plain ``generate`` (else where it first differs and the target's top-2
logit margin there).

One job per module:

- :mod:`~flashspec_hf.evaluation.run`: running both engines (:func:`~flashspec_hf.evaluation.run.evaluate`,
  :func:`~flashspec_hf.evaluation.run.compare_on_prompts`, :func:`~flashspec_hf.evaluation.run.acceptance`);
- :mod:`~flashspec_hf.evaluation.inputs`: reading prompt files and datasets, and checking every input before any
  model runs;
- :mod:`~flashspec_hf.evaluation.report`: the result (:class:`~flashspec_hf.evaluation.report.Evaluation`),
  per-category summaries, Markdown / CSV / PNG rendering and atomic file writes.

``flashspec_hf.evaluate`` and ``flashspec_hf.Evaluation`` are the public entry points; ``flashspec-eval``
(:mod:`flashspec_hf.eval_cli`) is the command line.
"""
