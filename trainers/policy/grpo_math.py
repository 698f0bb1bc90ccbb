"""GRPO math (Shao et al. 2024, DeepSeekMath) as pure functions; the pieces PPO has too come from `ppo_math`.

A rollout holds groups of G responses to one prompt in consecutive rows. Each response's advantage is its reward
standardised within its group, shared by all of its tokens; the loss is PPO's clipped surrogate plus β times the k3
estimate of KL(π_θ || π_ref) per token (k3 = u - log u - 1, u = π_ref/π_θ), inside the loss rather than the reward.
`mask` is 1 on real response tokens (up to and including the EOS) and 0 on the padding after them.

    advantages = group_advantages(scores, group_size=4)                      # (B,)
    loss, clip_fraction, kl = grpo_loss(logprobs, old, ref, advantages, mask, clip_range=0.2, beta=0.05)
"""

from __future__ import annotations

import torch

from .config import LossNorm
from .ppo_math import clipped_surrogate, kl_estimate, masked_mean


def group_advantages(scores: torch.Tensor, group_size: int, eps: float = 1e-4) -> torch.Tensor:
    """A_i = (r_i - mean(r)) / (std(r) + eps) within each block of `group_size` consecutive scores (Bessel's std).

    A group whose rewards are all equal gets advantages 0. scores: (B,) with B a multiple of group_size -> (B,).
    """
    assert group_size >= 2 and scores.numel() % group_size == 0, \
        f"{scores.numel()} scores do not split into groups of {group_size}"
    groups = scores.float().view(-1, group_size)  # (B / G, G)
    centred = groups - groups.mean(dim=1, keepdim=True)
    return (centred / (groups.std(dim=1, keepdim=True) + eps)).view(-1)


def zero_variance_share(scores: torch.Tensor, group_size: int) -> torch.Tensor:
    """The share of groups whose rewards are all equal (they carry no learning signal)."""
    groups = scores.view(-1, group_size)
    return (groups == groups[:, :1]).all(dim=1).float().mean()


def sequence_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The mean over each row's real tokens, then over the rows (a row without real tokens counts 0)."""
    return ((values * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)).mean()


def grpo_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, ref_logprobs: torch.Tensor,
              advantages: torch.Tensor, mask: torch.Tensor, clip_range: float, beta: float,
              loss_norm: str = LossNorm.SEQUENCE) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per token -min(ρ·A, clip(ρ, 1±ε)·A) + β·k3, with ρ = π_θ/π_old and k3 against the reference; averaged per
    response then over responses (`sequence`) or over every real token (`token`).

    logprobs, old_logprobs, ref_logprobs, mask: (B, T); advantages: (B,). Returns (loss, clip_fraction, kl): the
    share of real tokens where the clipped term won and the mean k3 over real tokens, both detached.
    """
    if loss_norm not in {n.value for n in LossNorm}:
        raise ValueError(f"unknown loss_norm {loss_norm!r}; use {' or '.join(LossNorm)}")
    # padding rows may hold any log-prob (the pad token's is about -1e9): zero them before anything is exponentiated
    logprobs, old_logprobs, ref_logprobs = (t * mask for t in (logprobs, old_logprobs, ref_logprobs))
    surrogate, was_clipped = clipped_surrogate(logprobs, old_logprobs, advantages[:, None], clip_range)  # (B, T)
    k3 = kl_estimate(logprobs, ref_logprobs, "k3")  # (B, T), never negative
    per_token = surrogate + beta * k3
    loss = sequence_mean(per_token, mask) if loss_norm == LossNorm.SEQUENCE else masked_mean(per_token, mask)
    with torch.no_grad():
        clip_fraction, kl = masked_mean(was_clipped.float(), mask), masked_mean(k3, mask)
    return loss, clip_fraction, kl
