"""What PPO and GRPO share: one policy optimiser on torch + transformers + peft + accelerate. An algorithm
(`trainers.policy.ppo.PPOTrainer`, `trainers.policy.grpo.GRPOTrainer`) supplies only its trained model (with or
without a critic, `trainers.policy.modules`), its targets (a `Targets` dataclass) and its mini-batch loss.

Shared here: the prompts (text or conversations, turned into ids by the policy's `ChatFormat`; nothing is truncated: a
prompt that does not fit the context with the response length is refused), the reference (with LoRA the base with
adapters disabled; in full fine-tuning a frozen copy of the starting policy), the reward (a frozen reward model,
`trainers.reward.scorer.RewardScorer`, which reads the prompt and the decoded response in its own format, exactly as it
was trained, or any `score(prompts, responses) -> (B,)` function such as the demo's oracle), the rollout (a
`RolloutBackend`: the studio's sampler on the live policy or vLLM on a GPU, cut at the first end id, old and
reference log-probs, scores), the epochs of shuffled mini-batches with gradient clipping (never splitting a prompt's
group), the missing-EOS penalty, the adaptive β controller, the progress and cancel protocol of `trainers.reporting`,
the resumable state and the saved policy (`checkpoint`).

One iteration (`step`): this process's `batch_size` prompts, each `config.episodes_per_prompt` times in consecutive
rows -> rollout -> per-token KL to the reference -> the algorithm's targets -> epochs of mini-batches of its loss ->
metrics averaged over processes, named `{algorithm}/...` -> update β -> sync the rollout backend's weights.

    config = PolicyConfig(algorithm="grpo", group_size=4, batch_size=8)
    trainer = GRPOTrainer(config, policy, tokenizer, prompts, reward)
    trainer.train(iterations=20, reporter=reporter)   # until iteration 20; JobCancelled when the reporter says stop
    trainer.save_pretrained(path)                     # a plain HF policy directory (the job layer registers it)
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from accelerate import Accelerator
from labeling.queue.synthetic import load_scorer
from labeling.transfer.conversations import PromptInput

from ..models.chat_format import ChatFormat
from ..models.finite import check_finite_scores, check_finite_step
from ..models.generation import left_pad, model_end_ids
from ..reporting import JobCancelled, Reporter, stop_requested
from ..reward.functions import RewardFunctionError
from ..reward.shared_base import SharedBaseReward
from .checkpoint import has_state, load_state, save_policy, save_state
from .config import Algorithm, PolicyConfig, PolicySetupError
from .kl_control import make_kl_controller
from .modules import PolicyModel, response_pass
from .ppo_math import (
    correlation,
    entropy_from_logits,
    kl_estimate,
    masked_mean,
    penalise_missing_eos,
    sampler_logprobs,
    sampling_logits,
)
from .rollout import HFRolloutBackend, Rollout, RolloutBackend, cut_at_end, make_rollout_backend, position_ids
from .setup import check_reward_model, check_tokenizer, enable_activation_checkpointing, with_lora

RewardFn = Callable[[list[PromptInput], list[str]], torch.Tensor]  # e.g. a trainers.reward.scorer.RewardScorer


def reward_function_metrics(reward) -> dict[str, float]:
    """Per reward function of the latest rollout, its mean and pass rate (`<label>/mean`, `<label>/pass_rate`), when
    the reward holds functions (`trainers.reward.functions`); none otherwise."""
    metrics = getattr(reward, "metrics", None)
    return metrics() if callable(metrics) else {}


@dataclass
class Targets:
    """What an algorithm's loss reads besides the rollout, computed once per rollout before the update: per-row
    advantages, and statistics already known then (logged with the iteration's metrics)."""

    advantages: torch.Tensor  # (B,) or (B, R)
    metrics: dict[str, float]


@dataclass
class TrainResult:
    iterations: int = field(metadata={"help": "Iterations completed in total (including those before a resume)."})
    metrics: dict = field(metadata={"help": "The last iteration's metrics."})


class PolicyOptimizer:
    """Trains `policy` against `reward`, reporting through a reporter; saves to and resumes from `state_dir`.

    Building a trainer seeds torch's global RNG (from `config.seed` and the process index): sampling draws from it.
    This base runs the rollout, the epochs and the mini-batches; an algorithm sets `algorithm` and `loss_stats` (the
    names its loss reports) and supplies its model (`_make_model`), its targets (`targets`) and its loss (`loss`).
    """

    algorithm: Algorithm
    loss_stats: tuple[str, ...]

    def __init__(self, config: PolicyConfig, policy: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                 prompts: list[PromptInput], reward: RewardFn | PreTrainedModel, *,
                 reference: PreTrainedModel | None = None, state_dir: str | Path | None = None,
                 backend: RolloutBackend | None = None, chat: ChatFormat | None = None):
        if config.algorithm != self.algorithm:
            raise PolicySetupError(f"{type(self).__name__} runs algorithm {self.algorithm.value!r} but the settings "
                                   f"say {config.algorithm!r}; set algorithm={self.algorithm.value!r}")
        config.check()
        self.config, self.tokenizer = config, tokenizer
        self.chat = chat or ChatFormat.from_tokenizer(tokenizer, model_end_ids(policy))
        self.accelerator = Accelerator(cpu=not torch.cuda.is_available(),
                                       mixed_precision="bf16" if config.bf16 else "no")
        check_tokenizer(tokenizer)
        if isinstance(reward, PreTrainedModel):  # a bare reward model reading the policy's format
            from ..reward.scorer import RewardScorer

            if reward.config.pad_token_id is None:
                reward.config.pad_token_id = tokenizer.pad_token_id
            reward = RewardScorer([reward.eval().to(self.accelerator.device)], self.chat, tokenizer.pad_token_id,
                                  [(0.0, 1.0)])
        check_reward_model(reward)
        self.reward = reward
        self.monitor = load_scorer(config.monitor_oracle) if config.monitor_oracle else None
        self.monitored: list[float] = []  # the monitor's scores of the latest rollout
        self.prompts = list(prompts)
        self.prompt_ids = self._tokenize_prompts(self.prompts, policy)

        torch.manual_seed(config.seed)  # identical initial adapters and head on every process
        if config.lora:
            if reference is not None:
                raise PolicySetupError("with LoRA the reference is the base model with adapters disabled; pass no "
                                       "reference")
            policy = with_lora(policy, config)
        else:
            reference = reference if reference is not None else copy.deepcopy(policy)
            self.reference = reference.eval().requires_grad_(False).to(self.accelerator.device)
        model = self._make_model(policy)
        if config.gradient_checkpointing:
            enable_activation_checkpointing(policy, model)
        model.eval()  # dropout off: rollout and update must see the same distribution
        # the fused kernel (as transformers' Trainer defaults to): the same AdamW, several times faster per step
        optimizer = torch.optim.AdamW(self._parameter_groups(model), lr=config.learning_rate, eps=config.adam_eps,
                                      fused=True)
        self.model, self.optimizer = self.accelerator.prepare(model, optimizer)
        if config.lora:  # once prepare has moved the policy to its device: the reward heads go where the base is
            self._score_on_shared_base(policy)
        self.backend = backend or make_rollout_backend(self.policy_model.policy, tokenizer, self.chat.end_ids, config,
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

    def _score_on_shared_base(self, policy) -> None:
        """A reward model whose adapters were trained on this very base scores on it: no second copy (also as the
        reward-model part of a `CombinedReward`)."""
        from ..reward.scorer import RewardScorer

        def on_base(reward):
            if isinstance(reward, SharedBaseReward):
                return RewardScorer.on_shared_base(policy, reward.member_dirs, list(reward.norms))
            return reward

        self.reward = on_base(self.reward)
        if hasattr(self.reward, "reward_model"):
            self.reward.reward_model = on_base(self.reward.reward_model)

    # ----- what an algorithm supplies -------------------------------------------------------------------------------

    def _make_model(self, policy: nn.Module) -> PolicyModel:
        """The trained model around `policy` (the actor alone, or with a critic)."""
        raise NotImplementedError

    def _parameter_groups(self, model: PolicyModel) -> list[dict]:
        """The optimiser's parameter groups (one: every trainable weight at `learning_rate`)."""
        return [{"params": [p for p in model.parameters() if p.requires_grad]}]

    def targets(self, rollout: Rollout, scores: torch.Tensor, kl: torch.Tensor, kl_coef: float) -> Targets:
        """What the loss needs from one rollout: `scores` (B,) are the rewards less the missing-EOS penalty, `kl` the
        per-token KL estimate to the reference (masked), `kl_coef` this iteration's β."""
        raise NotImplementedError

    def loss(self, rollout: Rollout, targets: Targets, idx: torch.Tensor, logprobs: torch.Tensor,
             values: torch.Tensor | None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """A mini-batch's loss (rows `idx` of the rollout; the new `logprobs` (b, R) and, with a critic, `values`)
        and the statistics named in `loss_stats`."""
        raise NotImplementedError

    # ----- setup -----------------------------------------------------------------------------------------------

    @property
    def policy_model(self) -> PolicyModel:
        """The trained model (the policy, with PPO's value head), unwrapped from accelerate."""
        return self.accelerator.unwrap_model(self.model)

    def _encode(self, prompts: list[PromptInput]) -> list[list[int]]:
        """Token ids of each prompt, whole (the policy's chat format)."""
        for i, prompt in enumerate(prompts):
            if isinstance(prompt, str) and not prompt.strip():
                raise PolicySetupError(f"prompt {i + 1} is empty; remove it or give it some text")
        return self.chat.prompts_ids(prompts)

    def _tokenize_prompts(self, prompts: list[PromptInput], policy: PreTrainedModel) -> list[list[int]]:
        needed = self.config.batch_size * self.accelerator.num_processes
        if len(prompts) < needed:
            raise PolicySetupError(f"{len(prompts)} training prompts for a batch of {needed}; import more prompts or "
                                   "lower the batch size")
        ids = self._encode(prompts)
        context = getattr(policy.config, "max_position_embeddings", None)
        for number, row in enumerate(ids, start=1):
            if context is not None and len(row) + self.config.response_length > context:
                raise PolicySetupError(f"prompt {number} has {len(row)} tokens, which with "
                                       f"{self.config.response_length} response tokens exceeds the policy's context of "
                                       f"{context}; nothing is cut, so shorten or remove the prompt, or lower "
                                       "response_length")
        return ids

    # ----- one iteration -----------------------------------------------------------------------------------------

    def _batch_indices(self, iteration: int) -> list[int]:
        """This process's prompts for an iteration: epochs of seeded permutations, split across processes."""
        per_iteration = self.config.batch_size * self.accelerator.num_processes
        per_epoch = len(self.prompts) // per_iteration
        epoch, k = divmod(iteration, per_epoch)
        generator = torch.Generator().manual_seed(self.config.seed * 100003 + epoch)
        order = torch.randperm(len(self.prompts), generator=generator)
        start = k * per_iteration + self.accelerator.process_index * self.config.batch_size
        return order[start:start + self.config.batch_size].tolist()

    def _sampling_logits(self, logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """The logits of the distribution the sampler drew `tokens` from (temperature, no pad, top-k, top-p)."""
        config = self.config
        return sampling_logits(logits, config.temperature, self.tokenizer.pad_token_id, config.top_k, config.top_p,
                               keep=tokens)

    def _logprobs(self, logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """Log-probs of `tokens` under the sampler's distribution (temperature, no pad, top-k, top-p); the
        reference's too, so that the KL to it starts at 0 whatever the sampling settings."""
        config = self.config
        return sampler_logprobs(logits, tokens, config.temperature, self.tokenizer.pad_token_id, config.top_k,
                                config.top_p)

    def _reference_logprobs(self, input_ids, attention_mask, positions, response_start, responses) -> torch.Tensor:
        inputs = (input_ids, attention_mask, positions, response_start)
        if self.config.lora:
            with self.policy_model.policy.disable_adapter():
                logits, _ = response_pass(self.policy_model.policy, *inputs)
        else:
            logits, _ = response_pass(self.reference, *inputs)
        return self._logprobs(logits, responses)

    def response_texts(self, responses: torch.Tensor, mask: torch.Tensor) -> list[str]:
        """The sampled responses as text (what people label and the reward reads), end ids left out."""
        return [self.chat.decode(row[m.bool()].tolist()) for row, m in zip(responses, mask, strict=True)]

    def _score(self, prompts: list[PromptInput], responses: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The reward of each (prompt, decoded response), as the reward model was trained to read them; the monitor
        (`monitor_oracle`) scores the same texts, for the metrics only."""
        texts = self.response_texts(responses, mask)
        scores = self.reward(prompts, texts)
        if self.monitor is not None:
            self.monitored = [float(self.monitor(text)) for text in texts]
        return torch.as_tensor(scores, dtype=torch.float32).to(responses.device)

    def _monitor_metrics(self, scores: torch.Tensor) -> dict[str, float]:
        """With a monitor: the rollout's mean monitor (oracle) score and its correlation with the reward `scores`
        (how far the reward model agrees with the oracle on what the policy writes now)."""
        if self.monitor is None:
            return {}
        oracle = torch.tensor(self.monitored)
        return {"oracle_score": oracle.mean().item(), "oracle_correlation": correlation(scores.cpu(), oracle).item()}

    @torch.no_grad()
    def rollout(self, prompts: list[PromptInput], prompt_ids: list[list[int]]) -> Rollout:
        """Sample one response per row and record everything the update needs."""
        device = self.accelerator.device
        query, query_mask = (t.to(device) for t in left_pad(prompt_ids, self.tokenizer.pad_token_id))
        config, pad = self.config, self.tokenizer.pad_token_id
        sampling = (query, query_mask, config.response_length, config.temperature, config.top_p, config.top_k)
        with self.accelerator.autocast():
            sampled = self.backend.sample(*sampling) if isinstance(self.backend, HFRolloutBackend) else None
            raw = sampled.responses if sampled is not None else self.backend.generate_ids(*sampling)
            responses, mask, ended = cut_at_end(raw, self.chat.end_ids, pad)
            input_ids = torch.cat([query, responses], dim=1)  # (B, P + R)
            attention_mask = torch.cat([query_mask, mask.long()], dim=1)
            positions = position_ids(attention_mask)
            start = query.shape[1]
            if sampled is not None:  # the studio's sampler kept what a forward pass over the responses would give
                logprobs, entropy = sampled.logprobs, sampled.entropy
                values = self.policy_model.values(sampled.hidden)
            else:
                logits, values = self.policy_model(input_ids, attention_mask, positions, start)
                logprobs = self._logprobs(logits, responses)
                entropy = entropy_from_logits(self._sampling_logits(logits, responses))
            ref_logprobs = self._reference_logprobs(input_ids, attention_mask, positions, start, responses)
            scores = self._score(prompts, responses, mask)
        return Rollout(query, query_mask, responses, mask, logprobs * mask, ref_logprobs * mask,
                       values * mask if values is not None else None, scores, ended, entropy * mask)

    def _update(self, rollout: Rollout, targets: Targets) -> dict[str, float]:
        """Epochs over shuffled mini-batches; returns the mean of each of `loss_stats`."""
        self.model.train(self.config.gradient_checkpointing)  # dropout is off either way
        try:
            return self._epochs(rollout, targets)
        finally:
            self.model.eval()

    def _epochs(self, rollout: Rollout, targets: Targets) -> dict[str, float]:
        config = self.config
        input_ids = torch.cat([rollout.query, rollout.responses], dim=1)
        attention_mask = torch.cat([rollout.query_mask, rollout.mask.long()], dim=1)
        inputs = (input_ids, attention_mask, position_ids(attention_mask))
        group, size = config.episodes_per_prompt, config.batch_size // config.num_mini_batches  # prompts per batch
        sums, steps = dict.fromkeys(self.loss_stats, 0.0), 0
        for _ in range(config.epochs):
            order = torch.randperm(config.batch_size)  # prompts: a mini-batch takes their groups whole
            for k in range(config.num_mini_batches):
                chosen = order[k * size:(k + 1) * size]
                idx = (chosen[:, None] * group + torch.arange(group)).flatten().to(input_ids.device)  # rows
                stats = self._mini_batch_step(rollout, targets, idx, inputs)
                if stats is None:  # the policy already moved too far from the old one
                    return {name: total / max(1, steps) for name, total in sums.items()}
                for name in self.loss_stats:
                    sums[name] += stats[name]
                steps += 1
        return {name: total / steps for name, total in sums.items()}

    def _mini_batch_step(self, rollout: Rollout, targets: Targets, idx: torch.Tensor,
                         inputs) -> dict[str, float] | None:
        """One optimizer step on rollout rows `idx`; None, without a step, when the approximate KL to the old policy
        exceeds `max_approx_kl` (the same decision on every process). Its activations go when it returns."""
        config = self.config
        input_ids, attention_mask, positions = (t[idx] for t in inputs)
        with self.accelerator.autocast():
            logits, values = self.model(input_ids, attention_mask, positions, rollout.query.shape[1])
        logprobs = self._logprobs(logits, rollout.responses[idx])
        loss, stats = self.loss(rollout, targets, idx, logprobs, values)
        if config.ent_coef:
            entropy = entropy_from_logits(self._sampling_logits(logits, rollout.responses[idx]))
            loss = loss - config.ent_coef * masked_mean(entropy, rollout.mask[idx])
        if config.max_approx_kl is not None:
            mean_kl = self.accelerator.reduce(stats["approx_kl"].reshape(1), reduction="mean").item()
            if mean_kl > config.max_approx_kl:
                return None
        self.optimizer.zero_grad(set_to_none=True)
        self.accelerator.backward(loss)
        norm = self.accelerator.clip_grad_norm_([p for p in self.model.parameters() if p.requires_grad],
                                                config.max_grad_norm)
        check_finite_step(loss, norm, f"{self.algorithm.value.upper()} iteration {self.iteration + 1}")  # no step
        self.optimizer.step()
        return {name: stats[name].item() for name in self.loss_stats}

    def step(self) -> dict[str, float]:
        """One iteration (rollout, targets, update, β update); returns its metrics averaged over processes."""
        started = time.perf_counter()
        config, group = self.config, self.config.episodes_per_prompt
        indices = [i for i in self._batch_indices(self.iteration) for _ in range(group)]  # a group: consecutive rows
        rollout = self.rollout([self.prompts[i] for i in indices], [self.prompt_ids[i] for i in indices])
        mask = rollout.mask
        check_finite_scores(rollout.scores, f"{self.algorithm.value.upper()} iteration {self.iteration + 1}")
        kl = kl_estimate(rollout.logprobs, rollout.ref_logprobs, config.kl_estimator) * mask
        kl_coef = self.kl_controller.value
        local = {"score": rollout.scores.mean().item(), "kl": kl.sum(dim=1).mean().item(),
                 "entropy": masked_mean(rollout.entropy, mask).item(),
                 "response_length": mask.sum(dim=1).mean().item(), "eos_rate": rollout.ended.float().mean().item()}
        local.update(self._monitor_metrics(rollout.scores))
        local.update(reward_function_metrics(self.reward))
        targets = self.targets(rollout, penalise_missing_eos(rollout.scores, rollout.ended, config.missing_eos_penalty),
                               kl, kl_coef)
        local.update(self._update(rollout, targets))
        local.update(targets.metrics)
        del rollout, kl, mask, targets  # the buffer is purged after each update
        values = torch.tensor(list(local.values()), device=self.accelerator.device)
        prefix = self.algorithm.value
        averaged = self.accelerator.reduce(values, reduction="mean").tolist()
        metrics = {f"{prefix}/{name}": value for name, value in zip(local, averaged, strict=True)}
        episodes = len(indices) * self.accelerator.num_processes
        self.kl_controller.update(metrics[f"{prefix}/kl"], episodes)
        self.backend.sync_weights(self.policy_model.policy)
        metrics[f"{prefix}/kl_coef"] = kl_coef
        metrics[f"{prefix}/episodes_per_s"] = episodes / (time.perf_counter() - started)
        return metrics

    # ----- the run ---------------------------------------------------------------------------------------------

    def train(self, iterations: int, reporter: Reporter | None = None) -> TrainResult:
        """Run until `iterations` iterations are done in total (counting those before a resume).

        The reporter hears the progress when the run starts and after every iteration, and is asked before each
        iteration whether to stop (the main process decides for all); iteration i's metrics go to
        `reporter.on_step(i, metrics)`. The state is saved to `state_dir` (when given) every `save_every`
        iterations, at the end, and on a stop, which then raises JobCancelled.
        """
        reporter = reporter or Reporter()
        metrics: dict = {}
        reporter.progress(self.iteration, iterations)
        name = self.algorithm.value.upper()
        while self.iteration < iterations:
            if stop_requested(reporter):
                self._save_if_configured()
                raise JobCancelled(f"{name} was stopped after {self.iteration} of {iterations} iterations; resume "
                                   "the job to continue from there")
            try:
                metrics = self.step()
            except RewardFunctionError as exc:  # named by the function; the iteration added here
                raise RewardFunctionError(f"{name} iteration {self.iteration + 1}: {exc}") from exc
            self.iteration += 1
            reporter.on_step(self.iteration, metrics)
            reporter.progress(self.iteration, iterations)
            if self.iteration % self.config.save_every == 0 or self.iteration == iterations:
                self._save_if_configured()
        return TrainResult(self.iteration, metrics)

    @torch.no_grad()
    def evaluate(self, prompts: list[PromptInput], score: RewardFn, seed: int = 0) -> dict[str, float]:
        """Mean `score` of one sample per prompt and mean sequence KL (k1) to the reference; the RNG is left as it
        was."""
        ids = self._encode(prompts)
        scores, kls, ended = [], [], []
        devices = [self.accelerator.device] if self.accelerator.device.type == "cuda" else []
        size = self.config.batch_size * self.config.episodes_per_prompt  # an iteration's rollout: the same in PPO
        with torch.random.fork_rng(devices=devices):                      # and GRPO at the same episode budget
            torch.manual_seed(seed)
            for start in range(0, len(prompts), size):
                chunk = slice(start, start + size)
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
        """A plain Hugging Face policy directory (LoRA merged; its adapter also in `adapter/`), with PPO's value
        head."""
        save_policy(self, path)
