"""Verification dispatch: the Triton kernel on CUDA, the exact PyTorch reference elsewhere.

``FLASHSPEC_VERIFIER=triton|torch|auto`` (default ``auto``) overrides the choice; ``triton`` on CPU needs
``TRITON_INTERPRET=1`` (how CI runs the kernel).

Sampling randomness: the kernel draws its own (Philox keyed by an int64 ``[1]`` seed drawn here on the logits'
device, :mod:`flashspec_hf.kernels.philox`); the PyTorch reference takes ``torch.rand`` noise from
:func:`~flashspec_hf.kernels.reference.draw_noise`. Both follow ``torch.manual_seed``; for one seed the two paths
draw different numbers, each from the exact law.
"""

from __future__ import annotations

import os

import torch

from .kernels.reference import draw_noise, verify_greedy_reference, verify_sampling_reference


def verify(
    target_logits: torch.Tensor, draft_tokens: torch.Tensor, draft_logits: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Accept/reject one step of draft tokens for every row, with no device-to-host synchronisation.

    Args:
        target_logits: ``[B, γ + 1, V]`` processed target logits (any float dtype).
        draft_tokens: int64 ``[B, γ]``.
        draft_logits: ``[B, γ, V]`` processed draft logits the drafts were sampled from, or None for greedy.

    Returns:
        output_tokens: int64 ``[B, γ + 1]``, accepted tokens then one recovered/bonus token then -1.
        num_accepted: int64 ``[B]``.

    Raises:
        ValueError: if ``FLASHSPEC_VERIFIER`` names no known verifier.
    """
    use_triton = _use_triton(target_logits.device)
    if draft_logits is None:
        if use_triton:
            from .kernels.rejection_sampler import verify_triton

            return verify_triton(target_logits, draft_tokens)
        return verify_greedy_reference(target_logits, draft_tokens)
    if use_triton:
        from .kernels.philox import draw_seed
        from .kernels.rejection_sampler import verify_triton

        return verify_triton(target_logits, draft_tokens, draft_logits, draw_seed(target_logits.device))
    batch_size, gamma = draft_tokens.shape
    noise = draw_noise(batch_size, gamma, target_logits.shape[-1], target_logits.device)  # [B, γ], [B, V], [B, tiles]
    return verify_sampling_reference(target_logits, draft_tokens, draft_logits, *noise)


def _use_triton(device: torch.device) -> bool:
    choice = os.environ.get("FLASHSPEC_VERIFIER", "auto")
    if choice not in ("auto", "triton", "torch"):
        raise ValueError(f"FLASHSPEC_VERIFIER must be 'auto', 'triton' or 'torch', got {choice!r}")
    return choice == "triton" or (choice == "auto" and device.type == "cuda")
