"""PPO for language models (Ziegler et al. 2019, InstructGPT) on torch + transformers + peft + accelerate.

Roles. The actor is the policy (a causal LM). The critic is a scalar value head on the actor's last hidden state,
so one forward pass gives both log-probs and values and no second transformer is trained or stored; the head starts
at zero, so its first gradients do not disturb the policy, and `vf_coef` sets how much the value loss moves the
shared weights. (A separate critic network, as in InstructGPT, doubles the trained weights, optimizer state and
forward passes; with LoRA a critic on frozen base features would be cheap but too weak to fit the returns.)
The reference is frozen: a copy of the starting (SFT) policy in full fine-tuning; with LoRA, the same base with
the adapters disabled, so actor, critic and reference share one copy of the base weights. The reward is a frozen
reward model (`trainers.reward.RewardScorer`, scored on the rollout's own token ids: prompt + response + EOS) or
any `score(prompts, responses) -> (B,)` function, such as the demo's oracle. Rollouts come from a `RolloutBackend`:
Hugging Face `generate` on the live policy (default), or vLLM on a GPU (`trainers.vllm_generation`), whose engine
receives the policy's weights after every update.

One iteration: sample a batch of prompts (left-padded) -> generate (temperature, top-p, cut at EOS) -> store per
token the action, old log-prob, reference log-prob, value and mask -> per-token reward -β·KL plus the score on the
last real token (minus a penalty when there is no EOS) -> GAE (γ, λ), whitened advantages -> `ppo_epochs` passes of
shuffled mini-batches with clipped policy and value losses and an entropy bonus -> update β -> drop the buffer.

    config = PPOConfig(batch_size=16, learning_rate=1e-4)
    reward = lambda prompts, responses: torch.tensor([sentiment_score(r) for r in responses])
    trainer = PPOTrainer(config, load_policy(path), load_tokenizer(path), train_prompts, reward)
    trainer.train(iterations=20)            # runs until iteration 20 (resumes from state_dir if given)
    policy_id = trainer.register_policy(store, parent_id=1, round=1)
"""

from __future__ import annotations

import copy
import json
import os
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Protocol

import torch
from accelerate import Accelerator
from accelerate.utils import gather_object
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import GenerationConfig, PreTrainedModel, PreTrainedTokenizerBase

from storage import Store
from storage.jobs import heartbeat
from storage.metrics import log_metrics
from storage.policies import add_policy

from .kl_control import make_kl_controller
from .models import disable_dropout
from .ppo_config import PPOConfig, PPOSetupError
from .ppo_math import (compute_gae, entropy_from_logits, explained_variance, kl_estimate,
                       logprobs_from_logits, masked_mean, policy_loss, token_rewards, value_loss, whiten)

RewardFn = Callable[[list[str], list[str]], torch.Tensor]  # or a trainers.reward.RewardScorer (imported lazily)
VALUE_HEAD_FILE = "value_head.safetensors"
STATE_FILE = "ppo_state.pt"


class RolloutBackend(Protocol):
    """Generates PPO rollouts from token ids; `sync_weights` is called after every update."""

    def generate_ids(self, query: torch.Tensor, query_mask: torch.Tensor, max_new_tokens: int, temperature: float,
                     top_p: float) -> torch.Tensor:
        """Left-padded prompts (B, P) -> sampled response ids (B, R <= max_new_tokens); what follows an EOS is ignored."""

    def sync_weights(self, policy: nn.Module) -> None: ...


class HFRolloutBackend:
    """Batched sampling with `generate` (KV cache) from the live policy, so no weight sync is needed."""

    def __init__(self, policy: nn.Module, tokenizer: PreTrainedTokenizerBase):
        self.policy = policy
        self.eos, self.pad = tokenizer.eos_token_id, tokenizer.pad_token_id

    def generate_ids(self, query, query_mask, max_new_tokens, temperature, top_p):
        config = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=True, temperature=temperature, top_p=top_p,
                                  top_k=0, eos_token_id=self.eos, pad_token_id=self.pad, suppress_tokens=[self.pad],
                                  use_cache=True)
        output = self.policy.generate(input_ids=query, attention_mask=query_mask, generation_config=config)
        return output[:, query.shape[1]:]  # (B, R)

    def sync_weights(self, policy: nn.Module) -> None:
        pass


