"""The same flags through pipeline("text-generation"): they are passed on to generate.

Run: python examples/pipeline.py
"""

from transformers import pipeline

import flashspec_hf  # noqa: F401
from flashspec_hf.models import distilled_assistants, load_target

model, tokenizer = load_target()
generator = pipeline("text-generation", model=model, tokenizer=tokenizer)
result = generator(
    "def fibonacci(n):",
    max_new_tokens=48,
    do_sample=True,  # the pipeline samples (T=0.7) unless told otherwise; flashspec keeps the distribution
    temperature=0.7,
    assistant_models=distilled_assistants(model),
    flashspec=True,
    selector="ucb1",
    stop_sequence="\n\n",
)
print(result[0]["generated_text"])
print(f"tau={model.flashspec_stats.tau:.2f}")
