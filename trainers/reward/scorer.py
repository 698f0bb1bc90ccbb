"""Scoring with a trained reward model: `RewardScorer` (every ensemble member, normalised rewards for PPO, per-member
preference probabilities for the disagreement selector) and the last-token score both training and scoring use.

    scorer = RewardScorer.from_store(store)          # the newest reward model (all its ensemble members)
    rewards = scorer.score(prompts, responses)       # (N,) normalised: mean 0, std 1 on the policy's samples
    probs = pair_probabilities(scorer, candidates, prompt_texts)   # (K, P), for labeling.queue.selection

A checkpoint is a plain HF directory (`AutoModelForSequenceClassification`) with `reward_info.json` beside it.

The scorer counts the tokens it would feed: a prompt and response longer than the reward model's context (a sampled
response's decoded text may take more tokens than it was sampled in, e.g. with replacement characters) is never fed
(nothing is cut): its score is NaN, and `too_long` counts such rows. Callers leave those out and count them.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Iterator, Mapping, Sequence

import numpy as np
import torch
from transformers import DynamicCache, PreTrainedModel
from transformers.utils import logging as hf_logging

from labeling.transfer.conversations import PromptInput
from storage import Store
from storage.errors import NotFound
from storage.reward_models import latest_reward_models

from ..models.chat_format import CONTEXT_KEYS, ChatFormat
from ..models.loading import load_chat_format, load_reward_model, load_tokenizer
from ..models.sampling import CPU_PASS_TOKENS, cache_keyword, length_chunks
from .batches import pad_right, prompted_rows, whole_rows

INFO_FILE = "reward_info.json"


def sequence_scores(model: PreTrainedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The head's score of each row's last real token, (N,), for left, right or mixed padding."""
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # (N, T): real tokens at 0, 1, 2... whatever the pads
    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False)
    return out.logits[:, 0]


