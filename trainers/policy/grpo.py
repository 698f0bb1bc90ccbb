"""GRPO (Shao et al. 2024, DeepSeekMath): PPO's clipped surrogate without a critic, on the policy optimiser PPO and
GRPO share (`trainers.policy.optimizer`: rollout, reference, reward, LoRA, accelerate, resume, cancel, progress).

Each of the iteration's `batch_size` prompts gets `group_size` (G) sampled responses, scored as PPO scores them (the
reward model's normalised score on the last real token, minus the missing-EOS penalty). A response's advantage is
its score standardised within its group, shared by every token; the loss adds β·k3 (KL to the reference) per token
inside the loss, not in the reward, and is averaged per response then over responses (`loss_norm="sequence"`) or
over all tokens (`"token"`). β is `init_kl_coef`, moved by the same adaptive controller when `target_kl` is set.
No value head is loaded, trained or saved. The math is in `grpo_math`.

    config = PolicyConfig(algorithm="grpo", group_size=4, batch_size=8, learning_rate=1e-4)
    trainer = GRPOTrainer(config, load_policy(path), load_tokenizer(path), train_prompts, reward)
    trainer.train(iterations=20, reporter=reporter)   # metrics grpo/score, grpo/kl, grpo/clipfrac, ...
    trainer.save_pretrained(path)                     # a plain HF policy directory, no value_head.safetensors
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .config import Algorithm
from .grpo_math import group_advantages, grpo_loss, zero_variance_share
from .modules import PolicyModel
from .optimizer import PolicyOptimizer, Targets
from .ppo_math import approx_kl
from .rollout import Rollout


@dataclass
class GRPOTargets(Targets):
    """GRPO's targets: one standardised advantage per response (B·G,) and β, the KL term's weight in the loss."""

    beta: float


class GRPOTrainer(PolicyOptimizer):
    """Trains `policy` with GRPO against `reward` (the settings' `algorithm` must be "grpo")."""

    algorithm = Algorithm.GRPO
    loss_stats = ("loss", "clipfrac", "approx_kl", "kl_token")

    def _make_model(self, policy: nn.Module) -> PolicyModel:
        return PolicyModel(policy)

    def targets(self, rollout: Rollout, scores: torch.Tensor, kl: torch.Tensor, kl_coef: float) -> GRPOTargets:
        """Group-relative advantages, one per response, and β for the loss's KL term."""
        advantages = group_advantages(scores, self.config.group_size)  # (B·G,)
        zero_variance = zero_variance_share(scores, self.config.group_size).item()
        return GRPOTargets(advantages, {"zero_variance_groups": zero_variance}, kl_coef)

    def loss(self, rollout: Rollout, targets: GRPOTargets, idx: torch.Tensor, logprobs: torch.Tensor,
             values: torch.Tensor | None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The clipped surrogate plus β·k3 to the reference, normalised as `loss_norm` says."""
        mask, old = rollout.mask[idx], rollout.logprobs[idx]
        loss, clipfrac, kl_token = grpo_loss(logprobs, old, rollout.ref_logprobs[idx], targets.advantages[idx], mask,
                                             self.config.clip_range, targets.beta, self.config.loss_norm)
        stats = {"loss": loss, "clipfrac": clipfrac, "approx_kl": approx_kl(logprobs, old, mask), "kl_token": kl_token}
        return loss, stats
