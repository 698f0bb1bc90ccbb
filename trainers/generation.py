"""Generation backends: K sampled continuations per prompt, cut at EOS, as `Sample`s.

`Generator` is the interface the round orchestrator and PPO use; `HFGenerator` implements it with Hugging Face
`generate` (batched, left-padded, KV cache). A vLLM backend for GPUs would implement the same `generate` method.

    generator = HFGenerator(load_policy(path), load_tokenizer(path))
    samples = generator.generate(["the movie was"], num_samples=4, max_new_tokens=24, temperature=1.0,
                                 top_p=1.0, seed=0)
    samples[0][0].text   # ' brilliant and moving .'  (prompt + text is the whole review)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from storage.errors import InvalidInput


@dataclass(frozen=True)
class Sample:
    """One continuation of `prompt`.

    `token_ids` are the generated ids up to and including the first EOS (no pads); `text` decodes them without
    the EOS, keeping the leading space, so `prompt + text` is the full review. `num_tokens == len(token_ids)`.
    """

    prompt: str
    text: str
    token_ids: list[int]
    ended_with_eos: bool
    num_tokens: int


class Generator(Protocol):
    """A generation backend: `num_samples` samples for each prompt, in prompt order, deterministic for a seed."""

    def generate(self, prompts: list[str], num_samples: int, max_new_tokens: int, temperature: float,
                 top_p: float, seed: int, batch_size: int = 64) -> list[list[Sample]]: ...


def check_generation_args(num_samples: int, max_new_tokens: int, temperature: float, top_p: float,
                          batch_size: int) -> None:
    """Raises InvalidInput, in one line, for an out-of-range generation setting."""
    if num_samples < 1:
        raise InvalidInput(f"samples per prompt must be at least 1, got {num_samples}")
    if max_new_tokens < 1:
        raise InvalidInput(f"max new tokens must be at least 1, got {max_new_tokens}")
    if temperature < 0:
        raise InvalidInput(f"temperature must be 0 (greedy) or positive, got {temperature}")
    if not 0 < top_p <= 1:
        raise InvalidInput(f"top-p must be in (0, 1], got {top_p}")
    if batch_size < 1:
        raise InvalidInput(f"batch size must be at least 1, got {batch_size}")


class HFGenerator:
    """Samples with `model.generate`; temperature 0 means greedy, otherwise pure sampling with top-p (top-k off).

    The pad token is never generated, so pads only follow an EOS and cutting at the first EOS removes them all.

    Results depend on the seed, the prompts, `num_samples` and `batch_size` (rows are sampled batch by batch); the
    caller's torch RNG state is left untouched.
    """

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase):
        assert tokenizer.pad_token_id is not None and tokenizer.pad_token_id != tokenizer.eos_token_id, \
            "load the tokenizer with trainers.models.load_tokenizer (pad token distinct from EOS)"
        self.model = model
        self.tokenizer = tokenizer
        self.tokenizer.padding_side = "left"
        self.context = getattr(model.config, "max_position_embeddings", None)

    def generate(self, prompts: list[str], num_samples: int, max_new_tokens: int, temperature: float,
                 top_p: float, seed: int, batch_size: int = 64) -> list[list[Sample]]:
        check_generation_args(num_samples, max_new_tokens, temperature, top_p, batch_size)
        if not prompts:
            return []
        self._check_prompts(prompts, max_new_tokens)
        rows = [prompt for prompt in prompts for _ in range(num_samples)]
        samples: list[Sample] = []
        was_training = self.model.training
        self.model.eval()
        devices = [self.model.device] if self.model.device.type == "cuda" else []
        try:
            with torch.random.fork_rng(devices=devices), torch.inference_mode():
                torch.manual_seed(seed)
                for start in range(0, len(rows), batch_size):
                    samples.extend(self._generate_batch(rows[start:start + batch_size], max_new_tokens,
                                                        temperature, top_p))
        finally:
            self.model.train(was_training)
        return [samples[i * num_samples:(i + 1) * num_samples] for i in range(len(prompts))]

    def _check_prompts(self, prompts: list[str], max_new_tokens: int) -> None:
        for number, (prompt, ids) in enumerate(zip(prompts, self.tokenizer(prompts)["input_ids"]), start=1):
            if not prompt.strip():
                raise InvalidInput(f"prompt {number} is empty; give every prompt some text")
            if self.context is not None and len(ids) + max_new_tokens > self.context:
                raise InvalidInput(f"prompt {number} has {len(ids)} tokens, which with {max_new_tokens} new tokens "
                                   f"exceeds the model's context of {self.context} tokens; shorten the prompt or "
                                   "lower max new tokens")

    def _generate_batch(self, prompts: list[str], max_new_tokens: int, temperature: float,
                        top_p: float) -> list[Sample]:
        batch = self.tokenizer(prompts, return_tensors="pt", padding=True).to(self.model.device)
        prompt_len = batch["input_ids"].shape[1]
        sampling = dict(do_sample=True, temperature=temperature, top_p=top_p, top_k=0) if temperature > 0 else \
            dict(do_sample=False)
        pad = self.tokenizer.pad_token_id
        output = self.model.generate(
            **batch, max_new_tokens=max_new_tokens, use_cache=True, pad_token_id=pad,
            eos_token_id=self.tokenizer.eos_token_id, suppress_tokens=[pad], **sampling,
        )  # (B, prompt_len + new): rows that ended early are padded after their EOS
        return [self._sample(prompt, row[prompt_len:].tolist()) for prompt, row in zip(prompts, output)]

    def _sample(self, prompt: str, new_ids: list[int]) -> Sample:
        eos = self.tokenizer.eos_token_id
        ended = eos in new_ids
        token_ids = new_ids[:new_ids.index(eos) + 1] if ended else new_ids
        text = self.tokenizer.decode(token_ids, skip_special_tokens=True)
        return Sample(prompt=prompt, text=text, token_ids=token_ids, ended_with_eos=ended, num_tokens=len(token_ids))
