"""Quickstart: model.generate(..., assistant_models=[...], flashspec=True) on the bundled SmolLM2-135M-Instruct,
timed against plain generate in the same run.

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


flash_kwargs = dict(assistant_models=assistants, flashspec=True)
timed(**flash_kwargs)  # warm-up: a process's first call pays one-off costs (the target runs in it too)
plain, plain_seconds = timed()
flash, flash_seconds = timed(**flash_kwargs)
print(tokenizer.decode(flash[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True))

stats = model.flashspec_stats
new_tokens = flash.shape[1] - inputs["input_ids"].shape[1]
print(f"plain generate {new_tokens / plain_seconds:.1f} tok/s, flashspec {new_tokens / flash_seconds:.1f} tok/s: "
      f"{plain_seconds / flash_seconds:.2f}x; identical output: {torch.equal(plain, flash)}")
print(f"steps={stats.steps}  tau={stats.tau:.2f}  alpha={stats.alpha}  share={stats.arm_share}")