def prompted_scores(model: PreTrainedModel, rows: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """The head's score of each response after its prompt (`trainers.reward.batches.prompted_rows`), (N,): what
    `sequence_scores` gives the whole rows, but each distinct prompt is read once and its keys and values go to its
    responses, read in chunks of like length on a CPU (`length_chunks`). Whole rows where a layer's cache is not
    plain (sliding windows), where gradient checkpointing would drop it, or with no prompt tokens at all."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    checkpointing = torch.is_grad_enabled() and any(getattr(m, "gradient_checkpointing", False)
                                                    for m in model.modules())
    if checkpointing or any(DynamicCache(config=base.config).is_sliding) or not rows["prompt_ids"].shape[1]:
        return sequence_scores(model, *whole_rows(dict(rows)))
    prompt_mask, response_mask, owner = rows["prompt_mask"], rows["response_mask"], rows["prompt_of"]
    keyword, prompt_cache = cache_keyword(model), DynamicCache(config=base.config)
    model(input_ids=rows["prompt_ids"], attention_mask=prompt_mask, use_cache=True, **{keyword: prompt_cache},
          position_ids=(prompt_mask.cumsum(-1) - 1).clamp(min=0))
    lengths, starts = response_mask.sum(-1), prompt_mask.sum(-1)  # (N,), (U,)
    on_cpu = rows["response_ids"].device.type == "cpu"  # a GPU reads them all at once: one chunk
    chunks = length_chunks(lengths.tolist(), CPU_PASS_TOKENS) if on_cpu else [list(range(len(lengths)))]
    parts = []
    for chunk in chunks:
        index, width = torch.tensor(chunk, device=owner.device), int(lengths[chunk[0]])
        prompts = owner[index]
        cache = DynamicCache(ddp_cache_data=[(layer.keys[prompts], layer.values[prompts])
                                             for layer in prompt_cache.layers], config=base.config)
        positions = starts[prompts, None] + torch.arange(width, device=owner.device)  # (n, width): after the prompt
        out = model(input_ids=rows["response_ids"][index, :width],
                    attention_mask=torch.cat([prompt_mask[prompts], response_mask[index, :width]], 1),
                    position_ids=positions, use_cache=True, **{keyword: cache})
        parts.append(out.logits[:, 0])  # the last non-pad token of the response
    order = torch.tensor([i for c in chunks for i in c], device=owner.device)  # (N,) rows in chunk order
    return torch.cat(parts)[torch.argsort(order)]


def model_context(model: PreTrainedModel) -> int | None:
    """The most tokens the model reads (its config's `n_positions` or `max_position_embeddings`), None if unnamed."""
    config = model.config.get_text_config()
    values = (getattr(config, key, None) for key in CONTEXT_KEYS)
    return next((value for value in values if isinstance(value, int) and value > 0), None)


def score_head(model: PreTrainedModel) -> torch.nn.Linear:
    """The reward model's linear score head (`score` in transformers' sequence classifiers of causal LMs)."""
    head = getattr(model, "score", None)
    if not isinstance(head, torch.nn.Linear) or head.out_features != 1:
        raise ValueError(f"{type(model).__name__} has no linear `score` head with one output; the posterior "
                         "selectors read the head's input, so use the random or disagreement selector")
    return head


def sequence_features(model: PreTrainedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The last-layer features (the score head's input) at the token `sequence_scores` scores, (N, d): the head's
    weights times these are the scores, which is checked."""
    captured = []
    handle = score_head(model).register_forward_hook(lambda module, args, output: captured.append(args[0]))
    try:
        scores = sequence_scores(model, input_ids, attention_mask)  # (N,)
    finally:
        handle.remove()
    hidden = captured[0]  # (N, T, d)
    pad_id = model.config.get_text_config().pad_token_id
    if pad_id is None:
        last = torch.full((len(input_ids),), input_ids.shape[1] - 1, device=hidden.device)
    else:  # transformers scores the rightmost token that is not padding
        positions = torch.arange(input_ids.shape[1], device=hidden.device)
        last = (positions * (input_ids != pad_id).to(hidden.device, torch.long)).argmax(-1)  # (N,)
    features = hidden[torch.arange(len(input_ids), device=hidden.device), last]  # (N, d)
    head = score_head(model)
    assert torch.allclose(head(features)[:, 0].float(), scores.float(), atol=1e-3, rtol=1e-3), \
        f"{type(model).__name__} scores another token than its last non-pad one"
    return features


@contextlib.contextmanager
def quiet_loading() -> Iterator[None]:
    """Silence transformers' loading warnings and progress bars for the duration (they are expected here)."""
    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


class RewardScorer:
    """Scores prompts (text or conversations) and response texts with a reward model (all members of an ensemble).

    Texts become ids through the reward model's own `ChatFormat` (`sequences_ids`: the prompt, then the response
    closed by its end-of-turn id), exactly as its training data did, whatever tokenizer the policy has. `score`
    (also the scorer called as a function) is what PPO uses: each member's score normalised with its (mean, std)
    on the policy's samples, averaged over the members, shape (N,), on the scorer's device. `raw_scores` and
    `preference_probabilities` are per member. A row over the reward model's `context` is NaN, counted in `too_long`.
    """

    def __init__(self, models: list[PreTrainedModel], chat: ChatFormat, pad_id: int,
                 norms: list[tuple[float, float]], batch_size: int = 64):
        assert len(models) == len(norms) >= 1, "one (mean, std) per member"
        self.models, self.chat, self.pad_id, self.batch_size = models, chat, pad_id, batch_size
        self.device = models[0].device
        self.context = model_context(models[0])  # members share a base, so a context
        self.too_long = 0  # rows left out (NaN) so far: over the context
        self.norm_mean = torch.tensor([m for m, _ in norms], device=self.device)  # (K,)
        self.norm_std = torch.tensor([s for _, s in norms], device=self.device)  # (K,)

    @classmethod
    def from_store(cls, store: Store, device: str | torch.device | None = None, batch_size: int = 64) -> "RewardScorer":
        """The newest registered reward model, every ensemble member; raises NotFound when none is registered."""
        members = latest_reward_models(store)
        if not members:
            raise NotFound("no reward model is registered; train one first (python app.py train-reward)")
        norms = [(m.norm_mean, m.norm_std) for m in members]
        return cls.from_dirs([m.path for m in members], norms, device, batch_size)

    @classmethod
    def from_dirs(cls, paths: Sequence[str | Path], norms: list[tuple[float, float]] | None = None,
                  device: str | torch.device | None = None, batch_size: int = 64) -> "RewardScorer":
        """Members from checkpoint directories; norms default to those in reward_info.json."""
        if norms is None:
            norms = [(i["norm_mean"], i["norm_std"]) for i in (json.loads((Path(p) / INFO_FILE).read_text())
                                                                for p in paths)]
        with quiet_loading():
            models = [load_reward_model(p).to(device or "cpu") for p in paths]
        tokenizer = load_tokenizer(paths[0])
        return cls(models, load_chat_format(paths[0], tokenizer), tokenizer.pad_token_id, norms, batch_size)

    @classmethod
    def on_shared_base(cls, peft_model, paths: Sequence[str | Path], norms: list[tuple[float, float]],
                       batch_size: int = 64) -> "RewardScorer":
        """Members trained as LoRA adapters (`reward_lora`), scoring on the policy's `peft_model` (their base) with
        their adapters and heads: no second copy of the base (`trainers.reward.shared_base`)."""
        from .shared_base import attach_reward_adapters

        tokenizer = load_tokenizer(paths[0])
        models = attach_reward_adapters(peft_model, paths, tokenizer.pad_token_id)
        return cls(models, load_chat_format(paths[0], tokenizer), tokenizer.pad_token_id, norms, batch_size)

    @property
    def size(self) -> int:
        return len(self.models)

    def fitting(self, lengths: Sequence[int]) -> list[int]:
        """The indices of the rows of `lengths` tokens that fit the context; the others are counted in `too_long`."""
        fit = [i for i, n in enumerate(lengths) if self.context is None or n <= self.context]
        self.too_long += len(lengths) - len(fit)
        return fit

    @torch.no_grad()
    def raw_scores(self, prompts: Sequence[PromptInput], responses: Sequence[str]) -> torch.Tensor:
        """Each member's unnormalised score of each prompt and response: (K, N); NaN for a row over the context."""
        prompt_ids = self.chat.prompts_ids(list(prompts))
        response_ids = self.chat.responses_ids(list(responses))
        fit = self.fitting([len(p) + len(r) for p, r in zip(prompt_ids, response_ids, strict=True)])
        order = sorted(fit, key=lambda i: -len(response_ids[i]))  # like lengths pad little
        out = torch.full((self.size, len(prompt_ids)), torch.nan, device=self.device)  # (K, N)
        for start in range(0, len(order), self.batch_size):
            batch = order[start:start + self.batch_size]
            rows = prompted_rows([prompt_ids[i] for i in batch], [response_ids[i] for i in batch], self.pad_id)
            rows = {name: value.to(self.device) for name, value in rows.items()}
            for k, model in enumerate(self.models):
                out[k, batch] = prompted_scores(model, rows).float()
        return out

    @torch.no_grad()
    def features(self, prompts: Sequence[PromptInput], responses: Sequence[str]) -> torch.Tensor:
        """Each member's last-layer features of each prompt and response (the input of its score head): (K, N, d);
        NaN for a row over the context."""
        rows = self.chat.sequences_ids(list(prompts), list(responses))
        fit = self.fitting([len(row) for row in rows])
        out = torch.full((self.size, len(rows), score_head(self.models[0]).in_features), torch.nan,
                         device=self.device)  # (K, N, d)
        for start in range(0, len(fit), self.batch_size):
            batch = fit[start:start + self.batch_size]
            input_ids, attention_mask = pad_right([rows[i] for i in batch], self.pad_id)
            out[:, batch] = torch.stack([sequence_features(model, input_ids.to(self.device),
                                                           attention_mask.to(self.device)).float()
                                         for model in self.models])
        return out

    def heads(self) -> torch.Tensor:
        """Each member's score-head weights, (K, d): raw score = head · features."""
        return torch.stack([score_head(model).weight[0].detach().float() for model in self.models])

    def score(self, prompts: Sequence[PromptInput], responses: Sequence[str]) -> torch.Tensor:
        """Normalised rewards (N,): mean over members of (score - mean) / std."""
        return self.normalise(self.raw_scores(prompts, responses))

    __call__ = score  # a reward function `(prompts, responses) -> (N,)`, like the oracle

    def normalise(self, raw: torch.Tensor) -> torch.Tensor:
        """(K, N) raw member scores -> (N,) mean of the members' normalised scores."""
        return ((raw - self.norm_mean[:, None]) / self.norm_std[:, None]).mean(0)

    def preference_probabilities(self, prompts: Sequence[PromptInput], firsts: Sequence[str],
                                 seconds: Sequence[str]) -> torch.Tensor:
        """Each member's P(first preferred) = sigmoid(r_first - r_second): (K, N)."""
        raw = self.raw_scores(list(prompts) * 2, list(firsts) + list(seconds))  # (K, 2N)
        first, second = raw.chunk(2, dim=1)
        return torch.sigmoid(first - second)


def pair_probabilities(scorer: RewardScorer, candidates: Sequence, prompts: Mapping[int, PromptInput]) -> np.ndarray:
    """(K, P) members' P(first preferred) = sigmoid(r_first - r_second) of `labeling.queue.selection.Candidate`s, for
    `select_by_disagreement` and the check pairs; each response is scored once, however many pairs it is in. NaN for
    a pair with a side over the reward model's context (`fitting_pairs` leaves those out).

    `prompts` maps each candidate's prompt id to the prompt (`Prompt.content`).
    """
    if not candidates:
        return np.zeros((scorer.size, 0))
    samples = {g.id: g for c in candidates for g in (c.first, c.second)}
    index = {sample_id: i for i, sample_id in enumerate(samples)}
    raw = scorer.raw_scores([prompts[g.prompt_id] for g in samples.values()], [g.text for g in samples.values()])
    first = torch.tensor([index[c.first.id] for c in candidates], device=raw.device)
    second = torch.tensor([index[c.second.id] for c in candidates], device=raw.device)
    return torch.sigmoid(raw[:, first] - raw[:, second]).cpu().numpy()  # (K, P)


def fitting_pairs(candidates: Sequence, probabilities: np.ndarray) -> tuple[list, np.ndarray]:
    """The candidates whose `pair_probabilities` are known (both sides fit the reward model's context) and their
    (K, P') probabilities; the round counts the samples left out (`trainers.loop.prompt_use`)."""
    known = ~np.isnan(probabilities).any(0) if probabilities.size else np.ones(len(candidates), dtype=bool)
    return [c for c, keep in zip(candidates, known, strict=True) if keep], probabilities[:, known]
