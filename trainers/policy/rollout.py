"""The rollout side of PPO and GRPO: where samples come from (`RolloutBackend`: the studio's sampler,
`trainers.models.sampling`, on the live policy, or vLLM on a GPU via `trainers.models.vllm_generation`), the
per-iteration buffer (`Rollout`) and the helpers that turn samples into tensors. The trained models that score the
samples are in `modules`.
`sample_statistics` measures a policy on samples of its own (KL to a reference, entropy, length, EOS rate), as PPO's
rollouts do, for DPO, which has none.

    backend = make_rollout_backend(policy, tokenizer, chat.end_ids, config, longest_prompt=12)
    ids, mask = left_pad(chat.prompts_ids(prompts), tokenizer.pad_token_id)     # (B, P) each
    responses, mask, ended = cut_at_end(backend.generate_ids(ids, mask, 24, 1.0, 1.0), chat.end_ids, pad)
    stats = sample_statistics(policy, chat, pad, ids_of_prompts, Sampling(24), reference=sft)   # {"kl": ...}
"""

from __future__ import annotations

import copy
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence

import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from ..models.chat_format import ChatFormat
from ..models.generation import left_pad
from ..models.sampling import sample_ids
from .config import PolicyConfig
from .modules import PolicyModel
from .ppo_math import entropy_from_logits, sampler_logprobs, sampling_logits


class RolloutBackend(Protocol):
    """Generates PPO rollouts from token ids; `sync_weights` is called after every update."""

    def generate_ids(self, query: torch.Tensor, query_mask: torch.Tensor, max_new_tokens: int, temperature: float,
                     top_p: float, top_k: int = 0) -> torch.Tensor:
        """Left-padded prompts (B, P) -> sampled response ids (B, R <= max_new_tokens); what follows an end id is
        ignored."""

    def sync_weights(self, policy: nn.Module) -> None: ...


@dataclass
class Sampled:
    """Responses (B, R) with what the sampler computed drawing them, per token: the log-prob and the entropy under the
    distribution drawn from (temperature, no pad, top-k, top-p) and (B, R, H) the last hidden states the logits came
    from."""

    responses: torch.Tensor
    logprobs: torch.Tensor
    entropy: torch.Tensor
    hidden: torch.Tensor


class HFRolloutBackend:
    """Batched sampling from the live policy with the studio's sampler (`sample_ids`, the one the label sampler
    uses), so no weight sync is needed; only the studio's settings shape it. `sample` also keeps the log-probs,
    entropies and hidden states of the sampler's own steps, which a forward pass over the responses would give again."""

    def __init__(self, policy: nn.Module, pad_id: int, end_ids: Sequence[int]):
        self.policy, self.pad, self.end_ids = policy, pad_id, tuple(end_ids)

    def generate_ids(self, query, query_mask, max_new_tokens, temperature, top_p, top_k=0):
        return sample_ids(self.policy, query, query_mask, max_new_tokens, temperature, top_p, top_k, self.end_ids,
                          self.pad)  # (B, R)

    def sample(self, query, query_mask, max_new_tokens, temperature, top_p, top_k=0) -> Sampled:
        """`generate_ids` with each step's log-prob of the drawn token, entropy and last hidden state (values in the
        rows after their end are placeholders)."""
        logprobs, entropy, hidden = [], [], []

        def observe(logits, drawn, state):
            scaled = sampling_logits(logits, temperature, self.pad, top_k, top_p, keep=drawn)  # what `drawn` came from
            logprobs.append(scaled.log_softmax(-1).gather(-1, drawn[:, None]).squeeze(-1))
            entropy.append(entropy_from_logits(scaled))
            hidden.append(state)

        responses = sample_ids(self.policy, query, query_mask, max_new_tokens, temperature, top_p, top_k,
                               self.end_ids, self.pad, observe)
        return Sampled(responses, torch.stack(logprobs, 1), torch.stack(entropy, 1), torch.stack(hidden, 1))

    def sync_weights(self, policy: nn.Module) -> None:
        pass


def make_rollout_backend(policy: nn.Module, tokenizer: PreTrainedTokenizerBase, end_ids: Sequence[int],
                         config: PolicyConfig, longest_prompt: int) -> RolloutBackend:
    """The backend `config.generation_backend` names, sampling from `policy` (LoRA adapters included) until any of
    `end_ids`."""
    if config.generation_backend == "hf":
        return HFRolloutBackend(policy, tokenizer.pad_token_id, end_ids)
    from ..models.vllm_generation import VLLMGenerator

    base = policy.get_base_model() if hasattr(policy, "get_base_model") else policy
    model_dir = Path(base.name_or_path or "")
    if not (model_dir / "config.json").is_file():  # built in memory: give the engine a directory to start from
        model_dir = Path(tempfile.mkdtemp(prefix="ppo-vllm-"))
        plain = copy.deepcopy(policy).merge_and_unload() if config.lora else policy
        plain.save_pretrained(model_dir)
        tokenizer.save_pretrained(model_dir)
    backend = VLLMGenerator(model_dir, tokenizer, end_ids, config.vllm_gpu_memory_utilization,
                            max_model_len=longest_prompt + config.response_length, seed=config.seed)
    backend.sync_weights(policy)  # adapters or weights that differ from the directory's
    return backend


