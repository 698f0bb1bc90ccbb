"""A round's pairs by the loop's selector (step 2 of a round): the candidates, what the reward model knows about them,
and `labeling.queue.selection`'s choice, highest score first.

- `random`: seeded random pairs.
- `disagreement`: the spread of the ensemble members' P(first preferred) (random while no ensemble exists).
- `thompson`, `info_gain`, `diverse`, `d_optimal`: the reward model's last layer as a Gaussian posterior
  (`labeling.queue.posterior`, Laplace around each member's head, from the labelled pairs' features), costing one
  forward per member over the candidates and the labelled pairs. Before the first reward model (round 1) the features
  are the reward base's (the model the reward model will start from) and only the prior is known, so the selectors still
  spread the labels over what the base tells apart.

A pair with a side too long for the reward model's context (as its tokenizer reads the texts) is no candidate, and a
labelled pair too long for it informs no posterior (it trained no reward model either).

    pairs = choose_pairs(store, config, samples, prompts_by_id, wanted=150, seed=seed, round=g)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from labeling.queue.posterior import (
    LastLayerPosterior,
    calibrated_prior,
    fisher_weights,
    pair_probabilities,
    prior_precision,
)
from labeling.queue.selection import (
    Candidate,
    candidate_pairs,
    select_by_disagreement,
    select_by_information_gain,
    select_d_optimal,
    select_diverse,
    select_double_thompson,
)
from labeling.transfer.conversations import PromptInput
from storage import Store
from storage.errors import InvalidInput
from storage.labels import training_labels
from storage.pairs import NewPair, list_pairs
from storage.policies import latest_policy
from storage.reward_models import latest_reward_models
from storage.types import Generation, Selector

from ..models.loading import default_device
from ..reward.config import RewardConfig
from ..reward.scorer import INFO_FILE, RewardScorer
from .config import LoopConfig
from .sampling import random_pairs

DRAWS = 64  # posterior draws of the head (split over the ensemble's members) for thompson, info_gain and diverse


def choose_pairs(store: Store, config: LoopConfig, samples: list[Generation], prompts: Mapping[int, PromptInput],
                 wanted: int, seed: int, round: int, older: Sequence[Generation] = ()) -> list[NewPair]:
    """Up to `wanted` new pairs of `samples` (two responses to one prompt, or one and an earlier version's response
    to it from `older`; not queued before) by `config.selector`."""
    selector = Selector(config.selector)
    members = latest_reward_models(store)
    if selector == Selector.RANDOM or (selector == Selector.DISAGREEMENT and len(members) < 2):
        return random_pairs(store, samples, wanted, seed, round, older)
    from ..reward.scorer import fitting_pairs
    from ..reward.scorer import pair_probabilities as member_probabilities

    queued = [(p.first_id, p.second_id) for p in list_pairs(store)]
    candidates = candidate_pairs(samples, exclude=queued, older=older)
    if selector == Selector.DISAGREEMENT:
        scorer = RewardScorer.from_store(store, device=default_device())
        candidates, probs = fitting_pairs(candidates, member_probabilities(scorer, candidates, prompts))
        return select_by_disagreement(candidates, probs, wanted, round)
    if not candidates:
        return []
    view = PosteriorView.build(store, candidates, prompts)
    candidates = view.candidates
    if not candidates:
        return []
    if selector == Selector.D_OPTIMAL:
        diffs = view.candidate_diffs[0]
        return select_d_optimal(candidates, diffs, fisher_weights(view.heads[0], diffs), view.posteriors[0].precision,
                                wanted, round)
    rng = np.random.default_rng(seed)
    draws = [posterior.draws(max(2, DRAWS // len(view.posteriors)), rng) for posterior in view.posteriors]
    if selector == Selector.THOMPSON:
        rewards = np.concatenate([d @ f.T for d, f in zip(draws, view.response_features, strict=True)])  # (S, R)
        return select_double_thompson(candidates, rewards, view.response_ids, wanted, seed, round)
    probs = np.concatenate([pair_probabilities(d, z) for d, z in zip(draws, view.candidate_diffs, strict=True)])
    if selector == Selector.INFO_GAIN:
        return select_by_information_gain(candidates, probs, wanted, round)
    return select_diverse(candidates, probs, view.prompt_features, view.labelled_prompt_features, wanted,
                          round=round)


@dataclass(frozen=True)
class PosteriorView:
    """The candidates as the newest reward model's members (or, before one exists, the reward base) see them: per
    member k, features of each response (K, R, d), of each candidate's difference (K, P, d), the head (K, d) and its
    posterior; the first member's features of the candidates' prompts and of the labelled prompts (for `diverse`).
    `candidates` are those both of whose sides fit the model's context."""

    candidates: list[Candidate]
    response_ids: list[int]
    response_features: np.ndarray
    candidate_diffs: np.ndarray
    heads: np.ndarray
    posteriors: list[LastLayerPosterior]
    prompt_features: dict[int, np.ndarray]
    labelled_prompt_features: np.ndarray

    @classmethod
    def build(cls, store: Store, candidates: Sequence[Candidate], prompts: Mapping[int, PromptInput]
              ) -> "PosteriorView":
        device = default_device()
        members = latest_reward_models(store)
        if members:
            scorer = RewardScorer.from_store(store, device=device)
            heads = scorer.heads().cpu().numpy()  # (K, d)
            validated = set(json.loads((Path(members[0].path) / INFO_FILE).read_text()).get("val_pair_ids", []))
        else:  # no reward model yet: the base's features, an untrained head (w = 0)
            scorer = RewardScorer.from_dirs([base_model(store)], norms=[(0.0, 1.0)], device=device)
            heads = np.zeros_like(scorer.heads().cpu().numpy())
            validated = set()
        responses = {g.id: g for c in candidates for g in (c.first, c.second)}
        features = scorer.features([prompts[g.prompt_id] for g in responses.values()],
                                   [g.text for g in responses.values()]).cpu().numpy()  # (K, R, d)
        fit = {gen_id for gen_id, row in zip(responses, features[0], strict=True) if not np.isnan(row).any()}
        candidates = [c for c in candidates if c.first.id in fit and c.second.id in fit]  # the others: too long
        features = features[:, [i for i, gen_id in enumerate(responses) if gen_id in fit]]
        responses = {gen_id: g for gen_id, g in responses.items() if gen_id in fit}
        column = {gen_id: i for i, gen_id in enumerate(responses)}
        first = [column[c.first.id] for c in candidates]
        second = [column[c.second.id] for c in candidates]
        candidate_diffs = features[:, first] - features[:, second]  # (K, P, d)
        labelled = [lp for lp in training_labels(store)  # those that trained it: none of excluded prompts
                    if lp.outcome.target(True) is not None and not lp.prompt_excluded]
        pair_texts = [lp.prompt_content for lp in labelled]
        both = scorer.features(pair_texts * 2, [lp.first for lp in labelled] + [lp.second for lp in labelled])
        labelled_diffs = (both[:, :len(labelled)] - both[:, len(labelled):]).cpu().numpy()  # (K, n, d)
        known = ~np.isnan(labelled_diffs[0]).any(-1)  # a pair too long for the model trained none of it: left out
        labelled = [lp for lp, fits in zip(labelled, known, strict=True) if fits]
        pair_texts = [lp.prompt_content for lp in labelled]
        labelled_diffs = labelled_diffs[:, known]
        is_val = np.array([lp.pair_id in validated for lp in labelled], dtype=bool)
        targets = np.array([lp.outcome.target(True) for lp in labelled], dtype=float)
        priors = [calibrated_prior(head, labelled_diffs[k][~is_val], labelled_diffs[k][is_val], targets[is_val])
                  if members else prior_precision(candidate_diffs[k]) for k, head in enumerate(heads)]
        posteriors = [LastLayerPosterior.laplace(head, labelled_diffs[k], prior)
                      for k, (head, prior) in enumerate(zip(heads, priors, strict=True))]
        prompt_ids = sorted({c.prompt_id for c in candidates})
        prompt_texts = [prompts[i] for i in prompt_ids] + list({str(t): t for t in pair_texts}.values())
        prompt_rows = scorer.features(prompt_texts, [""] * len(prompt_texts))[0].cpu().numpy()  # (Q + m, d)
        labelled_rows = prompt_rows[len(prompt_ids):]
        return cls(candidates, list(responses), features, candidate_diffs, heads, posteriors,
                   dict(zip(prompt_ids, prompt_rows[:len(prompt_ids)], strict=True)),
                   labelled_rows[~np.isnan(labelled_rows).any(-1)])  # a prompt over the context alone: left out


def base_model(store: Store) -> str:
    """The model the first reward model will start from (the project's reward base, else the SFT root)."""
    from ..jobs.reward_job import reward_base

    policy = latest_policy(store)
    if policy is None:
        raise InvalidInput("no policy version is registered; add the SFT policy before queueing pairs")
    return reward_base(store, RewardConfig(), policy)
