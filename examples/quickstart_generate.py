"""Quickstart: model.generate(..., assistant_models=[...], flashspec=True) on the bundled SmolLM2-135M-Instruct.

Run: python examples/quickstart_generate.py
"""

import flashspec_hf  # noqa: F401  (adds flashspec=True to generate)
from flashspec_hf.models import distilled_assistants, load_target

model, tokenizer = load_target()  # offline; with a hub: load_target("HuggingFaceTB/SmolLM2-135M-Instruct")
assistants = distilled_assistants(model)  # the bundled chat / code / general drafts (model_cards/)

messages = [{"role": "user", "content": "Give me three tips for learning to cook."}]
prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
inputs = tokenizer(prompt, return_tensors="pt")

out = model.generate(
    **inputs, max_new_tokens=64, do_sample=False, repetition_penalty=1.2, assistant_models=assistants, flashspec=True
)
print(tokenizer.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True))

stats = model.flashspec_stats
print(f"steps={stats.steps}  tau={stats.tau:.2f}  alpha={stats.alpha}  share={stats.arm_share}")