@dataclass
class Rollout:
    """One iteration's buffer; per-token tensors are (B, R), `mask` 1 on response tokens up to and including EOS;
    `values` None without a critic (GRPO)."""

    query: torch.Tensor
    query_mask: torch.Tensor
    responses: torch.Tensor
    mask: torch.Tensor
    logprobs: torch.Tensor
    ref_logprobs: torch.Tensor
    values: torch.Tensor | None
    scores: torch.Tensor
    ended: torch.Tensor
    entropy: torch.Tensor


def cut_at_end(responses: torch.Tensor, end_ids: Sequence[int], pad: int) -> tuple[torch.Tensor, torch.Tensor,
                                                                                  torch.Tensor]:
    """Keep each response up to and including its first end id: (ids with pads after, float mask, ended)."""
    is_end = torch.isin(responses, torch.tensor(list(end_ids), device=responses.device))  # (B, R)
    ended = is_end.any(dim=1)
    first = torch.where(ended, is_end.int().argmax(dim=1), responses.shape[1] - 1)  # index of the last real token
    mask = torch.arange(responses.shape[1], device=responses.device)[None, :] <= first[:, None]
    return responses.masked_fill(~mask, pad), mask.float(), ended


def position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions counting real tokens only, so left padding does not shift the prompt."""
    return (attention_mask.cumsum(-1) - 1).clamp(min=0)


@dataclass(frozen=True)
class Sampling:
    """How `sample_statistics` samples: the response length and the sampler's settings."""

    response_length: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0


@torch.no_grad()
def sample_statistics(policy: nn.Module, chat: ChatFormat, pad_id: int, prompt_ids: list[list[int]],
                      sampling: Sampling, reference: nn.Module | None = None, batch_size: int = 32,
                      score=None) -> dict[str, float]:
    """One sampled response per prompt (`prompt_ids`, from `chat`) of `policy`, and on them, as PPO logs its rollouts:
    `kl`, the mean sequence KL (k1 summed over each response) to `reference` (None: `policy` with its LoRA adapters
    disabled), `entropy` per token, `response_length`, `eos_rate`; with `score(texts) -> list[float]` also its mean,
    `oracle_score`. Log-probs are the sampler's (`sampling`'s temperature, top-k and top-p; no pad). Draws from
    torch's global RNG."""
    device = next(policy.parameters()).device
    backend = HFRolloutBackend(policy, pad_id, chat.end_ids)
    kls, entropies, lengths, ended_all, scores = [], [], [], [], []
    for start in range(0, len(prompt_ids), batch_size):
        query, query_mask = (t.to(device) for t in left_pad(prompt_ids[start:start + batch_size], pad_id))
        raw = backend.generate_ids(query, query_mask, sampling.response_length, sampling.temperature, sampling.top_p,
                                   sampling.top_k)
        responses, mask, ended = cut_at_end(raw, chat.end_ids, pad_id)
        input_ids = torch.cat([query, responses], dim=1)  # (B, P + R)
        attention_mask = torch.cat([query_mask, mask.long()], dim=1)
        inputs = (input_ids, attention_mask, position_ids(attention_mask), query.shape[1])
        logits, _ = PolicyModel(policy)(*inputs)  # (B, R, V)
        if reference is None:
            with policy.disable_adapter():
                ref_logits, _ = PolicyModel(policy)(*inputs)
        else:
            ref_logits, _ = PolicyModel(reference)(*inputs)
        distribution = (sampling.temperature, pad_id, sampling.top_k, sampling.top_p)
        logprobs, ref_logprobs = (sampler_logprobs(x, responses, *distribution) for x in (logits, ref_logits))
        entropy = entropy_from_logits(sampling_logits(logits, *distribution, keep=responses))  # (B, R)
        kls.append(((logprobs - ref_logprobs) * mask).sum(dim=1).cpu())
        entropies.append((entropy * mask).sum().item())
        lengths.append(mask.sum(dim=1).cpu())
        ended_all.append(ended.float().cpu())
        if score is not None:
            scores += [float(s) for s in score([chat.decode(r[m.bool()].tolist()) for r, m in zip(responses, mask,
                                                                                                strict=True)])]
    length = torch.cat(lengths)
    stats = {"kl": torch.cat(kls).mean().item(), "entropy": sum(entropies) / max(1.0, length.sum().item()),
             "response_length": length.mean().item(), "eos_rate": torch.cat(ended_all).mean().item()}
    if score is not None:
        stats["oracle_score"] = sum(scores) / len(scores)
    return stats
