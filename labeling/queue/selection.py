"""Pair selection: which pairs of one policy's generations go to the label queue, in which order.

Pure functions: generations in, `storage.pairs.NewPair`s out (ready for `storage.pairs.add_pairs`).
`candidate_pairs` forms every pair of distinct responses to the same prompt (and, given an earlier version's
responses, every pair of a new one with an earlier one); a selector scores the candidates
and keeps the best `n`, highest score first (the queue serves pairs in that order):

- `select_random`: a seeded random score, so the order is random but reproducible.
- `select_by_disagreement`: the spread (std across ensemble members) of the members' predicted
  P(first preferred); the members' probabilities are computed by `trainers.reward.scorer.pair_probabilities`.

The others read what the reward model does not know from reward functions it cannot tell apart (draws of its head
from `labeling.queue.posterior`, or ensemble members), computed by `trainers.loop.selecting`:

- `select_double_thompson` (Dwaracherla et al. 2024): per prompt, the best response under one draw against the best
  other response under another draw, one pair per prompt in turn.
- `select_by_information_gain` (BALD): the expected information a label brings about the reward model, H(E p) - E H(p)
  over the draws' P(first preferred); 0 for a pair every draw agrees on.
- `select_diverse` (BAL-PM-style, Melo et al. 2024): information gain plus the log distance of the pair's prompt to
  the nearest prompt labelled or chosen before, greedily, so the batch does not spend its labels on one prompt.
- `select_d_optimal` (Shen et al. 2025): greedy maximisation of log det of the Fisher information of the head,
  Λ + Σ σ'(w·z) z zᵀ over the chosen pairs' feature differences z: each pick the direction the labels know least.

    candidates = candidate_pairs(list_generations(store, policy_id=policy.id))
    add_pairs(store, select_random(candidates, n=64, seed=round_seed, round=r))
"""

from __future__ import annotations

import itertools
import random
from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import numpy as np

from storage.errors import InvalidInput
from storage.pairs import NewPair
from storage.types import Generation, Selector

POSTERIOR_SELECTORS = frozenset({Selector.THOMPSON, Selector.INFO_GAIN, Selector.DIVERSE, Selector.D_OPTIMAL})


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


def candidate_pairs(generations: Iterable[Generation], exclude: Iterable[tuple[int, int]] = (),
                    older: Iterable[Generation] = ()) -> list[Candidate]:
    """Every pair of generations of the same prompt whose texts differ, in (prompt, first id, second id) order; with
    `older` (an earlier version's generations) also every pair of one of `generations` with one of `older` of its
    prompt, never two of `older`.

    Identical texts are never paired (nothing to compare). `exclude` holds (first_id, second_id) pairs already
    queued, in either order, so refilling the queue from the same generations adds only new pairs.
    """
    seen = {tuple(sorted(key)) for key in exclude}
    by_prompt: dict[int, list[Generation]] = defaultdict(list)
    for generation in generations:
        by_prompt[generation.prompt_id].append(generation)
    earlier: dict[int, list[Generation]] = defaultdict(list)
    for generation in older:
        earlier[generation.prompt_id].append(generation)
    candidates = []
    for prompt_id in sorted(by_prompt):
        new = by_prompt[prompt_id]
        pairs = [*itertools.combinations(new, 2), *itertools.product(new, earlier.get(prompt_id, []))]
        ordered = (sorted(pair, key=lambda g: g.id) for pair in pairs)  # the lower id first
        for first, second in sorted(ordered, key=lambda pair: (pair[0].id, pair[1].id)):
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
    _check_columns(scores, candidates)
    return _top(candidates, scores.tolist(), Selector.DISAGREEMENT, n, round)


def binary_entropy(p: np.ndarray) -> np.ndarray:
    """-(p log p + (1-p) log(1-p)) in nats, 0 at p = 0 and 1."""
    p = np.clip(np.asarray(p, dtype=float), 0.0, 1.0)
    q = 1.0 - p
    return -(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0)
             + np.where(q > 0, q * np.log(np.where(q > 0, q, 1.0)), 0.0))


def information_gain(member_probs: np.ndarray) -> np.ndarray:
    """BALD: mutual information between a pair's label and the reward model, H(mean p) - mean H(p) over the draws
    (axis 0) of P(first preferred): (S, P) -> (P,), in nats. 0 when every draw agrees (a certain pair, or one every
    draw calls a coin toss); at most log 2."""
    probs = np.asarray(member_probs, dtype=float)
    if probs.ndim != 2 or probs.shape[0] < 2:
        raise InvalidInput("information gain needs 2 or more draws of the reward model")
    return np.maximum(binary_entropy(probs.mean(axis=0)) - binary_entropy(probs).mean(axis=0), 0.0)


