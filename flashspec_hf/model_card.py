"""Hugging Face model cards (YAML front matter + Markdown) for distilled drafts, written from their
``training.json`` and measured acceptance."""

from __future__ import annotations

from collections.abc import Sequence


def model_card(info: dict, measured: Sequence[tuple[str, dict]] = (), notes: str = "") -> str:
    """A Hugging Face model card (YAML front matter + Markdown) for a distilled draft.

    Args:
        info: the draft's ``training.json`` (name, domain, data, base_model, steps, sizes, time, device).
        measured: acceptance tables, each ``(setup, {domain: {"tau": float, "alpha": float}})`` where ``setup``
            says on what prompts, hardware and software it was measured.
        notes: Markdown appended at the end (e.g. what other configurations measured).
    """
    lines = [
        "---",
        "library_name: transformers",
        "pipeline_tag: text-generation",
        f"base_model: {info.get('base_model', 'unknown')}",
        "license: apache-2.0",
        "tags: [speculative-decoding, flashspec]",
        "---",
        "",
        f"# {info.get('name', 'draft')}: a flashspec assistant for {info.get('base_model', 'its target')}",
        "",
        f"A draft model distilled for the {info.get('domain', 'general')} domain: the target's first "
        f"{info['num_layers']} decoder layers (MLP width {info.get('intermediate_size')}) and final norm, trained to "
        "match the target's next-token distribution (top-k cross-entropy), with the target's embeddings and LM head "
        "frozen and shared at run time"
        + (f"; its head keeps {info['draft_vocab']:,} tokens, the most frequent ones in its training text and the "
           "special tokens." if info.get("draft_vocab") else "."),
        "It is a draft for speculative decoding: outputs come from the target, so they are exact whatever the draft.",
        "",
        "## Training",
        "",
        f"- data: {info.get('data', 'unknown')}",
        f"- {info['steps']:,} steps × {info['batch_size']} × {info['seq_len']} tokens "
        f"({info['tokens_seen']:,} tokens), lr {info['lr']}, top-k {info['top_k']}",
        f"- training steps: {info['seconds']} s on {info['device']} (not counting the target's continuations and "
        "top-k pass); final loss " + (f"{info['final_loss']:.3f}" if info.get("final_loss") is not None else "not recorded"),
        "",
        "## Why this architecture",
        "",
        "Sharing the target's embeddings and head makes the draft's distribution start close to the target's and "
        "costs no extra weights to ship; a few narrow layers add most of the agreement a draft gets from depth while "
        "keeping its cost per token a few percent of the target's. A head over the frequent tokens cuts the largest "
        "remaining cost (for SmolLM2-135M the head is 28M of the target's 135M multiply-accumulates per token).",
    ]
    for setup, table in measured:
        lines += ["", "## Measured acceptance", "", setup, "",
                  "| domain | τ (tokens per step) | α (acceptance rate) |", "|---|---|---|"]
        lines += [f"| {d} | {m['tau']:.2f} | {m['alpha']:.2f} |" for d, m in table.items()]
    if notes:
        lines += ["", notes]
    return "\n".join(lines) + "\n"