class PolicyWithValueHead(nn.Module):
    """The actor and the critic: a causal LM and a zero-initialised scalar head on its last hidden state."""

    def __init__(self, policy: nn.Module):
        super().__init__()
        self.policy = policy
        self.value_head = nn.Linear(policy.config.hidden_size, 1)
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                response_start: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits predicting each response token (B, R, V) and the values of the states before them (B, R)."""
        output = self.policy(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                             output_hidden_states=True, use_cache=False,
                             logits_to_keep=input_ids.shape[1] - response_start + 1)
        hidden = output.hidden_states[-1][:, response_start - 1:-1]  # (B, R, H)
        return output.logits[:, :-1], self.value_head(hidden).squeeze(-1).float()


@dataclass
class Rollout:
    """One iteration's buffer; per-token tensors are (B, R), `mask` 1 on response tokens up to and including EOS."""

    query: torch.Tensor
    query_mask: torch.Tensor
    responses: torch.Tensor
    mask: torch.Tensor
    logprobs: torch.Tensor
    ref_logprobs: torch.Tensor
    values: torch.Tensor
    scores: torch.Tensor
    ended: torch.Tensor
    entropy: torch.Tensor


@dataclass
class PPOResult:
    iterations: int = field(metadata={"help": "Iterations completed in total (including those before a resume)."})
    cancelled: bool = field(metadata={"help": "True when the cancel flag stopped the run early."})
    metrics: dict = field(metadata={"help": "The last iteration's metrics."})


def check_tokenizer(tokenizer: PreTrainedTokenizerBase) -> None:
    if tokenizer.pad_token_id is None:
        raise PPOSetupError("the tokenizer has no pad token; add one distinct from EOS and save it with the policy")
    if tokenizer.pad_token_id == tokenizer.eos_token_id:
        raise PPOSetupError("the tokenizer's pad token is its EOS token, which would hide the EOS PPO rewards; "
                            "add a distinct pad token and save it with the policy")
    if tokenizer.padding_side != "left":
        raise PPOSetupError("the tokenizer pads on the right; set tokenizer.padding_side = 'left' (generation "
                            "appends to the right of the prompt)")


