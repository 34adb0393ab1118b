"""Exact PyTorch reference of the verification step: the CPU path and the kernel's test oracle.

Vocabulary (one speculative step of one row, γ = ``num_assistant_tokens``):

- *draft tokens* ``x_1..x_γ``: proposed by the assistant, sampled from its processed distribution ``q_i``.
- *accepted tokens*: the longest prefix of the draft tokens that passes verification.
- *recovered token*: drawn from the residual distribution ``norm(max(0, p_k - q_k))`` at the first rejected
  position ``k`` (sampling; from ``p_k`` if rounding left the residual empty), or the target's argmax there
  (greedy).
- *bonus token*: drawn from the target's ``p_{γ+1}`` when all γ draft tokens are accepted.
- *output tokens*: accepted tokens followed by exactly one recovered or bonus token; the rest of the
  ``[γ + 1]`` row is :data:`PLACEHOLDER_TOKEN_ID`.

Algorithm: speculative sampling, Leviathan et al. 2023 ("Fast Inference from Transformers via Speculative
Decoding", Algorithm 1) and Chen et al. 2023; acceptance ``u <= p(x) / q(x)`` tested in log space. Sampling uses
the exponential race (``argmax(r · w)``, ``w = 1 / E``, ``E ~ Exp(1)``: the Gumbel-max trick without logarithms,
as ``-log E`` is Gumbel noise), which samples from ``r`` without normalising, in two levels: the vocabulary is cut
into tiles of :data:`RACE_TILE` columns, a race over the tiles' masses ``R_t = sum_{v in t} r_v`` (one weight per
tile) picks tile ``t`` with probability ``R_t / sum(R)``, and a race over the columns of that tile picks ``v`` with
probability ``r_v / R_t``: ``r_v / sum(r)`` in all, with per-column randomness for one tile per row instead of the
whole vocabulary. Float32 underflow (entries below about 1e-38) moves at most ``V · 1e-38`` of probability, and
never onto an entry with ``r = 0``.

Randomness is an input (uniforms ``[B, γ]``, column weights ``[B, V]``, tile weights ``[B, ceil(V / tile)]``), so the
reference is a deterministic function of its arguments: the CPU path feeds it :func:`draw_noise` (``torch.rand``);
the tests feed it :func:`flashspec_hf.kernels.philox.philox_noise`, exactly what the Triton kernel draws in-kernel
for a seed, and compare the two bit for bit.
"""

from __future__ import annotations

import torch

PLACEHOLDER_TOKEN_ID = -1
RACE_TILE = 1024
"""Columns per tile of the two-level race (the sampling kernel's tile): the result depends on it."""


