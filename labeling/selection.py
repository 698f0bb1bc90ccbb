"""Pair selection: which pairs of one policy's generations go to the label queue, in which order.

Pure functions: generations in, `storage.pairs.NewPair`s out (ready for `storage.pairs.add_pairs`).
`candidate_pairs` forms every pair of distinct responses to the same prompt; a selector scores the candidates
and keeps the best `n`, highest score first (the queue serves pairs in that order):

- `select_random`: a seeded random score, so the order is random but reproducible.
- `select_by_disagreement`: the spread (std across ensemble members) of the members' predicted
  P(first preferred); the members' probabilities are computed by `trainers.reward.scorer.pair_probabilities`.

    candidates = candidate_pairs(list_generations(store, policy_id=policy.id))
    add_pairs(store, select_random(candidates, n=64, seed=round_seed, round=r))
"""

from __future__ import annotations

import itertools
import random
from collections import defaultdict
from dataclasses import dataclass
from enum import StrEnum
from typing import Iterable, Sequence

import numpy as np

from storage.errors import InvalidInput
from storage.pairs import NewPair
from storage.types import Generation


class Selector(StrEnum):
    """How a round's pairs are chosen; each queued pair keeps its selector's value."""

    RANDOM = "random"
    DISAGREEMENT = "disagreement"


@dataclass(frozen=True)
class Candidate:
    """Two different responses to one prompt; `first` is the one with the lower generation id."""

    first: Generation
    second: Generation

    @property
    def prompt_id(self) -> int:
        return self.first.prompt_id

    @property
    def key(self) -> tuple[int, int]:
        return (self.first.id, self.second.id)


def candidate_pairs(generations: Iterable[Generation], exclude: Iterable[tuple[int, int]] = ()) -> list[Candidate]:
    """Every pair of generations of the same prompt whose texts differ, in (prompt, first id, second id) order.

    Identical texts are never paired (nothing to compare). `exclude` holds (first_id, second_id) pairs already
    queued, in either order, so refilling the queue from the same generations adds only new pairs.
    """
    seen = {tuple(sorted(key)) for key in exclude}
    by_prompt: dict[int, list[Generation]] = defaultdict(list)
    for generation in generations:
        by_prompt[generation.prompt_id].append(generation)
    candidates = []
    for prompt_id in sorted(by_prompt):
        for first, second in itertools.combinations(sorted(by_prompt[prompt_id], key=lambda g: g.id), 2):
            if first.text != second.text and (first.id, second.id) not in seen:
                candidates.append(Candidate(first, second))
    return candidates


def select_random(candidates: Sequence[Candidate], n: int | None = None, seed: int = 0,
                  round: int = 0) -> list[NewPair]:
    """Up to `n` candidates (all when None) under a seeded random score, highest score first."""
    rng = random.Random(seed)
    return _top(candidates, [rng.random() for _ in candidates], Selector.RANDOM, n, round)


def disagreement_scores(member_probs: np.ndarray) -> np.ndarray:
    """Std across ensemble members (axis 0) of P(first preferred): (K, P) -> (P,)."""
    probs = np.asarray(member_probs, dtype=float)
    if probs.ndim != 2 or probs.shape[0] < 2:
        raise InvalidInput("disagreement needs an ensemble of at least 2 reward models; train with --ensemble 2 "
                           "or more")
    return probs.std(axis=0)


def select_by_disagreement(candidates: Sequence[Candidate], member_probs: np.ndarray, n: int | None = None,
                           round: int = 0) -> list[NewPair]:
    """Up to `n` candidates on which the ensemble disagrees most; `member_probs` is (K members, len(candidates))."""
    scores = disagreement_scores(member_probs)
    if scores.shape[0] != len(candidates):
        raise ValueError(f"member_probs has {scores.shape[0]} columns for {len(candidates)} candidates")
    return _top(candidates, scores.tolist(), Selector.DISAGREEMENT, n, round)


def _top(candidates: Sequence[Candidate], scores: list[float], selector: Selector, n: int | None,
         round: int) -> list[NewPair]:
    """The `n` best-scored candidates as NewPairs, highest score first (ties keep candidate order)."""
    if n is not None and n < 0:
        raise InvalidInput(f"the number of pairs must be 0 or more, got {n}")
    order = sorted(range(len(candidates)), key=lambda i: -scores[i])[:n]
    return [NewPair(prompt_id=candidates[i].prompt_id, first_id=candidates[i].first.id,
                    second_id=candidates[i].second.id, selector=selector.value, score=float(scores[i]), round=round,
                    policy_id=candidates[i].first.policy_id)
            for i in order]
