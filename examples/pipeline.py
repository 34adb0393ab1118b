"""The same flags through pipeline("text-generation"): they are passed on to generate, so one selector instance in
them keeps learning from call to call. Greedy, so each call's text is plain generate's; both are timed over a few
calls.

Measured on this project's 2-core CPU (one thread, load ~2, torch 2.13 CPU, transformers 5.24): 1.25x (1.19-1.36
over 5 runs), tau 3.00. Sampled instead (do_sample=True, temperature=0.7, 48 tokens, 5 calls) it gave 0.74-0.97x
with every selector tried: acceptance falls (tau 2.4 for the chat draft alone, 3.0 greedy) to about what a drafted
step then cost here in one-token forwards, 2.2 (before 2026-12-01's few-row products; about 1.35 since: README,
Troubleshooting).

Run: python examples/pipeline.py
"""

import flashspec_hf  # first, before torch: adds flashspec=True to generate (and sets OpenMP's wait policy)

import time

from transformers import pipeline

from flashspec_hf.models import distilled_assistants, load_target

model, tokenizer = load_target()
generator = pipeline("text-generation", model=model, tokenizer=tokenizer)
chat = [{"role": "user", "content": "Hi! How are you doing today?"}]  # the pipeline applies the chat template
settings = dict(max_new_tokens=96, do_sample=False)
flash_kwargs = dict(assistant_models=distilled_assistants(model), flashspec=True,
                    selector=flashspec_hf.ThompsonSampling())  # one selector for every call


def timed(calls: int = 3, **kwargs) -> tuple[str, float]:
    """(last text, wall seconds) over ``calls`` pipeline calls."""
    start = time.perf_counter()
    for _ in range(calls):
        text = generator(chat, **settings, **kwargs)[0]["generated_text"][-1]["content"]  # the assistant's turn
    return text, time.perf_counter() - start


timed(calls=1, **flash_kwargs)  # warm-up: a process's first call pays one-off costs; the selector learns
plain_text, plain_seconds = timed()
text, flash_seconds = timed(**flash_kwargs)
print(text)
print(f"tau={model.flashspec_stats.tau:.2f}  plain {plain_seconds:.2f} s, flashspec {flash_seconds:.2f} s: "
      f"{plain_seconds / flash_seconds:.2f}x; same text: {text == plain_text}")
