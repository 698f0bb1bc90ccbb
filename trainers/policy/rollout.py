"""The rollout side of PPO and GRPO: where samples come from (`RolloutBackend`: the studio's sampler,
`trainers.models.sampling`, on the live policy, or vLLM on a GPU via `trainers.models.vllm_generation`), the
per-iteration buffer (`Rollout`) and the helpers that turn samples into tensors. The trained models that score the
samples are in `modules`.

    backend = make_rollout_backend(policy, tokenizer, chat.end_ids, config, longest_prompt=12)
    ids, mask = left_pad(chat.prompts_ids(prompts), tokenizer.pad_token_id)     # (B, P) each
    responses, mask, ended = cut_at_end(backend.generate_ids(ids, mask, 24, 1.0, 1.0), chat.end_ids, pad)
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

from ..models.sampling import sample_ids
from .config import PolicyConfig


class RolloutBackend(Protocol):
    """Generates PPO rollouts from token ids; `sync_weights` is called after every update."""

    def generate_ids(self, query: torch.Tensor, query_mask: torch.Tensor, max_new_tokens: int, temperature: float,
                     top_p: float, top_k: int = 0) -> torch.Tensor:
        """Left-padded prompts (B, P) -> sampled response ids (B, R <= max_new_tokens); what follows an end id is
        ignored."""

    def sync_weights(self, policy: nn.Module) -> None: ...


class HFRolloutBackend:
    """Batched sampling from the live policy with the studio's sampler (`sample_ids`, the one the label sampler
    uses), so no weight sync is needed; only the studio's settings shape it."""

    def __init__(self, policy: nn.Module, pad_id: int, end_ids: Sequence[int]):
        self.policy, self.pad, self.end_ids = policy, pad_id, tuple(end_ids)

    def generate_ids(self, query, query_mask, max_new_tokens, temperature, top_p, top_k=0):
        return sample_ids(self.policy, query, query_mask, max_new_tokens, temperature, top_p, top_k, self.end_ids,
                          self.pad)  # (B, R)

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
