"""The same flags through pipeline("text-generation"): they are passed on to generate. Sampled, so the two
engines' texts differ by chance (flashspec keeps the distribution); both are timed over a few calls.

Run: python examples/pipeline.py
"""

import flashspec_hf  # first, before torch: adds flashspec=True to generate (and sets OpenMP's wait policy)

import time

from transformers import pipeline

from flashspec_hf.models import distilled_assistants, load_target

model, tokenizer = load_target()
generator = pipeline("text-generation", model=model, tokenizer=tokenizer)
chat = [{"role": "user", "content": "Hi! How are you doing today?"}]  # the pipeline applies the chat template
sampling = dict(max_new_tokens=48, do_sample=True, temperature=0.7)
flash_kwargs = dict(assistant_models=distilled_assistants(model), flashspec=True, selector="ucb1")


def timed(calls: int = 3, **kwargs) -> tuple[str, float, int]:
    """(last text, wall seconds, generated tokens) over ``calls`` pipeline calls."""
    seconds, tokens = 0.0, 0
    for _ in range(calls):
        start = time.perf_counter()
        text = generator(chat, **sampling, **kwargs)[0]["generated_text"][-1]["content"]  # the assistant's turn
        seconds += time.perf_counter() - start
        tokens += len(tokenizer(text)["input_ids"])
    return text, seconds, tokens


timed(calls=1, **flash_kwargs)  # warm-up: a process's first call pays one-off costs
_, plain_seconds, plain_tokens = timed()
text, flash_seconds, flash_tokens = timed(**flash_kwargs)
print(text)
plain_rate, flash_rate = plain_tokens / plain_seconds, flash_tokens / flash_seconds
print(f"tau={model.flashspec_stats.tau:.2f}  plain {plain_rate:.1f} tok/s, flashspec {flash_rate:.1f} tok/s: "
      f"{flash_rate / plain_rate:.2f}x")
