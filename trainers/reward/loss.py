"""The Bradley-Terry preference loss with soft targets (ties), an optional margin and optional label noise.

For a pair with reward-model scores r1 (first) and r2 (second) and target p = P(first preferred)
(1 first, 0 second, 0.5 tie or "both bad"):

    d    = r1 - r2 - (2p - 1) * margin            # the winner must lead by the margin; a tie has no margin
    P    = (1 - noise) * sigmoid(d) + noise / 2   # Christiano et al.: a fraction of labels is a coin flip
    loss = -(p * log P + (1 - p) * log(1 - P))

A batch's loss is the mean over its comparisons, or with `weight` the weighted mean: a ranking of K answers is one
batch element whose C(K,2) comparisons weigh 1/C(K,2) each (InstructGPT), so sum(w * loss) / sum(w) averages over
pairs and rankings alike.

With noise = 0 this is `-(p * logsigmoid(d) + (1 - p) * logsigmoid(-d))`: `-logsigmoid(d)` for a strict pair,
ln 2 with zero gradient for a tie at d = 0.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def preference_loss(scores_first: torch.Tensor, scores_second: torch.Tensor, target: torch.Tensor,
                    margin: torch.Tensor | float | None = None, noise: float = 0.0,
                    weight: torch.Tensor | None = None) -> torch.Tensor:
    """Mean preference loss over a batch (weighted by `weight` when given); all tensors have shape (B,) (margin may
    be a float)."""
    if not 0.0 <= noise < 1.0:
        raise ValueError(f"noise must be in [0, 1), got {noise}")
    target = torch.as_tensor(target, dtype=scores_first.dtype, device=scores_first.device)
    d = scores_first - scores_second  # (B,)
    if margin is not None:
        d = d - (2 * target - 1) * margin
    log_p_first, log_p_second = F.logsigmoid(d), F.logsigmoid(-d)
    if noise > 0:
        log_keep, log_flip = math.log1p(-noise), math.log(noise / 2)
        log_p_first = torch.logaddexp(log_p_first + log_keep, torch.full_like(d, log_flip))
        log_p_second = torch.logaddexp(log_p_second + log_keep, torch.full_like(d, log_flip))
    losses = -(target * log_p_first + (1 - target) * log_p_second)  # (B,)
    if weight is None:
        return losses.mean()
    weight = torch.as_tensor(weight, dtype=losses.dtype, device=losses.device)
    return (weight * losses).sum() / weight.sum()
