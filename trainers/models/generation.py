"""Generation backends: K sampled continuations per prompt, cut at the model's end ids, as `Sample`s.

`Generator` is the interface the round orchestrator and PPO use; `HFGenerator` implements it with the studio's
sampler (`trainers.models.sampling.sample_ids`: batched, left-padded, a KV cache, rows sorted by prompt length).
Prompts (text or conversations) become token ids through the model's `ChatFormat`, and sampling uses only the
studio's settings: a checkpoint's own generation config (a repetition penalty, n-gram blocking, its own top-k...)
never reaches the sampler, so the log-probs PPO computes are those of the distribution it sampled from.

    generator = HFGenerator(load_policy(path), load_tokenizer(path))
    samples = generator.generate(["the movie was"], num_samples=4, max_new_tokens=24, temperature=1.0,
                                 top_p=1.0, seed=0)
    samples[0][0].text   # ' brilliant and moving .'  (prompt + text is the whole review)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Protocol

import torch
from transformers import GenerationConfig, PreTrainedModel, PreTrainedTokenizerBase

from labeling.transfer.conversations import PromptInput
from storage.errors import InvalidInput

from .chat_format import ChatFormat
from .sampling import sample_ids


@dataclass(frozen=True)
class Sample:
    """One continuation of `prompt`.

    `token_ids` are the generated ids up to and including the first end id (no pads); `text` decodes them without
    special tokens, keeping the leading space, so for the demo `prompt + text` is the full review.
    `num_tokens == len(token_ids)`.
    """

    prompt: PromptInput
    text: str
    token_ids: list[int]
    ended_with_eos: bool
    num_tokens: int


class Generator(Protocol):
    """A generation backend: `num_samples` samples for each prompt, in prompt order, deterministic for a seed."""

    def generate(self, prompts: list[PromptInput], num_samples: int, max_new_tokens: int, temperature: float,
                 top_p: float, seed: int, batch_size: int = 64, top_k: int = 0) -> list[list[Sample]]: ...


def check_generation_args(num_samples: int, max_new_tokens: int, temperature: float, top_p: float,
                          batch_size: int, top_k: int = 0) -> None:
    """Raises InvalidInput, in one line, for an out-of-range generation setting."""
    if num_samples < 1:
        raise InvalidInput(f"samples per prompt must be at least 1, got {num_samples}")
    if max_new_tokens < 1:
        raise InvalidInput(f"max new tokens must be at least 1, got {max_new_tokens}")
    if temperature < 0:
        raise InvalidInput(f"temperature must be 0 (greedy) or positive, got {temperature}")
    if not 0 < top_p <= 1:
        raise InvalidInput(f"top-p must be in (0, 1], got {top_p}")
    if top_k < 0:
        raise InvalidInput(f"top-k must be 0 (off) or positive, got {top_k}")
    if batch_size < 1:
        raise InvalidInput(f"batch size must be at least 1, got {batch_size}")


def neutralise_generation_config(model: PreTrainedModel, end_ids: Iterable[int], pad_id: int) -> None:
    """Replace the checkpoint's generation config with one that carries only its special ids: `generate` fills
    every setting a caller leaves unset from the model's config, so a saved `repetition_penalty=1.05` or
    `no_repeat_ngram_size` would otherwise reshape the sampler behind PPO's back."""
    model.generation_config = GenerationConfig(bos_token_id=model.generation_config.bos_token_id,
                                               eos_token_id=list(end_ids), pad_token_id=pad_id)


