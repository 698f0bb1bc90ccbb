"""PPO for language models (Ziegler et al. 2019, InstructGPT): the critic, GAE and the clipped losses on top of the
policy optimiser PPO and GRPO share (`trainers.policy.optimizer`: rollout, reference, reward, LoRA, accelerate,
resume, cancel, progress).

Roles. The actor is the policy (a causal LM). The critic is a scalar value head on the actor's last hidden state,
so one forward pass gives both log-probs and values and no second transformer is trained or stored; the head starts
at zero, so its first gradients do not disturb the policy, and `vf_coef` sets how much the value loss moves the
shared weights. (A separate critic network, as in InstructGPT, doubles the trained weights, optimizer state and
forward passes; with LoRA a critic on frozen base features would be cheap but too weak to fit the returns.)
The reference is frozen: a copy of the starting (SFT) policy in full fine-tuning; with LoRA, the same base with
the adapters disabled, so actor, critic and reference share one copy of the base weights.

One iteration: sample a batch of prompts (left-padded) -> generate (temperature, top-p, top-k, cut at the first end id)
-> store per token the action, old log-prob, reference log-prob, value and mask -> per-token reward -β·KL plus the score
on the last real token (minus a penalty when there is no EOS) -> GAE (γ, λ), whitened advantages -> `epochs` passes of
shuffled mini-batches with clipped policy and value losses and an entropy bonus -> update β -> drop the buffer.

    config = PolicyConfig(batch_size=16, learning_rate=1e-4)
    reward = lambda prompts, responses: torch.tensor([sentiment_score(r) for r in responses])
    trainer = PPOTrainer(config, load_policy(path), load_tokenizer(path), train_prompts, reward)
    trainer.train(iterations=20, reporter=reporter)   # until iteration 20; JobCancelled when the reporter says stop
    trainer.save_pretrained(path)                     # a plain HF policy directory (the job layer registers it)

The trainer never touches the store: it reports through a `trainers.reporting.Reporter` the job layer builds
(`trainers.jobs.policy_job`). The math is in `ppo_math`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from labeling.transfer.conversations import PromptInput

from ..models.chat_format import ChatFormat
from .config import Algorithm, PolicyConfig
from .modules import PolicyWithValueHead
from .optimizer import PolicyOptimizer, RewardFn, Targets
from .ppo_math import compute_gae, explained_variance, policy_loss, token_rewards, value_loss, whiten
from .rollout import Rollout, RolloutBackend


@dataclass
class PPOTargets(Targets):
    """PPO's targets: whitened GAE advantages (B, R) and the returns (B, R) the critic regresses on."""

    returns: torch.Tensor


def parameter_groups(model: PolicyWithValueHead, config: PolicyConfig) -> list[dict]:
    """The optimiser's groups: the policy's trainable weights at `learning_rate`, the value head at `value_lr`."""
    policy = [p for p in model.policy.parameters() if p.requires_grad]
    value_lr = config.value_lr if config.value_lr is not None else config.learning_rate
    return [{"params": policy}, {"params": list(model.value_head.parameters()), "lr": value_lr}]


class PPOTrainer(PolicyOptimizer):
    """Trains `policy` with PPO against `reward`; `value_head` (a saved head's state dict) warms the critic."""

    algorithm = Algorithm.PPO
    loss_stats = ("policy_loss", "value_loss", "clipfrac", "value_clipfrac", "approx_kl")

    def __init__(self, config: PolicyConfig, policy: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                 prompts: list[PromptInput], reward: RewardFn | PreTrainedModel, *,
                 reference: PreTrainedModel | None = None, value_head: dict | None = None,
                 state_dir: str | Path | None = None, backend: RolloutBackend | None = None,
                 chat: ChatFormat | None = None):
        self.warm_value_head = value_head
        super().__init__(config, policy, tokenizer, prompts, reward, reference=reference, state_dir=state_dir,
                         backend=backend, chat=chat)

    @property
    def actor_critic(self) -> PolicyWithValueHead:
        """The policy with its value head, unwrapped from accelerate."""
        return self.policy_model

    def _make_model(self, policy: nn.Module) -> PolicyWithValueHead:
        model = PolicyWithValueHead(policy)
        if self.warm_value_head is not None:
            model.value_head.load_state_dict(self.warm_value_head)
        return model

    def _parameter_groups(self, model: PolicyWithValueHead) -> list[dict]:
        return parameter_groups(model, self.config)

    def targets(self, rollout: Rollout, scores: torch.Tensor, kl: torch.Tensor, kl_coef: float) -> PPOTargets:
        """Per-token rewards (-β·KL, the score on the last real token), GAE, whitened advantages."""
        config, mask = self.config, rollout.mask
        rewards = token_rewards(scores, kl, mask, kl_coef)
        advantages, returns = compute_gae(rewards, rollout.values, mask, config.gamma, config.lam)
        explained = explained_variance(rollout.values, returns, mask).item()
        return PPOTargets(whiten(advantages, mask), {"explained_variance": explained}, returns)

    def loss(self, rollout: Rollout, targets: PPOTargets, idx: torch.Tensor, logprobs: torch.Tensor,
             values: torch.Tensor | None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Clipped policy loss plus `vf_coef` times the clipped value loss."""
        mask = rollout.mask[idx]
        pg_loss, clipfrac, approx_kl = policy_loss(logprobs, rollout.logprobs[idx], targets.advantages[idx], mask,
                                                   self.config.clip_range)
        vf_loss, vf_clipfrac = value_loss(values, rollout.values[idx], targets.returns[idx], mask,
                                          self.config.clip_range_value)
        stats = {"policy_loss": pg_loss, "value_loss": vf_loss, "clipfrac": clipfrac, "value_clipfrac": vf_clipfrac,
                 "approx_kl": approx_kl}
        return pg_loss + self.config.vf_coef * vf_loss, stats
