"""Verification kernels: a Triton kernel for CUDA and its exact PyTorch reference (CPU path and test oracle)."""

from .reference import PLACEHOLDER_TOKEN_ID, draw_noise, verify_greedy_reference, verify_sampling_reference

__all__ = ["PLACEHOLDER_TOKEN_ID", "draw_noise", "verify_greedy_reference", "verify_sampling_reference"]