def select_by_information_gain(candidates: Sequence[Candidate], member_probs: np.ndarray, n: int | None = None,
                               round: int = 0) -> list[NewPair]:
    """Up to `n` candidates whose labels tell most about the reward model; `member_probs` is (S draws, P)."""
    scores = information_gain(member_probs)
    _check_columns(scores, candidates)
    return _top(candidates, scores.tolist(), Selector.INFO_GAIN, n, round)


def select_diverse(candidates: Sequence[Candidate], member_probs: np.ndarray, prompt_features: Mapping[int, np.ndarray],
                   labelled: np.ndarray | None = None, n: int | None = None, weight: float = 1.0,
                   round: int = 0) -> list[NewPair]:
    """Greedy: information gain (as a share of the candidates' mean) plus `weight` x log of the distance from the
    pair's prompt features (`prompt_features[prompt_id]`) to the nearest prompt labelled before (`labelled`, (m, e))
    or chosen in this batch, in units of the mean distance between the candidates' distinct prompts (floored at 1%
    of it, capped at 10⁶). Once every prompt is taken its distance is 0 and information gain alone decides."""
    gain = information_gain(member_probs)
    _check_columns(gain, candidates)
    gain = gain / gain.mean() if gain.mean() > 0 else gain
    ids = sorted({c.prompt_id for c in candidates})
    row = {prompt_id: i for i, prompt_id in enumerate(ids)}
    features = np.stack([np.asarray(prompt_features[i], dtype=float) for i in ids])  # (Q, e)
    between = np.linalg.norm(features[:, None, :] - features[None, :, :], axis=-1)  # (Q, Q)
    apart = between[~np.eye(len(ids), dtype=bool)]
    unit = float(apart.mean()) if apart.size and apart.mean() > 0 else 1.0
    nearest = np.full(len(ids), np.inf)  # (Q,): each prompt's distance to the nearest prompt taken
    if labelled is not None and len(labelled):
        labelled = np.asarray(labelled, dtype=float)
        nearest = np.linalg.norm(features[:, None, :] - labelled[None, :, :], axis=-1).min(axis=1)
    prompt_row = np.array([row[c.prompt_id] for c in candidates])
    taken = np.zeros(len(candidates), dtype=bool)
    order, scores = [], []
    for _ in range(_count(n, len(candidates))):
        spread = np.log(np.clip(nearest[prompt_row] / unit, 0.01, 1e6))
        value = np.where(taken, -np.inf, gain + weight * spread)
        best = int(np.argmax(value))
        order.append(best)
        scores.append(float(value[best]))
        taken[best] = True
        nearest = np.minimum(nearest, between[prompt_row[best]])
    return _pairs(candidates, order, _non_increasing(scores), Selector.DIVERSE, round)


def d_optimal_order(diffs: np.ndarray, weights: np.ndarray, precision: np.ndarray, n: int | None = None
                    ) -> tuple[list[int], list[float]]:
    """Greedy D-optimal design: the indices of up to `n` rows of `diffs` (P, d) and each pick's gain in log det of
    the information matrix, which starts at `precision` (d, d) and grows by weights[i] z_i z_iᵀ per pick. A pick's
    gain is log(1 + w zᵀ Λ⁻¹ z) (the matrix determinant lemma); Λ⁻¹ is updated by Sherman-Morrison."""
    diffs, weights = np.asarray(diffs, dtype=float), np.asarray(weights, dtype=float)
    projected = diffs @ np.linalg.inv(precision)  # (P, d): Λ⁻¹ z_i (Λ symmetric)
    quadratic = np.einsum("pd,pd->p", projected, diffs)  # (P,): z_iᵀ Λ⁻¹ z_i
    taken = np.zeros(len(diffs), dtype=bool)
    order, gains = [], []
    for _ in range(_count(n, len(diffs))):
        gain = np.where(taken, -np.inf, np.log1p(weights * np.maximum(quadratic, 0.0)))
        best = int(np.argmax(gain))
        order.append(best)
        gains.append(float(gain[best]))
        taken[best] = True
        u = projected[best].copy()  # (d,): Λ⁻¹ z_b
        c = weights[best] / (1.0 + weights[best] * quadratic[best])
        along = diffs @ u  # (P,): z_iᵀ Λ⁻¹ z_b
        projected -= c * along[:, None] * u[None, :]
        quadratic -= c * along**2
    return order, gains


