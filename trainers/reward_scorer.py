"""Scoring with a trained reward model: `RewardScorer` (every ensemble member, normalised rewards for PPO, per-member
preference probabilities for the disagreement selector) and the last-token score both training and scoring use.

    scorer = RewardScorer.from_store(store)          # the newest reward model (all its ensemble members)
    rewards = scorer.score(prompts, responses)       # (N,) normalised: mean 0, std 1 on the policy's samples
    probs = pair_probabilities(scorer, candidates, prompt_texts)   # (K, P), for labeling.selection

A checkpoint is a plain HF directory (`AutoModelForSequenceClassification`) with `reward_info.json` beside it.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Iterator, Mapping, Sequence

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase
from transformers.utils import logging as hf_logging

from storage import Store
from storage.errors import NotFound
from storage.reward_models import latest_reward_models

from .models import load_reward_model, load_tokenizer
from .reward_data import encode, pad_right

INFO_FILE = "reward_info.json"


def sequence_scores(model: PreTrainedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The head's score of each row's last real token, (N,), for left, right or mixed padding."""
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # (N, T): real tokens at 0, 1, 2... whatever the pads
    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False)
    return out.logits[:, 0]


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
    """Scores `prompt + response` texts with a reward model (all members of an ensemble).

    `score` is what PPO uses: each member's score normalised with its (mean, std) on the policy's samples, averaged
    over the members, shape (N,), on the scorer's device. `raw_scores` and `preference_probabilities` are per member.
    """

    def __init__(self, models: list[PreTrainedModel], tokenizer: PreTrainedTokenizerBase,
                 norms: list[tuple[float, float]], max_length: int, batch_size: int = 64):
        assert len(models) == len(norms) >= 1, "one (mean, std) per member"
        self.models, self.tokenizer, self.max_length, self.batch_size = models, tokenizer, max_length, batch_size
        self.device = models[0].device
        self.norm_mean = torch.tensor([m for m, _ in norms], device=self.device)  # (K,)
        self.norm_std = torch.tensor([s for _, s in norms], device=self.device)  # (K,)

    @classmethod
    def from_store(cls, store: Store, device: str | torch.device | None = None, batch_size: int = 64) -> "RewardScorer":
        """The newest registered reward model, every ensemble member; raises NotFound when none is registered."""
        members = latest_reward_models(store)
        if not members:
            raise NotFound("no reward model is registered; train one first (python app.py train-reward)")
        return cls.from_dirs([m.path for m in members], [(m.norm_mean, m.norm_std) for m in members], device, batch_size)

    @classmethod
    def from_dirs(cls, paths: Sequence[str | Path], norms: list[tuple[float, float]] | None = None,
                  device: str | torch.device | None = None, batch_size: int = 64,
                  max_length: int | None = None) -> "RewardScorer":
        """Members from checkpoint directories; norms and max length default to those in reward_info.json."""
        info = [json.loads((Path(p) / INFO_FILE).read_text()) if (Path(p) / INFO_FILE).is_file() else {} for p in paths]
        if norms is None:
            norms = [(i["norm_mean"], i["norm_std"]) for i in info]
        with quiet_loading():
            models = [load_reward_model(p).to(device or "cpu") for p in paths]
        if max_length is None:
            max_length = info[0].get("max_length") or getattr(models[0].config, "max_position_embeddings", None) or 1 << 30
        return cls(models, load_tokenizer(paths[0]), norms, max_length, batch_size)

    @property
    def size(self) -> int:
        return len(self.models)

    @torch.no_grad()
    def raw_scores(self, prompts: Sequence[str], responses: Sequence[str]) -> torch.Tensor:
        """Each member's unnormalised score of each prompt + response + EOS: (K, N)."""
        rows = encode(self.tokenizer, prompts, responses, self.max_length)
        out = torch.empty((self.size, len(rows)), device=self.device)  # (K, N)
        for start in range(0, len(rows), self.batch_size):
            input_ids, attention_mask = pad_right(rows[start:start + self.batch_size], self.tokenizer.pad_token_id)
            for k, model in enumerate(self.models):
                out[k, start:start + len(input_ids)] = sequence_scores(
                    model, input_ids.to(self.device), attention_mask.to(self.device)).float()
        return out

    def score(self, prompts: Sequence[str], responses: Sequence[str]) -> torch.Tensor:
        """Normalised rewards (N,): mean over members of (score - mean) / std."""
        return self.normalise(self.raw_scores(prompts, responses))

    @torch.no_grad()
    def score_ids(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Normalised rewards (N,) of token ids already built as prompt + response + EOS, padded on either side."""
        input_ids, attention_mask = input_ids.to(self.device), attention_mask.to(self.device)
        return self.normalise(torch.stack([sequence_scores(m, input_ids, attention_mask).float() for m in self.models]))

    def normalise(self, raw: torch.Tensor) -> torch.Tensor:
        """(K, N) raw member scores -> (N,) mean of the members' normalised scores."""
        return ((raw - self.norm_mean[:, None]) / self.norm_std[:, None]).mean(0)

    def preference_probabilities(self, prompts: Sequence[str], firsts: Sequence[str],
                                 seconds: Sequence[str]) -> torch.Tensor:
        """Each member's P(first preferred) = sigmoid(r_first - r_second): (K, N)."""
        raw = self.raw_scores(list(prompts) * 2, list(firsts) + list(seconds))  # (K, 2N)
        first, second = raw.chunk(2, dim=1)
        return torch.sigmoid(first - second)


def pair_probabilities(scorer: RewardScorer, candidates: Sequence, prompts: Mapping[int, str]) -> np.ndarray:
    """(K, P) members' P(first preferred) of `labeling.selection.Candidate`s, for `select_by_disagreement`.

    `prompts` maps each candidate's prompt id to the prompt's text.
    """
    if not candidates:
        return np.zeros((scorer.size, 0))
    probs = scorer.preference_probabilities([prompts[c.prompt_id] for c in candidates],
                                            [c.first.text for c in candidates], [c.second.text for c in candidates])
    return probs.cpu().numpy()