def check_reward_model(scorer, policy: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> None:
    """Each member has one output, the policy's vocabulary and its pad token."""
    check_same_vocabulary(tokenizer, scorer.tokenizer)
    for model in scorer.models:
        if model.config.num_labels != 1:
            raise PPOSetupError(f"the reward model has num_labels={model.config.num_labels}; a reward model needs "
                                "exactly one output (train it with python app.py train-reward)")
        rows, policy_rows = model.get_input_embeddings().num_embeddings, policy.get_input_embeddings().num_embeddings
        if rows != policy_rows:
            raise PPOSetupError(f"the reward model's vocabulary ({rows} tokens) differs from the policy's "
                                f"({policy_rows}); train the reward model from this policy")
        if model.config.pad_token_id != tokenizer.pad_token_id:
            raise PPOSetupError(f"the reward model pads with token {model.config.pad_token_id} but the policy with "
                                f"{tokenizer.pad_token_id}; train the reward model from this policy")


def check_same_vocabulary(tokenizer: PreTrainedTokenizerBase, reward_tokenizer: PreTrainedTokenizerBase) -> None:
    if tokenizer.get_vocab() != reward_tokenizer.get_vocab():
        raise PPOSetupError("the reward model's tokenizer has another vocabulary than the policy's; train the reward "
                            "model from this policy (or one with the same tokenizer)")


def left_pad(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token lists -> left-padded (ids, mask), both (B, P)."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = torch.tensor(r, dtype=torch.long)
        mask[i, width - len(r):] = 1
    return ids, mask


def cut_at_eos(responses: torch.Tensor, eos: int, pad: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Keep each response up to and including its first EOS: (ids with pads after, float mask, ended-with-EOS)."""
    is_eos = responses == eos  # (B, R)
    ended = is_eos.any(dim=1)
    first = torch.where(ended, is_eos.int().argmax(dim=1), responses.shape[1] - 1)  # index of the last real token
    mask = torch.arange(responses.shape[1], device=responses.device)[None, :] <= first[:, None]
    return responses.masked_fill(~mask, pad), mask.float(), ended


def position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions counting real tokens only, so left padding does not shift the prompt."""
    return (attention_mask.cumsum(-1) - 1).clamp(min=0)


class PPOTrainer:
    """Trains `policy` with PPO against `reward`; reports to the store's job when given and resumes from `state_dir`.

    Building a trainer seeds torch's global RNG (from `config.seed` and the process index): sampling draws from it.
    """

    def __init__(self, config: PPOConfig, policy: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                 prompts: list[str], reward: RewardFn | PreTrainedModel, *,
                 reference: PreTrainedModel | None = None, value_head: dict | None = None, store: Store | None = None,
                 job_id: int | None = None, state_dir: str | Path | None = None,
                 backend: RolloutBackend | None = None):
        config.check()
        self.config, self.tokenizer = config, tokenizer
        self.accelerator = Accelerator(cpu=not torch.cuda.is_available(), mixed_precision="bf16" if config.bf16 else "no")
        check_tokenizer(tokenizer)
        if isinstance(reward, PreTrainedModel):
            from .reward import RewardScorer

            if reward.config.pad_token_id is None:
                reward.config.pad_token_id = tokenizer.pad_token_id
            reward = RewardScorer([reward.eval().to(self.accelerator.device)], tokenizer, [(0.0, 1.0)], max_length=1 << 30)
        self.reward_is_model = hasattr(reward, "score_ids")
        if self.reward_is_model:
            check_reward_model(reward, policy, tokenizer)
        self.reward = reward
        self.prompts = list(prompts)
        self.prompt_ids = self._tokenize_prompts(self.prompts, policy)

        torch.manual_seed(config.seed)  # identical initial adapters and head on every process
        if config.lora:
            if reference is not None:
                raise PPOSetupError("with LoRA the reference is the base model with adapters disabled; pass no reference")
            policy = self._with_lora(policy)
        else:
            reference = reference if reference is not None else copy.deepcopy(policy)
            self.reference = reference.eval().requires_grad_(False).to(self.accelerator.device)
        model = PolicyWithValueHead(policy)
        if value_head is not None:
            model.value_head.load_state_dict(value_head)
        if config.gradient_checkpointing:  # HF checkpoints only in train mode: dropout is switched off instead
            if hasattr(policy, "activation_checkpointing_enable"):  # transformers >= 5.2x names it so
                policy.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
            else:
                policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            disable_dropout(model)
        model.eval()  # dropout off: rollout and update must see the same distribution
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=config.learning_rate, eps=config.adam_eps)
        self.model, self.optimizer = self.accelerator.prepare(model, optimizer)
        self.backend = backend or self._default_backend()
        self.kl_controller = make_kl_controller(config.init_kl_coef, config.target_kl, config.kl_horizon)
        self.iteration = 0
        torch.manual_seed(config.seed + 1 + self.accelerator.process_index)  # sampling differs between processes
        self.attach(store, job_id, state_dir)

    def attach(self, store: Store | None, job_id: int | None, state_dir: str | Path | None) -> None:
        """Report to `job_id` in `store` from now on, and save to (resume from, if it holds a state) `state_dir`."""
        self.store, self.job_id = store, job_id
        self.state_dir = Path(state_dir) if state_dir is not None else None
        if self.state_dir is not None and (self.state_dir / STATE_FILE).is_file():
            self.load_state(self.state_dir)

    # ----- setup -----------------------------------------------------------------------------------------------

    @property
    def _unwrapped(self) -> PolicyWithValueHead:
        return self.accelerator.unwrap_model(self.model)

    def _encode(self, prompts: list[str]) -> list[list[int]]:
        """Token ids of each prompt, keeping the last `max_prompt_length`."""
        for i, prompt in enumerate(prompts):
            if not prompt.strip():
                raise PPOSetupError(f"prompt {i + 1} is empty; remove it or give it some text")
        return [r[-self.config.max_prompt_length:] for r in self.tokenizer(prompts)["input_ids"]]

    def _tokenize_prompts(self, prompts: list[str], policy: PreTrainedModel) -> list[list[int]]:
        needed = self.config.batch_size * self.accelerator.num_processes
        if len(prompts) < needed:
            raise PPOSetupError(f"{len(prompts)} training prompts for a batch of {needed}; import more prompts or "
                                "lower the batch size")
        ids = self._encode(prompts)
        context = getattr(policy.config, "max_position_embeddings", None)
        longest = max(len(r) for r in ids)
        if context is not None and longest + self.config.response_length > context:
            raise PPOSetupError(f"a prompt of {longest} tokens plus {self.config.response_length} response tokens "
                                f"exceeds the policy's context of {context}; lower max_prompt_length or response_length")
        return ids

    def _default_backend(self) -> RolloutBackend:
        policy = self._unwrapped.policy
        if self.config.generation_backend == "hf":
            return HFRolloutBackend(policy, self.tokenizer)
        from .vllm_generation import VLLMGenerator

        base = policy.get_base_model() if hasattr(policy, "get_base_model") else policy
        model_dir = Path(base.name_or_path or "")
        if not (model_dir / "config.json").is_file():  # built in memory: give the engine a directory to start from
            model_dir = Path(tempfile.mkdtemp(prefix="ppo-vllm-"))
            plain = copy.deepcopy(policy).merge_and_unload() if self.config.lora else policy
            plain.save_pretrained(model_dir)
            self.tokenizer.save_pretrained(model_dir)
        longest = max(len(ids) for ids in self.prompt_ids)
        backend = VLLMGenerator(model_dir, self.tokenizer, self.config.vllm_gpu_memory_utilization,
                                max_model_len=longest + self.config.response_length, seed=self.config.seed)
        backend.sync_weights(policy)  # adapters or weights that differ from the directory's
        return backend

    def _with_lora(self, policy: PreTrainedModel) -> nn.Module:
        from peft import LoraConfig, PeftModel, get_peft_model

        if isinstance(policy, PeftModel):  # adapters carried over from an earlier run
            return policy
        lora = LoraConfig(r=self.config.lora_r, lora_alpha=self.config.lora_alpha,
                          lora_dropout=self.config.lora_dropout, target_modules=self.config.lora_target_modules,
                          task_type="CAUSAL_LM")
        return get_peft_model(policy, lora)

    # ----- one iteration -----------------------------------------------------------------------------------------

    def _batch_indices(self, iteration: int) -> list[int]:
        """This process's prompts for an iteration: epochs of seeded permutations, split across processes."""
        per_iteration = self.config.batch_size * self.accelerator.num_processes
        per_epoch = len(self.prompts) // per_iteration
        epoch, k = divmod(iteration, per_epoch)
        order = torch.randperm(len(self.prompts), generator=torch.Generator().manual_seed(self.config.seed * 100003 + epoch))
        start = k * per_iteration + self.accelerator.process_index * self.config.batch_size
        return order[start:start + self.config.batch_size].tolist()

    def _logits_to_logprobs(self, logits: torch.Tensor) -> torch.Tensor:
        """Temperature-scaled logits with the pad token ruled out, as the sampler saw them."""
        logits = logits.float() / self.config.temperature
        return logits.index_fill(-1, torch.tensor([self.tokenizer.pad_token_id], device=logits.device), -1e9)

    def _reference_logprobs(self, input_ids, attention_mask, positions, response_start, responses) -> torch.Tensor:
        keep = input_ids.shape[1] - response_start + 1
        if self.config.lora:
            with self._unwrapped.policy.disable_adapter():
                logits = self._unwrapped.policy(input_ids=input_ids, attention_mask=attention_mask,
                                                position_ids=positions, logits_to_keep=keep).logits
        else:
            logits = self.reference(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions,
                                    logits_to_keep=keep).logits
        return logprobs_from_logits(self._logits_to_logprobs(logits[:, :-1]), responses)

    def _score(self, prompts, query, query_mask, responses, mask, ended) -> torch.Tensor:
        if self.reward_is_model:  # prompt + response + EOS, as the reward model was trained
            eos_slot = mask.sum(dim=1).long() * (~ended)  # where a response without EOS gets one appended
            extended = torch.cat([responses, torch.full_like(responses[:, :1], self.tokenizer.pad_token_id)], dim=1)
            extended_mask = torch.cat([mask.long(), torch.zeros_like(mask[:, :1], dtype=torch.long)], dim=1)
            rows = torch.nonzero(~ended).squeeze(1)
            extended[rows, eos_slot[rows]] = self.tokenizer.eos_token_id
            extended_mask[rows, eos_slot[rows]] = 1
            scores = self.reward.score_ids(torch.cat([query, extended], dim=1), torch.cat([query_mask, extended_mask], dim=1))
            return scores.float().to(query.device)
        kept = [row[m.bool()].tolist() for row, m in zip(responses, mask)]
        texts = self.tokenizer.batch_decode(kept, skip_special_tokens=True)
        return torch.as_tensor(self.reward(prompts, texts), dtype=torch.float32).to(query.device)

    @torch.no_grad()
    def rollout(self, prompts: list[str], prompt_ids: list[list[int]]) -> Rollout:
        """Sample one response per prompt and record everything the update needs."""
        device = self.accelerator.device
        query, query_mask = (t.to(device) for t in left_pad(prompt_ids, self.tokenizer.pad_token_id))
        with self.accelerator.autocast():
            raw = self.backend.generate_ids(query, query_mask, self.config.response_length, self.config.temperature,
                                            self.config.top_p)
            responses, mask, ended = cut_at_eos(raw, self.tokenizer.eos_token_id, self.tokenizer.pad_token_id)
            input_ids = torch.cat([query, responses], dim=1)  # (B, P + R)
            attention_mask = torch.cat([query_mask, mask.long()], dim=1)
            positions = position_ids(attention_mask)
            start = query.shape[1]
            logits, values = self._unwrapped(input_ids, attention_mask, positions, start)
            logits = self._logits_to_logprobs(logits)
            logprobs = logprobs_from_logits(logits, responses)
            entropy = entropy_from_logits(logits)
            ref_logprobs = self._reference_logprobs(input_ids, attention_mask, positions, start, responses)
            scores = self._score(prompts, query, query_mask, responses, mask, ended)
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
                logits = self._logits_to_logprobs(logits)
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
        self.backend.sync_weights(self._unwrapped.policy)
        metrics["ppo/kl_coef"] = kl_coef
        metrics["ppo/episodes_per_s"] = config.batch_size * self.accelerator.num_processes / (time.perf_counter() - started)
        return metrics

    # ----- the run ---------------------------------------------------------------------------------------------

    def _cancelled(self, iterations: int, report_progress: bool) -> bool:
        """Heartbeat (with phase and progress if asked) and read the cancel flag; the same answer on every process."""
        flag = [False]
        if self.store is not None and self.job_id is not None and self.accelerator.is_main_process:
            progress = dict(phase=f"ppo {self.iteration}/{iterations}", progress=self.iteration / max(1, iterations))
            flag = [heartbeat(self.store, self.job_id, **(progress if report_progress else {}))]
        if self.accelerator.num_processes > 1:
            torch.distributed.broadcast_object_list(flag, src=0)
        return bool(flag[0])

    def train(self, iterations: int, step_offset: int = 0, on_iteration: Callable[[int, dict], None] | None = None,
              report_progress: bool = True) -> PPOResult:
        """Run until `iterations` iterations are done in total, checking the cancel flag before each one.

        Metrics go to the store at step `step_offset + iteration` (1-based); the job's phase and progress are this
        run's unless `report_progress` is off (a caller with its own progress, such as the loop); the state is saved
        every `save_every` iterations, at the end and on cancel, when a `state_dir` was given.
        """
        metrics: dict = {}
        while self.iteration < iterations:
            if self._cancelled(iterations, report_progress):
                self._save_if_configured()
                return PPOResult(self.iteration, True, metrics)
            metrics = self.step()
            self.iteration += 1
            if self.store is not None and self.job_id is not None and self.accelerator.is_main_process:
                log_metrics(self.store, self.job_id, step_offset + self.iteration, metrics)
            if on_iteration is not None:
                on_iteration(self.iteration, metrics)
            if self.iteration % self.config.save_every == 0 or self.iteration == iterations:
                self._save_if_configured()
        return PPOResult(self.iteration, False, metrics)

    @torch.no_grad()
    def evaluate(self, prompts: list[str], score: RewardFn, seed: int = 0) -> dict[str, float]:
        """Mean `score` of one sample per prompt and mean sequence KL (k1) to the reference; the RNG is left as it was."""
        ids = self._encode(prompts)
        scores, kls, ended = [], [], []
        devices = [self.accelerator.device] if self.accelerator.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            for start in range(0, len(prompts), self.config.batch_size):
                chunk = slice(start, start + self.config.batch_size)
                rollout = self.rollout(prompts[chunk], ids[chunk])
                kept = [r[m.bool()].tolist() for r, m in zip(rollout.responses, rollout.mask)]
                texts = self.tokenizer.batch_decode(kept, skip_special_tokens=True)
                scores.append(torch.as_tensor(score(prompts[chunk], texts), dtype=torch.float32))
                kls.append(((rollout.logprobs - rollout.ref_logprobs) * rollout.mask).sum(dim=1).cpu())
                ended.append(rollout.ended.float().cpu())
        return {"score": torch.cat(scores).mean().item(), "kl": torch.cat(kls).mean().item(),
                "eos_rate": torch.cat(ended).mean().item()}

    # ----- state and checkpoints ---------------------------------------------------------------------------------

    def _save_if_configured(self) -> None:
        if self.state_dir is not None:
            self.save_state(self.state_dir)

    def save_state(self, state_dir: str | Path) -> None:
        """Write trainable weights, optimizer, β, iteration and every process's RNG to `state_dir/ppo_state.pt`."""
        rng = gather_object([torch.get_rng_state()]) if self.accelerator.num_processes > 1 else [torch.get_rng_state()]
        if self.accelerator.is_main_process:
            state_dir = Path(state_dir)
            state_dir.mkdir(parents=True, exist_ok=True)
            trainable = {n: p.detach().cpu() for n, p in self._unwrapped.named_parameters() if p.requires_grad}
            state = {"model": trainable, "optimizer": self.optimizer.state_dict(), "rng": rng,
                     "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
                     "kl_controller": self.kl_controller.state_dict(), "iteration": self.iteration,
                     "config": asdict(self.config)}
            fd, tmp = tempfile.mkstemp(dir=state_dir, prefix=".state-", suffix=".tmp")
            os.close(fd)
            torch.save(state, tmp)
            os.replace(tmp, state_dir / STATE_FILE)  # never a half-written state
        self.accelerator.wait_for_everyone()

    def load_state(self, state_dir: str | Path) -> None:
        """Continue exactly where `save_state` left off."""
        state = torch.load(Path(state_dir) / STATE_FILE, map_location="cpu", weights_only=True)
        model = self._unwrapped
        missing = model.load_state_dict(state["model"], strict=False).missing_keys
        trainable = {n for n, p in model.named_parameters() if p.requires_grad}
        if trainable & set(missing) or set(state["model"]) - trainable:
            raise PPOSetupError(f"the saved PPO state in {state_dir} was made with other settings (LoRA or model); "
                                "resume with the same settings or start a new run")
        self.optimizer.load_state_dict(state["optimizer"])
        self.kl_controller.load_state_dict(state["kl_controller"])
        self.iteration = int(state["iteration"])
        rank = self.accelerator.process_index
        if rank < len(state["rng"]):
            torch.set_rng_state(state["rng"][rank])
        if state["cuda_rng"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda_rng"])

    def save_pretrained(self, path: str | Path) -> None:
        """A plain Hugging Face policy directory (LoRA merged; its adapter also kept in `adapter/`) + value head."""
        path = Path(path)
        model = self._unwrapped
        policy = model.policy
        if self.config.lora:
            policy.save_pretrained(path / "adapter")
            policy = copy.deepcopy(policy).merge_and_unload()
        policy.save_pretrained(path)
        self.tokenizer.save_pretrained(path)
        save_file({k: v.detach().cpu().contiguous() for k, v in model.value_head.state_dict().items()},
                  path / VALUE_HEAD_FILE)
        (path / "ppo_config.json").write_text(json.dumps({"iterations": self.iteration, **asdict(self.config)}, indent=2))

    def register_policy(self, store: Store, parent_id: int | None, round: int = 0, note: str | None = None) -> int | None:
        """Save the policy under the store's data dir (temp dir, then rename) and register it; returns its id.

        Returns None on processes other than the main one.
        """
        policy_id = None
        if self.accelerator.is_main_process:
            root = store.data_dir / "policies"
            root.mkdir(parents=True, exist_ok=True)
            final = root / f"ppo-r{round}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
            tmp = Path(tempfile.mkdtemp(dir=root, prefix=".tmp-"))
            self.save_pretrained(tmp)
            os.rename(tmp, final)
            policy_id = add_policy(store, str(final), parent_id=parent_id, round=round,
                                   note=note or f"PPO, {self.iteration} iterations")
        self.accelerator.wait_for_everyone()
        return policy_id


def load_value_head(policy_dir: str | Path) -> dict | None:
    """The value head saved beside a PPO policy, if any (a warm critic for the next run)."""
    path = Path(policy_dir) / VALUE_HEAD_FILE
    return load_file(path) if path.is_file() else None