def select_d_optimal(candidates: Sequence[Candidate], diffs: np.ndarray, weights: np.ndarray, precision: np.ndarray,
                     n: int | None = None, round: int = 0) -> list[NewPair]:
    """Up to `n` candidates by greedy D-optimal design on their feature differences `diffs` (P, d) with Fisher
    weights σ'(w·z) `weights` (P,), from the information `precision` (d, d) the labels so far give."""
    if len(diffs) != len(candidates):
        raise ValueError(f"diffs has {len(diffs)} rows for {len(candidates)} candidates")
    order, gains = d_optimal_order(diffs, weights, precision, n)
    return _pairs(candidates, order, _non_increasing(gains), Selector.D_OPTIMAL, round)


def select_double_thompson(candidates: Sequence[Candidate], rewards: np.ndarray, response_ids: Sequence[int],
                           n: int | None = None, seed: int = 0, round: int = 0) -> list[NewPair]:
    """Double Thompson sampling: `rewards` (S, R) holds S reward functions the reward model cannot tell apart
    (posterior draws or ensemble members) on the R responses `response_ids`. In passes over the prompts (in a seeded
    random order), each prompt gives one pair: under a draw picked at random, its best response a; under another, the
    best response b that a still has a candidate pair with. Up to `n` pairs, in the order picked (scores fall)."""
    rewards = np.asarray(rewards, dtype=float)
    column = {gen_id: i for i, gen_id in enumerate(response_ids)}
    if rewards.ndim != 2 or rewards.shape[1] != len(column):
        raise ValueError(f"rewards has shape {rewards.shape} for {len(column)} responses")
    unscored = {g for c in candidates for g in c.key} - set(column)
    if unscored:
        raise ValueError(f"responses {sorted(unscored)} of the candidates have no rewards")
    rng = np.random.default_rng(seed)
    left: dict[int, list[int]] = defaultdict(list)  # prompt id -> its candidates not yet picked
    for i, candidate in enumerate(candidates):
        left[candidate.prompt_id].append(i)
    wanted = _count(n, len(candidates))
    order: list[int] = []
    while len(order) < wanted:
        for prompt_id in rng.permutation(sorted(left)).tolist():
            if len(order) == wanted:
                break
            first_draw, second_draw = rewards[rng.integers(len(rewards))], rewards[rng.integers(len(rewards))]
            pairs = left[prompt_id]
            responses = sorted({g for i in pairs for g in candidates[i].key})
            a = max(responses, key=lambda g: first_draw[column[g]])
            with_a = [i for i in pairs if a in candidates[i].key]
            pick = max(with_a, key=lambda i: second_draw[column[_other(candidates[i], a)]])
            order.append(pick)
            pairs.remove(pick)
            if not pairs:
                del left[prompt_id]
    scores = [1.0 - k / max(1, wanted) for k in range(len(order))]
    return _pairs(candidates, order, scores, Selector.THOMPSON, round)


def _other(candidate: Candidate, gen_id: int) -> int:
    return candidate.second.id if candidate.first.id == gen_id else candidate.first.id


def _non_increasing(scores: list[float]) -> list[float]:
    """A greedy selector's scores as the queue serves them: each at most the one before (its running minimum)."""
    return np.minimum.accumulate(np.asarray(scores, dtype=float)).tolist() if scores else []


def _check_columns(scores: np.ndarray, candidates: Sequence[Candidate]) -> None:
    if scores.shape[0] != len(candidates):
        raise ValueError(f"member_probs has {scores.shape[0]} columns for {len(candidates)} candidates")


def _top(candidates: Sequence[Candidate], scores: list[float], selector: Selector, n: int | None,
         round: int) -> list[NewPair]:
    """The `n` best-scored candidates as NewPairs, highest score first (ties keep candidate order)."""
    order = sorted(range(len(candidates)), key=lambda i: -scores[i])[:_count(n, len(candidates))]
    return _pairs(candidates, order, [scores[i] for i in order], selector, round)


def _count(n: int | None, available: int) -> int:
    """How many pairs a selector returns: `n` (all when None), at most the `available` candidates."""
    if n is not None and n < 0:
        raise InvalidInput(f"the number of pairs must be 0 or more, got {n}")
    return available if n is None else min(n, available)


def _pairs(candidates: Sequence[Candidate], order: Sequence[int], scores: Sequence[float], selector: Selector,
           round: int) -> list[NewPair]:
    """NewPairs of `candidates[order[k]]` with score `scores[k]`, in that order."""
    return [NewPair(prompt_id=candidates[i].prompt_id, first_id=candidates[i].first.id,
                    second_id=candidates[i].second.id, selector=selector.value, score=float(score), round=round,
                    policy_id=candidates[i].first.policy_id)
            for i, score in zip(order, scores, strict=True)]
