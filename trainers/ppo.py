"""PPO for language models (Ziegler et al. 2019, InstructGPT) on torch + transformers + peft + accelerate.

Roles. The actor is the policy (a causal LM). The critic is a scalar value head on the actor's last hidden state,
so one forward pass gives both log-probs and values and no second transformer is trained or stored; the head starts
at zero, so its first gradients do not disturb the policy, and `vf_coef` sets how much the value loss moves the
shared weights. (A separate critic network, as in InstructGPT, doubles the trained weights, optimizer state and
forward passes; with LoRA a critic on frozen base features would be cheap but too weak to fit the returns.)
The reference is frozen: a copy of the starting (SFT) policy in full fine-tuning; with LoRA, the same base with
the adapters disabled, so actor, critic and reference share one copy of the base weights. The reward is a frozen
reward model (`trainers.reward_scorer.RewardScorer`, which reads the prompt and the decoded response in its own
format, exactly as it was trained) or any `score(prompts, responses) -> (B,)` function, such as the demo's oracle.
Prompts are text or conversations, turned into ids by the policy's `ChatFormat` (its chat template, if any); any of
its end ids ends a response; nothing is truncated (a prompt that does not fit the context with the response length
is refused). Rollouts come from a `RolloutBackend`:
Hugging Face `generate` on the live policy (default), or vLLM on a GPU (`trainers.vllm_generation`), whose engine
receives the policy's weights after every update.

One iteration: sample a batch of prompts (left-padded) -> generate (temperature, top-p, top-k, cut at the first end
id) -> store per
token the action, old log-prob, reference log-prob, value and mask -> per-token reward -β·KL plus the score on the
last real token (minus a penalty when there is no EOS) -> GAE (γ, λ), whitened advantages -> `ppo_epochs` passes of
shuffled mini-batches with clipped policy and value losses and an entropy bonus -> update β -> drop the buffer.

    config = PPOConfig(batch_size=16, learning_rate=1e-4)
    reward = lambda prompts, responses: torch.tensor([sentiment_score(r) for r in responses])
    trainer = PPOTrainer(config, load_policy(path), load_tokenizer(path), train_prompts, reward)
    trainer.train(iterations=20, reporter=reporter)   # until iteration 20; JobCancelled when the reporter says stop
    trainer.save_pretrained(path)                     # a plain HF policy directory (the job layer registers it)

The trainer never touches the store: it reports through a `trainers.reporting.Reporter` the job layer builds
(`trainers.ppo_job`). Rollouts live in `ppo_rollout`, the setup checks in `ppo_setup`, the state and the saved
policy in `ppo_checkpoint`, the math in `ppo_math`.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
from accelerate import Accelerator
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from labeling.conversations import PromptInput

from .chat_format import ChatFormat
from .generation import left_pad, model_end_ids
from .kl_control import make_kl_controller
from .ppo_checkpoint import has_state, load_state, save_policy, save_state
from .ppo_config import PPOConfig, PPOSetupError
from .ppo_math import (compute_gae, entropy_from_logits, explained_variance, kl_estimate,
                       logprobs_from_logits, masked_mean, policy_loss, token_rewards, value_loss, whiten)
from .ppo_rollout import (PolicyWithValueHead, Rollout, RolloutBackend, cut_at_end, make_rollout_backend,
                          position_ids)
from .ppo_setup import check_reward_model, check_tokenizer, enable_activation_checkpointing, with_lora
from .reporting import JobCancelled, Reporter, stop_requested

RewardFn = Callable[[list[PromptInput], list[str]], torch.Tensor]  # e.g. a trainers.reward_scorer.RewardScorer


@dataclass
class PPOResult:
    iterations: int = field(metadata={"help": "Iterations completed in total (including those before a resume)."})
    metrics: dict = field(metadata={"help": "The last iteration's metrics."})


def parameter_groups(model: PolicyWithValueHead, config: PPOConfig) -> list[dict]:
    """The optimiser's groups: the policy's trainable weights at `learning_rate`, the value head at `value_lr`."""
    policy = [p for p in model.policy.parameters() if p.requires_grad]
    value_lr = config.value_lr if config.value_lr is not None else config.learning_rate
    return [{"params": policy}, {"params": list(model.value_head.parameters()), "lr": value_lr}]


class PPOTrainer:
    """Trains `policy` with PPO against `reward`, reporting through a reporter; saves to and resumes from `state_dir`.

    Building a trainer seeds torch's global RNG (from `config.seed` and the process index): sampling draws from it.
    """

    def __init__(self, config: PPOConfig, policy: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                 prompts: list[PromptInput], reward: RewardFn | PreTrainedModel, *,
                 reference: PreTrainedModel | None = None, value_head: dict | None = None,
                 state_dir: str | Path | None = None, backend: RolloutBackend | None = None,
                 chat: ChatFormat | None = None):
        config.check()
        self.config, self.tokenizer = config, tokenizer
        self.chat = chat or ChatFormat.from_tokenizer(tokenizer, model_end_ids(policy))
        self.accelerator = Accelerator(cpu=not torch.cuda.is_available(), mixed_precision="bf16" if config.bf16 else "no")
        check_tokenizer(tokenizer)
        if isinstance(reward, PreTrainedModel):  # a bare reward model reading the policy's format
            from .reward_scorer import RewardScorer

            if reward.config.pad_token_id is None:
                reward.config.pad_token_id = tokenizer.pad_token_id
            reward = RewardScorer([reward.eval().to(self.accelerator.device)], self.chat, tokenizer.pad_token_id,
                                  [(0.0, 1.0)])
        check_reward_model(reward)
        self.reward = reward
        self.prompts = list(prompts)
        self.prompt_ids = self._tokenize_prompts(self.prompts, policy)

        torch.manual_seed(config.seed)  # identical initial adapters and head on every process
        if config.lora:
            if reference is not None:
                raise PPOSetupError("with LoRA the reference is the base model with adapters disabled; pass no reference")
            policy = with_lora(policy, config)
        else:
            reference = reference if reference is not None else copy.deepcopy(policy)
            self.reference = reference.eval().requires_grad_(False).to(self.accelerator.device)
        model = PolicyWithValueHead(policy)
        if value_head is not None:
            model.value_head.load_state_dict(value_head)
        if config.gradient_checkpointing:
            enable_activation_checkpointing(policy, model)
        model.eval()  # dropout off: rollout and update must see the same distribution
        optimizer = torch.optim.AdamW(parameter_groups(model, config), lr=config.learning_rate, eps=config.adam_eps)
        self.model, self.optimizer = self.accelerator.prepare(model, optimizer)
        self.backend = backend or make_rollout_backend(self.actor_critic.policy, tokenizer, self.chat.end_ids, config,
                                                       max(len(ids) for ids in self.prompt_ids))
        self.kl_controller = make_kl_controller(config.init_kl_coef, config.target_kl, config.kl_horizon)
        self.iteration = 0
        torch.manual_seed(config.seed + 1 + self.accelerator.process_index)  # sampling differs between processes
        self.use_state_dir(state_dir)

    def use_state_dir(self, state_dir: str | Path | None) -> None:
        """Save the resumable state to `state_dir` from now on; resume from it now if it holds one."""
        self.state_dir = Path(state_dir) if state_dir is not None else None
        if self.state_dir is not None and has_state(self.state_dir):
            load_state(self, self.state_dir)

    # ----- setup -----------------------------------------------------------------------------------------------

    @property
    def actor_critic(self) -> PolicyWithValueHead:
        """The policy with its value head, unwrapped from accelerate."""
        return self.accelerator.unwrap_model(self.model)

    def _encode(self, prompts: list[PromptInput]) -> list[list[int]]:
        """Token ids of each prompt, whole (the policy's chat format)."""
        for i, prompt in enumerate(prompts):
            if isinstance(prompt, str) and not prompt.strip():
                raise PPOSetupError(f"prompt {i + 1} is empty; remove it or give it some text")
        return self.chat.prompts_ids(prompts)

    def _tokenize_prompts(self, prompts: list[PromptInput], policy: PreTrainedModel) -> list[list[int]]:
        needed = self.config.batch_size * self.accelerator.num_processes
        if len(prompts) < needed:
            raise PPOSetupError(f"{len(prompts)} training prompts for a batch of {needed}; import more prompts or "
                                "lower the batch size")
        ids = self._encode(prompts)
        context = getattr(policy.config, "max_position_embeddings", None)
        for number, row in enumerate(ids, start=1):
            if context is not None and len(row) + self.config.response_length > context:
                raise PPOSetupError(f"prompt {number} has {len(row)} tokens, which with {self.config.response_length} "
                                    f"response tokens exceeds the policy's context of {context}; nothing is cut, so "
                                    "shorten or remove the prompt, or lower response_length")
        return ids

    # ----- one iteration -----------------------------------------------------------------------------------------

    def _batch_indices(self, iteration: int) -> list[int]:
        """This process's prompts for an iteration: epochs of seeded permutations, split across processes."""
        per_iteration = self.config.batch_size * self.accelerator.num_processes
        per_epoch = len(self.prompts) // per_iteration
        epoch, k = divmod(iteration, per_epoch)
        order = torch.randperm(len(self.prompts), generator=torch.Generator().manual_seed(self.config.seed * 100003 + epoch))
        start = k * per_iteration + self.accelerator.process_index * self.config.batch_size
        return order[start:start + self.config.batch_size].tolist()

    def _sampling_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """Temperature-scaled logits with the pad token ruled out, as the sampler saw them."""
        logits = logits.float() / self.config.temperature
        return logits.index_fill(-1, torch.tensor([self.tokenizer.pad_token_id], device=logits.device), -1e9)

    def _reference_logprobs(self, input_ids, attention_mask, positions, response_start, responses) -> torch.Tensor:
        keep = input_ids.shape[1] - response_start + 1
        if self.config.lora:
            with self.actor_critic.policy.disable_adapter():
                logits = self.actor_critic.policy(input_ids=input_ids, attention_mask=attention_mask,
                                                  position_ids=positions, logits_to_keep=keep).logits
        else:
            logits = self.reference(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions,
                                    logits_to_keep=keep).logits
        return logprobs_from_logits(self._sampling_logits(logits[:, :-1]), responses)

    def response_texts(self, responses: torch.Tensor, mask: torch.Tensor) -> list[str]:
        """The sampled responses as text (what people label and the reward reads), end ids left out."""
        return [self.chat.decode(row[m.bool()].tolist()) for row, m in zip(responses, mask)]

    def _score(self, prompts: list[PromptInput], responses: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The reward of each (prompt, decoded response), as the reward model was trained to read them."""
        scores = self.reward(prompts, self.response_texts(responses, mask))
        return torch.as_tensor(scores, dtype=torch.float32).to(responses.device)

    @torch.no_grad()
    def rollout(self, prompts: list[PromptInput], prompt_ids: list[list[int]]) -> Rollout:
        """Sample one response per prompt and record everything the update needs."""
        device = self.accelerator.device
        query, query_mask = (t.to(device) for t in left_pad(prompt_ids, self.tokenizer.pad_token_id))
        with self.accelerator.autocast():
            raw = self.backend.generate_ids(query, query_mask, self.config.response_length, self.config.temperature,
                                            self.config.top_p, self.config.top_k)
            responses, mask, ended = cut_at_end(raw, self.chat.end_ids, self.tokenizer.pad_token_id)
            input_ids = torch.cat([query, responses], dim=1)  # (B, P + R)
            attention_mask = torch.cat([query_mask, mask.long()], dim=1)
            positions = position_ids(attention_mask)
            start = query.shape[1]
            logits, values = self.actor_critic(input_ids, attention_mask, positions, start)
            logits = self._sampling_logits(logits)
            logprobs = logprobs_from_logits(logits, responses)
            entropy = entropy_from_logits(logits)
            ref_logprobs = self._reference_logprobs(input_ids, attention_mask, positions, start, responses)
            scores = self._score(prompts, responses, mask)
        return Rollout(query, query_mask, responses, mask, logprobs * mask, ref_logprobs * mask, values * mask,
                       scores, ended, entropy * mask)

    def _update(self, rollout: Rollout, advantages: torch.Tensor, returns: torch.Tensor) -> dict[str, float]:
        """PPO epochs over shuffled mini-batches; returns mean losses and statistics."""
        self.model.train(self.config.gradient_checkpointing)  # dropout is off either way
        try:
            return self._epochs(rollout, advantages, returns)
        finally:
            self.model.eval()

    def _epochs(self, rollout: Rollout, advantages: torch.Tensor, returns: torch.Tensor) -> dict[str, float]:
        config = self.config
        input_ids = torch.cat([rollout.query, rollout.responses], dim=1)
        attention_mask = torch.cat([rollout.query_mask, rollout.mask.long()], dim=1)
        positions = position_ids(attention_mask)
        start, size = rollout.query.shape[1], config.batch_size // config.num_mini_batches
        params = [p for p in self.model.parameters() if p.requires_grad]
        sums = {"policy_loss": 0.0, "value_loss": 0.0, "clipfrac": 0.0, "value_clipfrac": 0.0, "approx_kl": 0.0}
        steps = 0
        for _ in range(config.ppo_epochs):
            order = torch.randperm(config.batch_size)
            for k in range(config.num_mini_batches):
                idx = order[k * size:(k + 1) * size].to(input_ids.device)
                mask = rollout.mask[idx]
                with self.accelerator.autocast():
                    logits, values = self.model(input_ids[idx], attention_mask[idx], positions[idx], start)
                logits = self._sampling_logits(logits)
                logprobs = logprobs_from_logits(logits, rollout.responses[idx])
                pg_loss, clipfrac, approx_kl = policy_loss(logprobs, rollout.logprobs[idx], advantages[idx], mask,
                                                           config.clip_range)
                vf_loss, vf_clipfrac = value_loss(values, rollout.values[idx], returns[idx], mask,
                                                  config.clip_range_value)
                loss = pg_loss + config.vf_coef * vf_loss
                if config.ent_coef:
                    loss = loss - config.ent_coef * masked_mean(entropy_from_logits(logits), mask)
                if config.max_approx_kl is not None:  # never step from a policy already too far from the old one
                    mean_kl = self.accelerator.reduce(approx_kl.reshape(1), reduction="mean").item()
                    if mean_kl > config.max_approx_kl:  # the same decision on every process
                        return {name: total / max(1, steps) for name, total in sums.items()}
                self.optimizer.zero_grad(set_to_none=True)
                self.accelerator.backward(loss)
                self.accelerator.clip_grad_norm_(params, config.max_grad_norm)
                self.optimizer.step()
                for name, value in (("policy_loss", pg_loss), ("value_loss", vf_loss), ("clipfrac", clipfrac),
                                    ("value_clipfrac", vf_clipfrac), ("approx_kl", approx_kl)):
                    sums[name] += value.item()
                steps += 1
        return {name: total / steps for name, total in sums.items()}

    def step(self) -> dict[str, float]:
        """One PPO iteration (rollout, advantages, update, β update); returns its metrics averaged over processes."""
        started = time.perf_counter()
        config = self.config
        indices = self._batch_indices(self.iteration)
        rollout = self.rollout([self.prompts[i] for i in indices], [self.prompt_ids[i] for i in indices])
        mask = rollout.mask
        scores = rollout.scores - config.missing_eos_penalty * (~rollout.ended).float()
        kl = kl_estimate(rollout.logprobs, rollout.ref_logprobs, config.kl_estimator) * mask
        kl_coef = self.kl_controller.value
        rewards = token_rewards(scores, kl, mask, kl_coef)
        advantages, returns = compute_gae(rewards, rollout.values, mask, config.gamma, config.lam)
        advantages = whiten(advantages, mask)
        stats = self._update(rollout, advantages, returns)
        local = {
            "ppo/score": rollout.scores.mean().item(),
            "ppo/kl": kl.sum(dim=1).mean().item(),
            "ppo/entropy": masked_mean(rollout.entropy, mask).item(),
            "ppo/policy_loss": stats["policy_loss"],
            "ppo/value_loss": stats["value_loss"],
            "ppo/clipfrac": stats["clipfrac"],
            "ppo/value_clipfrac": stats["value_clipfrac"],
            "ppo/approx_kl": stats["approx_kl"],
            "ppo/explained_variance": explained_variance(rollout.values, returns, mask).item(),
            "ppo/response_length": mask.sum(dim=1).mean().item(),
            "ppo/eos_rate": rollout.ended.float().mean().item(),
        }
        del rollout, advantages, returns, rewards  # the buffer is purged after each update
        values = torch.tensor(list(local.values()), device=self.accelerator.device)
        metrics = dict(zip(local, self.accelerator.reduce(values, reduction="mean").tolist()))
        self.kl_controller.update(metrics["ppo/kl"], config.batch_size * self.accelerator.num_processes)
        self.backend.sync_weights(self.actor_critic.policy)
        metrics["ppo/kl_coef"] = kl_coef
        metrics["ppo/episodes_per_s"] = config.batch_size * self.accelerator.num_processes / (time.perf_counter() - started)
        return metrics

    # ----- the run ---------------------------------------------------------------------------------------------

    def train(self, iterations: int, reporter: Reporter | None = None) -> PPOResult:
        """Run until `iterations` iterations are done in total (counting those before a resume).

        The reporter hears the progress when the run starts and after every iteration, and is asked before each
        iteration whether to stop (the main process decides for all); iteration i's metrics go to
        `reporter.on_step(i, metrics)`. The state is saved to `state_dir` (when given) every `save_every`
        iterations, at the end, and on a stop, which then raises JobCancelled.
        """
        reporter = reporter or Reporter()
        metrics: dict = {}
        reporter.progress(self.iteration, iterations)
        while self.iteration < iterations:
            if stop_requested(reporter):
                self._save_if_configured()
                raise JobCancelled(f"PPO was stopped after {self.iteration} of {iterations} iterations; resume the "
                                   "job to continue from there")
            metrics = self.step()
            self.iteration += 1
            reporter.on_step(self.iteration, metrics)
            reporter.progress(self.iteration, iterations)
            if self.iteration % self.config.save_every == 0 or self.iteration == iterations:
                self._save_if_configured()
        return PPOResult(self.iteration, metrics)

    @torch.no_grad()
    def evaluate(self, prompts: list[PromptInput], score: RewardFn, seed: int = 0) -> dict[str, float]:
        """Mean `score` of one sample per prompt and mean sequence KL (k1) to the reference; the RNG is left as it was."""
        ids = self._encode(prompts)
        scores, kls, ended = [], [], []
        devices = [self.accelerator.device] if self.accelerator.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            for start in range(0, len(prompts), self.config.batch_size):
                chunk = slice(start, start + self.config.batch_size)
                rollout = self.rollout(prompts[chunk], ids[chunk])
                texts = self.response_texts(rollout.responses, rollout.mask)
                scores.append(torch.as_tensor(score(prompts[chunk], texts), dtype=torch.float32))
                kls.append(((rollout.logprobs - rollout.ref_logprobs) * rollout.mask).sum(dim=1).cpu())
                ended.append(rollout.ended.float().cpu())
        return {"score": torch.cat(scores).mean().item(), "kl": torch.cat(kls).mean().item(),
                "eos_rate": torch.cat(ended).mean().item()}

    # ----- state and checkpoints ---------------------------------------------------------------------------------

    def _save_if_configured(self) -> None:
        if self.state_dir is not None:
            save_state(self, self.state_dir)

    def save_pretrained(self, path: str | Path) -> None:
        """A plain Hugging Face policy directory (LoRA merged; its adapter also in `adapter/`) with the value head."""
        save_policy(self, path)