def left_pad(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token lists -> left-padded (ids, mask), both (B, P)."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = torch.tensor(r, dtype=torch.long)
        mask[i, width - len(r):] = 1
    return ids, mask


class HFGenerator:
    """Samples with the studio's sampler (`sample_ids`); temperature 0 means greedy, otherwise sampling with top-p and
    top-k (0: off).

    The pad token is never generated, so pads only follow an end id and cutting at the first one removes them all.
    Rows are sampled batch by batch, sorted by prompt length so that a batch holds prompts of similar lengths (less
    left padding to compute); results depend on the seed, the prompts, `num_samples` and `batch_size`. The caller's
    torch RNG state is left untouched.
    """

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, chat: ChatFormat | None = None):
        assert tokenizer.pad_token_id is not None and tokenizer.pad_token_id != tokenizer.eos_token_id, \
            "load the tokenizer with trainers.models.loading.load_tokenizer (pad token distinct from EOS)"
        self.model, self.tokenizer, self.pad = model, tokenizer, tokenizer.pad_token_id
        self.chat = chat or ChatFormat.from_tokenizer(tokenizer, model_end_ids(model))
        self.context = getattr(model.config, "max_position_embeddings", None)

    def generate(self, prompts: list[PromptInput], num_samples: int, max_new_tokens: int, temperature: float,
                 top_p: float, seed: int, batch_size: int = 64, top_k: int = 0,
                 progress: Callable[[int, int], None] | None = None) -> list[list[Sample]]:
        """`num_samples` samples of each prompt; `progress(rows sampled, rows)` hears each batch's end."""
        check_generation_args(num_samples, max_new_tokens, temperature, top_p, batch_size, top_k)
        if not prompts:
            return []
        prompt_ids = self._prompt_ids(prompts, max_new_tokens)
        rows = sorted((i for i in range(len(prompts)) for _ in range(num_samples)), key=lambda i: len(prompt_ids[i]))
        samples: list[list[Sample]] = [[] for _ in prompts]
        was_training = self.model.training
        self.model.eval()
        devices = [self.model.device] if self.model.device.type == "cuda" else []
        try:
            with torch.random.fork_rng(devices=devices), torch.inference_mode():
                torch.manual_seed(seed)
                for start in range(0, len(rows), batch_size):
                    batch = rows[start:start + batch_size]
                    input_ids, attention_mask = (t.to(self.model.device)
                                                 for t in left_pad([prompt_ids[i] for i in batch], self.pad))
                    new_ids = sample_ids(self.model, input_ids, attention_mask, max_new_tokens, temperature, top_p,
                                         top_k, self.chat.end_ids, self.pad)  # (b, R)
                    for i, ids in zip(batch, new_ids.tolist(), strict=True):
                        samples[i].append(self._sample(prompts[i], ids))
                    if progress is not None:
                        progress(start + len(batch), len(rows))
        finally:
            self.model.train(was_training)
        return samples

    def _prompt_ids(self, prompts: list[PromptInput], max_new_tokens: int) -> list[list[int]]:
        """Each prompt's ids, after checking it is not empty and fits the context with `max_new_tokens`."""
        ids = self.chat.prompts_ids(prompts)
        for number, (prompt, row) in enumerate(zip(prompts, ids, strict=True), start=1):
            if isinstance(prompt, str) and not prompt.strip():
                raise InvalidInput(f"prompt {number} is empty; give every prompt some text")
            if self.context is not None and len(row) + max_new_tokens > self.context:
                raise InvalidInput(f"prompt {number} has {len(row)} tokens, which with {max_new_tokens} new tokens "
                                   f"exceeds the model's context of {self.context} tokens; shorten the prompt or "
                                   "lower max new tokens")
        return ids

    def _sample(self, prompt: PromptInput, new_ids: list[int]) -> Sample:
        token_ids, ended = self.chat.cut_at_end(new_ids)
        return Sample(prompt=prompt, text=self.chat.decode(token_ids), token_ids=token_ids, ended_with_eos=ended,
                      num_tokens=len(token_ids))


def model_end_ids(model: PreTrainedModel) -> tuple[int, ...]:
    """The end ids a loaded model's generation config carries (`load_policy` puts the folder's declared ones there)."""
    eos = model.generation_config.eos_token_id
    return tuple(eos) if isinstance(eos, list) else (() if eos is None else (eos,))
