"""Batch > 1 with left padding: rows accept different numbers of draft tokens per step (stock assisted generation
refuses batch > 1). Each greedy row equals what plain generate gives for it alone; both engines are timed.

On a CPU a batch gains more than one prompt does: plain generate's forward over 3 rows already costs 1.8x a
one-row one, and the verification forward over 3 x 5 positions 1.3x that (at batch 1 the 5-position one costs 1.8x
the one-token one; this project's 2-core CPU, one thread). Measured there (load ~2, torch 2.13 CPU, transformers
5.24): 1.29x (1.26-1.30 over 5 runs), tau 2.27; with 48 new tokens, which cut two of the three answers short,
1.04x (1.02-1.07), tau 2.19.

Run: python examples/batch.py
"""

import flashspec_hf  # first, before torch: adds flashspec=True to generate (and sets OpenMP's wait policy)

import time

import torch

from flashspec_hf.models import distilled_assistants, load_target

model, tokenizer = load_target()  # pads on the left
questions = ["Hi! How are you doing today?", "What is your favourite season, and why?", "Can you recommend a good book?"]
prompts = [tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
           for q in questions]  # an instruct model: each question as one user turn
inputs = tokenizer(prompts, return_tensors="pt", padding=True)
assistants = distilled_assistants(model)


def timed(**kwargs):
    """(sequences, wall seconds) of one greedy generate call on the batch."""
    start = time.perf_counter()
    out = model.generate(**inputs, max_new_tokens=96, do_sample=False, **kwargs)
    return out, time.perf_counter() - start


timed(assistant_models=assistants, flashspec=True)  # warm-up: a process's first call pays one-off costs
plain, plain_seconds = timed()
flash, flash_seconds = timed(assistant_models=assistants, flashspec=True)
for text in tokenizer.batch_decode(flash[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True):
    print(repr(text))
print(f"identical to plain generate: {torch.equal(flash, plain)}  tau: {model.flashspec_stats.tau:.2f}  "
      f"plain {plain_seconds:.2f} s, flashspec {flash_seconds:.2f} s: {plain_seconds / flash_seconds:.2f}x")
