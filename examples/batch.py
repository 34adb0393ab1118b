"""Batch > 1 with left padding: rows accept different numbers of draft tokens per step (stock assisted generation
refuses batch > 1). Each greedy row equals what plain generate gives for it alone.

Run: python examples/batch.py
"""

import torch

import flashspec_hf  # noqa: F401
from flashspec_hf.models import distilled_assistants, load_target

model, tokenizer = load_target()  # pads on the left
prompts = ["The capital of France is", "def add(a, b):\n    return", "Once upon a time, in a small village,"]
inputs = tokenizer(prompts, return_tensors="pt", padding=True)

flash = model.generate(**inputs, max_new_tokens=32, do_sample=False,
                       assistant_models=distilled_assistants(model), flashspec=True)
plain = model.generate(**inputs, max_new_tokens=32, do_sample=False)
for text in tokenizer.batch_decode(flash[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True):
    print(repr(text))
print("identical to plain generate:", torch.equal(flash, plain), " tau:", round(model.flashspec_stats.tau, 2))
