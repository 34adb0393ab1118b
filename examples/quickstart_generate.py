"""Quickstart: model.generate(..., assistant_models=[...], flashspec=True) on the bundled SmolLM2-135M-Instruct,
timed against plain generate in the same run.

One selector is passed to both flashspec calls, as a program calling generate again and again would keep it: the
first call (the warm-up) explores the three drafts, the timed one starts from what it learned. This reply is 28
tokens, 10-12 steps, too few to also learn which draft fits it. Measured on this project's 2-core CPU (one thread,
load 2.0-2.1, torch 2.13 CPU, transformers 5.24): 1.15x (1.10-1.27 over 5 runs), tau 3.00; with a fresh selector
each call (selector="thompson") 0.99x (0.89-1.01), tau 2.50. Where the time goes: the README's Troubleshooting.

Run: python examples/quickstart_generate.py
"""

import flashspec_hf  # first, before torch: adds flashspec=True to generate (and sets OpenMP's wait policy)

import time

import torch

from flashspec_hf.models import distilled_assistants, load_target

model, tokenizer = load_target()  # offline; with a hub: load_target("HuggingFaceTB/SmolLM2-135M-Instruct")
assistants = distilled_assistants(model)  # the bundled chat / code / general drafts (model_cards/)

messages = [{"role": "user", "content": "Hi! How are you doing today?"}]
prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
inputs = tokenizer(prompt, return_tensors="pt")


def timed(**kwargs):
    """(sequences, wall seconds) of one greedy generate call."""
    start = time.perf_counter()
    out = model.generate(**inputs, max_new_tokens=96, do_sample=False, **kwargs)
    return out, time.perf_counter() - start


flash_kwargs = dict(assistant_models=assistants, flashspec=True, selector=flashspec_hf.ThompsonSampling())
timed(**flash_kwargs)  # warm-up: a process's first call pays one-off costs; the selector learns
plain, plain_seconds = timed()
flash, flash_seconds = timed(**flash_kwargs)
print(tokenizer.decode(flash[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True))

stats = model.flashspec_stats
new_tokens = flash.shape[1] - inputs["input_ids"].shape[1]
print(f"plain generate {new_tokens / plain_seconds:.1f} tok/s, flashspec {new_tokens / flash_seconds:.1f} tok/s: "
      f"{plain_seconds / flash_seconds:.2f}x; identical output: {torch.equal(plain, flash)}")
print(f"steps={stats.steps}  tau={stats.tau:.2f}  alpha={stats.alpha}  share={stats.arm_share}")
