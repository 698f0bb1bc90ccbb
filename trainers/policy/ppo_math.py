"""PPO math for language models as pure functions on (batch, response_tokens) tensors.

`mask` is 1 on real response tokens (up to and including the EOS) and 0 on the padding after them.
Every mean is taken over real tokens only, so padding never moves a loss, a statistic or an advantage.
Formulas follow Schulman et al. 2017 (clipped PPO), Schulman et al. 2016 (GAE), Ziegler et al. 2019
(per-token KL penalty, score on the last token) and Schulman's note "Approximating KL divergence" (k1, k2, k3).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..models.sampling import sampling_logits as truncated_logits
from .config import KL_KINDS


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of `values` where `mask` is 1 (0 when the mask is empty)."""
    return (values * mask).sum() / mask.sum().clamp(min=1)


def masked_var(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Unbiased (Bessel-corrected) variance of `values` where `mask` is 1."""
    count = mask.sum()
    assert count > 1, "the variance needs at least two real tokens"
    centred = (values - masked_mean(values, mask)) * mask
    return (centred**2).sum() / (count - 1)


def whiten(values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """(values - mean) / std over real tokens; padding comes out as 0. `shift_mean=False` keeps the mean."""
    mean, var = masked_mean(values, mask), masked_var(values, mask)
    whitened = (values - mean) * torch.rsqrt(var + 1e-8)
    if not shift_mean:
        whitened = whitened + mean
    return whitened * mask


def kl_estimate(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, kind: str = "k1") -> torch.Tensor:
    """Per-token estimate of KL(policy || reference) from log-probs of tokens sampled from the policy.

    With log r = ref_logprob - logprob: k1 = -log r (unbiased, can be negative), k2 = (log r)^2 / 2
    (biased, low variance), k3 = (r - 1) - log r (unbiased, never negative).
    """
    log_ratio = logprobs - ref_logprobs  # log p/q = -log r
    if kind == "k1":
        return log_ratio
    if kind == "k2":
        return 0.5 * log_ratio**2
    if kind == "k3":
        return torch.expm1(-log_ratio) + log_ratio
    raise ValueError(f"unknown KL estimator {kind!r}; use one of {', '.join(KL_KINDS)}")


def penalise_missing_eos(scores: torch.Tensor, ended: torch.Tensor, penalty: float) -> torch.Tensor:
    """Sequence scores (B,) less `penalty` for each response that ran into the length limit without an end id."""
    return scores - penalty * (~ended).float()


def token_rewards(scores: torch.Tensor, kl: torch.Tensor, mask: torch.Tensor, kl_coef: float) -> torch.Tensor:
    """Per-token rewards: -kl_coef * kl on every real token, plus the sequence score on the last real token.

    scores: (B,) already normalised and penalised; kl, mask: (B, T). Each row needs at least one real token.
    """
    lengths = mask.sum(dim=1).long()  # (B,)
    assert bool((lengths > 0).all()), "every response needs at least one real token (its EOS)"
    rewards = -kl_coef * kl * mask  # (B, T)
    last = lengths - 1
    rewards[torch.arange(len(scores), device=scores.device), last] += scores
    return rewards


def compute_gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0,
                lam: float = 0.95) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation, stopping at each response's end (the value after it is 0).

    delta_t = r_t + gamma * V_{t+1} - V_t;  A_t = delta_t + gamma * lam * A_{t+1};  returns = A + V.
    Padding positions come out as 0 in both tensors.
    """
    rewards, values = rewards * mask, values * mask
    batch, steps = rewards.shape
    advantages = torch.zeros_like(rewards)
    next_advantage = torch.zeros(batch, dtype=rewards.dtype, device=rewards.device)
    next_value = torch.zeros_like(next_advantage)
    for t in reversed(range(steps)):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        next_advantage = (delta + gamma * lam * next_advantage) * mask[:, t]
        advantages[:, t] = next_advantage
        next_value = values[:, t]
    return advantages, (advantages + values) * mask


def clipped_surrogate(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                      clip_range: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token clipped surrogate max(-A·ratio, -A·clip(ratio, 1±eps)), ratio = exp(logprobs - old_logprobs), and
    where the clipped term was the larger one. `advantages` broadcasts against the (B, T) log-probs."""
    ratio = torch.exp(logprobs - old_logprobs)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_range, 1.0 + clip_range)
    return torch.maximum(unclipped, clipped), clipped > unclipped


@torch.no_grad()
def approx_kl(logprobs: torch.Tensor, old_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """k3 estimate of KL(old || new) over real tokens (Schulman's (ratio - 1) - log ratio), detached."""
    log_ratio = logprobs - old_logprobs
    return masked_mean(torch.expm1(log_ratio) - log_ratio, mask)


def policy_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                clip_range: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Clipped surrogate loss mean(max(-A·ratio, -A·clip(ratio, 1±eps))) over real tokens.

    Returns (loss, clip_fraction, approx_kl): the share of tokens where the clipped term was the larger one,
    and the k3 estimate of KL(old || new) (Schulman's (ratio - 1) - log ratio), both detached.
    """
    per_token, was_clipped = clipped_surrogate(logprobs, old_logprobs, advantages, clip_range)
    loss = masked_mean(per_token, mask)
    return loss, masked_mean(was_clipped.float(), mask), approx_kl(logprobs, old_logprobs, mask)


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor,
               clip_range: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Clipped value loss 0.5·mean(max((V - R)^2, (V_clip - R)^2)), V_clip = V_old + clip(V - V_old, ±eps).

    Returns (loss, clip_fraction): the share of real tokens where the clipped error was the larger one.
    """
    clipped_values = old_values + torch.clamp(values - old_values, -clip_range, clip_range)
    unclipped_error = (values - returns) ** 2
    clipped_error = (clipped_values - returns) ** 2
    loss = 0.5 * masked_mean(torch.maximum(unclipped_error, clipped_error), mask)
    with torch.no_grad():
        clip_fraction = masked_mean((clipped_error > unclipped_error).float(), mask)
    return loss, clip_fraction


def logprobs_from_logits(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Log-probability of each token: logits (B, T, V), tokens (B, T) -> (B, T)."""
    return torch.gather(F.log_softmax(logits.float(), dim=-1), 2, tokens.unsqueeze(-1)).squeeze(-1)


RULED_OUT = -1e9  # the logit of a token the sampler never draws: finite, so softmax, entropy and gradients stay finite


def sampler_logprobs(logits: torch.Tensor, tokens: torch.Tensor, temperature: float, excluded: int, top_k: int = 0,
                     top_p: float = 1.0) -> torch.Tensor:
    """Log-probability of each token under the sampler's distribution: softmax(`sampling_logits`); (B, T, V), (B, T)
    -> (B, T). At top-k 0 and top-p 1 this is the softmax of logits / temperature with token `excluded` (the pad)
    ruled out, computed without copying the (B, T, V) logits (logsumexp minus the excluded token's share)."""
    if top_k or top_p < 1.0:
        scaled = sampling_logits(logits, temperature, excluded, top_k, top_p, keep=tokens)
        return scaled.log_softmax(-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    scaled = logits.float() if temperature == 1.0 else logits.float() / temperature
    log_total = torch.logsumexp(scaled, dim=-1)  # (B, T)
    log_kept = log_total + torch.log1p(-torch.exp(scaled[..., excluded] - log_total))
    return scaled.gather(-1, tokens.unsqueeze(-1)).squeeze(-1) - log_kept


def sampling_logits(logits: torch.Tensor, temperature: float, excluded: int, top_k: int = 0, top_p: float = 1.0,
                    keep: torch.Tensor | None = None) -> torch.Tensor:
    """The logits the sampler drew from (a float32 copy, ruled-out tokens at `RULED_OUT`): scaled by 1/temperature,
    token `excluded` (the pad) ruled out, then top-k and top-p as `trainers.models.sampling.sampling_logits` applies
    them to these logits, except that the tokens `keep` (..., one per position: the sampled ones) are never ruled out
    by them. Where these logits are the sampler's that is its distribution exactly, since it drew `keep` from its
    kept set; after an update moved the logits, a drawn token that left the set keeps a finite log-prob (its ratio
    is then clipped as any other) instead of -inf. The kept set is a step function of the logits, so gradients are
    those of the renormalised distribution over it."""
    scaled = logits.float() / temperature
    if top_k or top_p < 1.0:
        scaled = scaled.masked_fill(_ruled_out(scaled, excluded, top_k, top_p, keep), RULED_OUT)
    return scaled.index_fill(-1, torch.tensor([excluded], device=logits.device), RULED_OUT)


@torch.no_grad()
def _ruled_out(scaled: torch.Tensor, excluded: int, top_k: int, top_p: float, keep: torch.Tensor | None,
               rows: int = 64) -> torch.Tensor:
    """Where top-k and top-p (the sampler's own definition) rule tokens out of tempered logits (..., V), `keep`
    spared; a bool tensor, computed `rows` positions at a time (what fits a CPU's cache best)."""
    flat = scaled.reshape(-1, scaled.shape[-1])
    out = torch.cat([torch.isinf(truncated_logits(flat[i:i + rows], 1.0, excluded, top_k, top_p))
                     for i in range(0, max(1, len(flat)), rows)]).reshape(scaled.shape)
    if keep is not None:
        out.scatter_(-1, keep.unsqueeze(-1), False)
    return out


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of each position's distribution: (B, T, V) -> (B, T)."""
    logits = logits.float()
    probs = F.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(dim=-1)


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """1 - Var(returns - values) / Var(returns) over real tokens (1 = perfect critic, <= 0 = no better than a mean)."""
    return 1.0 - masked_var(returns - values, mask) / masked_var(returns, mask).clamp(min=1e-8)


def correlation(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Pearson correlation of two (N,) tensors: cov(x, y) / (std x * std y); 0 when either is constant."""
    dx, dy = x.float() - x.float().mean(), y.float() - y.float().mean()
    scale = torch.sqrt((dx**2).sum() * (dy**2).sum())
    return (dx * dy).sum() / scale if scale > 0 else torch.zeros(())