def draw_noise(batch_size: int, gamma: int, vocab_size: int, device: torch.device,
               race_tile: int = RACE_TILE) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random numbers for one sampling verification step on the PyTorch path, drawn in float64 (never degenerate).

    Args:
        batch_size, gamma, vocab_size: ``B``, ``γ`` and ``V``.
        device: where the verification runs.
        race_tile: columns per tile of the two-level race.

    Returns:
        uniforms: float32 ``[B, γ]`` in ``(0, 1]`` (never 0: float32 ``torch.rand`` can return exactly 0,
            pytorch issue #16706), one acceptance test per draft token.
        weights: float32 ``[B, V]``, race weights ``1 / E`` with ``E = -log U ~ Exp(1)``, ``U`` in ``[0, 1)``: finite
            (at most ``9e15``), and 0 for ``U = 0`` (that entry never wins). One row suffices: each row samples
            exactly one token (recovered or bonus) per step.
        tile_weights: float32 ``[B, ceil(V / race_tile)]``, the same law, one per tile.
    """
    uniforms = (1.0 - torch.rand(batch_size, gamma, dtype=torch.float64, device=device)).float()  # [B, γ]
    tiles = -(-vocab_size // race_tile)
    u = torch.rand(batch_size, vocab_size + tiles, dtype=torch.float64, device=device)  # [B, V + tiles]
    weights = (-1.0 / torch.log(u)).float()  # [B, V + tiles]
    return uniforms, weights[:, :vocab_size], weights[:, vocab_size:]


def verify_greedy_reference(target_logits: torch.Tensor, draft_tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy verification: accept while the draft token equals the target's argmax, then emit the argmax.

    Args:
        target_logits: ``[B, γ + 1, V]`` float32/bf16/fp16, processed target logits at the pending token and at
            each draft token.
        draft_tokens: int64 ``[B, γ]``.

    Returns:
        output_tokens: int64 ``[B, γ + 1]``, accepted tokens then one recovered/bonus token, then -1.
        num_accepted: int64 ``[B]`` in ``[0, γ]``.
    """
    argmax = target_logits.argmax(dim=-1)  # [B, γ+1]
    num_accepted = _leading(draft_tokens == argmax[:, :-1])  # [B]
    return _assemble(draft_tokens, num_accepted, argmax.gather(1, num_accepted.unsqueeze(1))[:, 0])


def verify_sampling_reference(
    target_logits: torch.Tensor,
    draft_tokens: torch.Tensor,
    draft_logits: torch.Tensor,
    uniforms: torch.Tensor,
    weights: torch.Tensor,
    tile_weights: torch.Tensor,
    race_tile: int = RACE_TILE,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Speculative sampling: output tokens distributed exactly as sampling from the target alone.

    The vocabulary-wide work (residual, the two-level exponential race) is done for one position per row, the one
    its recovered or bonus token comes from, as the kernel does.

    Args:
        target_logits: ``[B, γ + 1, V]`` processed target logits (``p = softmax``; temperature, top-k, top-p
            already applied by the logits processors).
        draft_tokens: int64 ``[B, γ]``, sampled from ``softmax(draft_logits)``.
        draft_logits: ``[B, γ, V]`` processed draft logits (``q``), same vocabulary as the target.
        uniforms: float32 ``[B, γ]`` in ``(0, 1]``; token ``i`` is accepted iff ``u_i <= p_i(x_i) / q_i(x_i)``.
        weights: float32 ``[B, V]`` race weights ``1 / E``, ``E ~ Exp(1)``, for the one recovered or bonus token of
            each row (:func:`draw_noise`); tile_weights: float32 ``[B, ceil(V / race_tile)]``, the same per tile.
        race_tile: columns per tile of the race (:data:`RACE_TILE`, as the kernel).

    Returns:
        output_tokens: int64 ``[B, γ + 1]``; num_accepted: int64 ``[B]`` (see module docstring).
    """
    gamma = draft_tokens.shape[1]
    log_p = torch.log_softmax(target_logits.float(), dim=-1)  # [B, γ+1, V]
    log_q = torch.log_softmax(draft_logits.float(), dim=-1)  # [B, γ, V]
    idx = draft_tokens.unsqueeze(-1)  # [B, γ, 1]
    log_ratio = log_p[:, :-1].gather(-1, idx).squeeze(-1) - log_q.gather(-1, idx).squeeze(-1)  # [B, γ]
    num_accepted = _leading(torch.log(uniforms) <= log_ratio)  # [B]
    # the one distribution each row samples from: the residual max(0, p - q) at its first rejection k < γ, or p
    # itself for the bonus token (k = γ)
    at = num_accepted.view(-1, 1, 1).expand(-1, 1, log_p.shape[-1])  # [B, 1, V]
    p_k = log_p.gather(1, at)[:, 0].exp()  # [B, V]
    r = p_k
    if gamma:  # (γ = 0: the plain-decoding arm, every row takes its bonus token)
        q_k = log_q.gather(1, at.clamp(max=gamma - 1))[:, 0].exp()  # [B, V] (unused at the bonus position)
        r = torch.where((num_accepted == gamma).unsqueeze(1), p_k, (p_k - q_k).clamp_min(0.0))  # [B, V]
    return _assemble(draft_tokens, num_accepted, _two_level_race(r, p_k, weights, tile_weights, race_tile))


def _two_level_race(r: torch.Tensor, p: torch.Tensor, weights: torch.Tensor, tile_weights: torch.Tensor,
                    race_tile: int) -> torch.Tensor:
    """int64 ``[B]``: a sample of ``r / sum(r)`` per row (``r``, ``p`` float32 ``[B, V]``; module docstring), or of
    ``p`` when ``r`` has no mass (p = q up to rounding: a rejection then has probability ~1e-7), or every tile's
    race value underflowed or met a zero weight. Ties go to the lowest tile, then the lowest column. If every
    product of the winning tile underflows (its entries below ~1e-38), its largest entry is taken.

    Raises:
        ValueError: ``tile_weights`` not drawn for ``race_tile``."""
    batch_size, vocab_size = r.shape
    tiles = tile_weights.shape[1]
    if tiles != -(-vocab_size // race_tile):
        raise ValueError(f"{tiles} tile weights for V = {vocab_size} in tiles of {race_tile}: draw the noise with "
                         f"the same race_tile (draw_noise / philox_noise)")
    rows = torch.arange(batch_size, device=r.device)  # [B]

    def tiled(x: torch.Tensor) -> torch.Tensor:  # [B, V] -> [B, tiles, race_tile], zero past V
        return torch.nn.functional.pad(x, (0, tiles * race_tile - vocab_size)).view(batch_size, tiles, race_tile)

    race_r = tiled(r).sum(dim=-1) * tile_weights  # [B, tiles]
    empty = ~(race_r > 0).any(dim=-1, keepdim=True)  # [B, 1]
    values = torch.where(empty.unsqueeze(-1), tiled(p), tiled(r))  # [B, tiles, race_tile]
    tile = torch.where(empty, values.sum(dim=-1) * tile_weights, race_r).argmax(dim=-1)  # [B]
    values = values[rows, tile]  # [B, race_tile]
    race = values * tiled(weights)[rows, tile]  # [B, race_tile]
    race = torch.where((race > 0).any(dim=-1, keepdim=True), race, values)  # every product underflowed: the largest
    return tile * race_tile + race.argmax(dim=-1)


def _leading(accepted: torch.Tensor) -> torch.Tensor:
    """int64 ``[B]``: the number of leading True of each row of ``accepted`` bool ``[B, γ]`` (cumprod stays 1
    until the first rejection)."""
    return accepted.long().cumprod(dim=1).sum(dim=1)


def _assemble(
    draft_tokens: torch.Tensor, num_accepted: torch.Tensor, last: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Output row = the ``num_accepted`` leading draft tokens, then ``last``, then placeholders.

    Shapes: draft_tokens ``[B, γ]``; num_accepted, last int64 ``[B]`` (the recovered or bonus token).
    """
    batch_size, gamma = draft_tokens.shape
    pos = torch.arange(gamma + 1, device=draft_tokens.device).expand(batch_size, -1)  # [B, γ+1]
    k = num_accepted.unsqueeze(1)  # [B, 1]
    padded_drafts = torch.nn.functional.pad(draft_tokens, (0, 1), value=PLACEHOLDER_TOKEN_ID)  # [B, γ+1]
    out = torch.where(pos < k, padded_drafts, torch.full_like(padded_drafts, PLACEHOLDER_TOKEN_ID))
    out = torch.where(pos == k, last.unsqueeze(1), out)  # [B, γ+1]
    return out, num_accepted
