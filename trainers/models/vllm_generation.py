"""vLLM generation backend (GPU only; `vllm` is imported when the backend is built, never at module import).

`VLLMGenerator` implements both generation interfaces of the studio:
- `generate(prompts, num_samples, ...)` -> `Sample`s, like `trainers.models.generation.HFGenerator` (the loop's
  sampling);
- `generate_ids(query, query_mask, ...)` and `sync_weights(policy)`, the PPO/GRPO rollout backend
  (`trainers.policy.rollout`).

The engine runs inside the training process (`distributed_executor_backend="external_launcher"`, one engine per
process, as TRL's colocate mode does), so after each PPO update the policy's weights (LoRA adapters merged) are
copied into it in memory and its prefix cache is reset. The pad token is never sampled, any of the model's end ids
stops a row, prompts are tokenized by the model's `ChatFormat`, and the checkpoint's generation_config is not used
(`generation_config="vllm"`): only the studio's settings shape the sampler, as with `HFGenerator`.

    generator = VLLMGenerator(policy_dir, load_tokenizer(policy_dir), end_ids, gpu_memory_utilization=0.3)
    samples = generator.generate(["the movie was"], num_samples=4, max_new_tokens=24, temperature=1.0, top_p=1.0,
                                 seed=0)
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Sequence

import torch
from transformers import PreTrainedTokenizerBase

from labeling.transfer.conversations import PromptInput
from storage.errors import StudioError

from .chat_format import ChatFormat
from .generation import Sample, check_generation_args


class VLLMUnavailable(StudioError):
    """The vLLM backend was asked for where it cannot run (no GPU, or vllm not installed)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _vllm_name(name: str) -> str:
    """A policy parameter's name as in its checkpoint (peft wrappers removed)."""
    return name.removeprefix("base_model.model.").replace(".base_layer", "")


class VLLMGenerator:
    """A vLLM engine over a policy directory; `seed` seeds the engine (each process adds its rank)."""

    def __init__(self, model_dir: str | Path, tokenizer: PreTrainedTokenizerBase, end_ids: Sequence[int],
                 gpu_memory_utilization: float = 0.3, max_model_len: int | None = None, seed: int = 0,
                 dtype: str = "auto"):
        if not torch.cuda.is_available():
            raise VLLMUnavailable("the vllm backend needs a CUDA GPU; use the hf backend on this machine")
        try:
            from vllm import LLM
        except ImportError as exc:
            raise VLLMUnavailable("vllm is not installed; pip install -r requirements-gpu.txt, or use the hf "
                                  "backend") from exc
        # external_launcher reads the torch.distributed environment; a single process gets a world of one
        for name, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1")):
            os.environ.setdefault(name, value)
        os.environ.setdefault("MASTER_PORT", str(_free_port()))
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        self.chat = ChatFormat.from_tokenizer(tokenizer, end_ids)
        self.end_ids, self.pad = self.chat.end_ids, tokenizer.pad_token_id
        self.llm = LLM(model=str(model_dir), tokenizer=str(model_dir), gpu_memory_utilization=gpu_memory_utilization,
                       max_model_len=max_model_len, seed=seed + int(os.environ["RANK"]), dtype=dtype,
                       distributed_executor_backend="external_launcher", enable_prefix_caching=True,
                       generation_config="vllm")
        vocab = self.llm.llm_engine.model_config.get_vocab_size()
        self.allowed = [i for i in range(vocab) if i != self.pad]

    def _params(self, max_new_tokens: int, temperature: float, top_p: float, top_k: int, seed: int | None = None):
        from vllm import SamplingParams

        return SamplingParams(n=1, temperature=temperature, top_p=top_p, top_k=top_k or -1, max_tokens=max_new_tokens,
                              seed=seed, stop_token_ids=list(self.end_ids), allowed_token_ids=self.allowed,
                              skip_special_tokens=True)

    def _complete(self, prompt_ids: list[list[int]], seeds: list[int], max_new_tokens: int, temperature: float,
                  top_p: float, top_k: int) -> list[tuple[list[int], bool]]:
        """(response ids up to and including the end id, ended) per prompt, in order; one seed per prompt."""
        from vllm.inputs import TokensPrompt

        params = [self._params(max_new_tokens, temperature, top_p, top_k, seed) for seed in seeds]
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in prompt_ids], params, use_tqdm=False)
        results = []
        for output in outputs:
            completion = output.outputs[0]
            ids = list(completion.token_ids)
            ended = completion.finish_reason == "stop"
            if ended and (not ids or ids[-1] not in self.end_ids):  # vLLM may leave the stop token out of the ids
                stop = completion.stop_reason
                ids.append(stop if isinstance(stop, int) else self.end_ids[0])
            results.append((ids, ended))
        return results

    # ----- PPO rollout backend ---------------------------------------------------------------------------------

    def generate_ids(self, query: torch.Tensor, query_mask: torch.Tensor, max_new_tokens: int, temperature: float,
                     top_p: float, top_k: int = 0) -> torch.Tensor:
        """Left-padded prompts (B, P) -> response ids (B, R), padded after the end id; seeded from torch's RNG."""
        prompt_ids = [row[mask.bool()].tolist() for row, mask in zip(query.cpu(), query_mask.cpu(), strict=True)]
        seeds = torch.randint(0, 2**31 - 1, (len(prompt_ids),)).tolist()  # follows the trainer's RNG state
        completions = self._complete(prompt_ids, seeds, max_new_tokens, temperature, top_p, top_k)
        width = max(1, max(len(ids) for ids, _ in completions))
        responses = torch.full((len(completions), width), self.pad, dtype=torch.long)
        for row, (ids, _) in enumerate(completions):
            responses[row, :len(ids)] = torch.tensor(ids, dtype=torch.long)
        return responses.to(query.device)

    def sync_weights(self, policy: torch.nn.Module) -> None:
        """Copy the policy's current weights into the engine (LoRA adapters merged for the copy, then unmerged)."""
        from peft import PeftModel

        engine_model = self.llm.llm_engine.model_executor.driver_worker.model_runner.model
        if isinstance(policy, PeftModel):
            policy.merge_adapter()
            try:
                engine_model.load_weights((_vllm_name(n), p.data) for n, p in policy.named_parameters()
                                          if "lora_" not in n)
            finally:
                policy.unmerge_adapter()
        else:
            engine_model.load_weights((n, p.data) for n, p in policy.named_parameters())
        self.llm.reset_prefix_cache()

    # ----- the loop's Generator interface ----------------------------------------------------------------------

    def generate(self, prompts: list[PromptInput], num_samples: int, max_new_tokens: int, temperature: float,
                 top_p: float, seed: int, batch_size: int = 64, top_k: int = 0) -> list[list[Sample]]:
        """`num_samples` samples per prompt, deterministic for a seed (vLLM batches internally; `batch_size` unused)."""
        check_generation_args(num_samples, max_new_tokens, temperature, top_p, batch_size, top_k)
        prompt_ids = self.chat.prompts_ids(prompts)
        rows = [ids for ids in prompt_ids for _ in range(num_samples)]
        seeds = [seed * 1_000_003 + i for i in range(len(rows))]
        completions = self._complete(rows, seeds, max_new_tokens, temperature, top_p, top_k)
        row_prompts = [p for p in prompts for _ in range(num_samples)]
        samples = [Sample(prompt=prompt, text=self.chat.decode(ids), token_ids=ids, ended_with_eos=ended,
                          num_tokens=len(ids))
                   for prompt, (ids, ended) in zip(row_prompts, completions, strict=True)]
        return [samples[i * num_samples:(i + 1) * num_samples] for i in range(len(prompts))]
