"""Dynamo graphs a flashspec call compiles, counted on the CPU: what a set-up's first call compiles on a GPU, where
each graph costs seconds of inductor (``default``'s first call took 155.7 s on an H100 at B = 1, SmolLM2-135M,
2026-12-07, against stock static's 32.0 s: ``results/h100_2026-12-07e_head``). The static backend compiles only on
CUDA, so this has it compile its forwards on the CPU too, with the default options but dynamo's ``eager`` backend
(graphs traced, nothing generated): the graphs are those a GPU call makes. SmolLM2-135M-Instruct (fp32), its bundled drafts, prompt lookup
and the default selector, greedy (side evidence) and sampling, three calls each (the later ones compile nothing when
the first made every shape family), with the greedy output checked against stock ``generate``.

    python -m benchmarks.compiled_graphs [--batch 1] [--max-new-tokens 24]
"""

import argparse
from unittest import mock

import torch
from torch._dynamo.utils import counters

from flashspec_hf import PromptLookup
from flashspec_hf.backends import StaticBackend
from flashspec_hf.models import distilled_assistants, load_target

from . import selector_from_spec

PROMPTS = ['def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n', "Hi! How are you doing today? I was"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--max-new-tokens", type=int, default=24)
    args = parser.parse_args()
    target, tokenizer = load_target()
    pool = [*distilled_assistants(target), PromptLookup()]
    inputs = tokenizer([PROMPTS[i % len(PROMPTS)] for i in range(args.batch)], return_tensors="pt", padding=True)
    for do_sample in (False, True):
        torch._dynamo.reset()
        counters.clear()
        selector = selector_from_spec()
        graphs = []
        for _ in range(3):
            # the static backend's forwards compiled on the CPU too (it compiles on CUDA only)
            with mock.patch.object(StaticBackend, "options_for", lambda self, model: {"backend": "eager"}):
                out = target.generate(**inputs, assistant_models=pool, flashspec=True, selector=selector,
                                      do_sample=do_sample, max_new_tokens=args.max_new_tokens,
                                      cache_implementation="static")
            graphs.append(counters["stats"]["unique_graphs"])
        line = f"{'sampling' if do_sample else 'greedy'}, B = {args.batch}: graphs after each call {graphs}"
        if not do_sample:
            stock = target.generate(**inputs, do_sample=False, max_new_tokens=args.max_new_tokens)
            line += f"; identical to stock greedy: {torch.equal(stock, out)}"
        print(line)


if __name__ == "__main__":
    main()
