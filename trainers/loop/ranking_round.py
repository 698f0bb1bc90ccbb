"""A round's rankings (`rank_k` 3 to 6): sets of K of a prompt's samples chosen by the loop's selector, queued in a
random order that is stored (the annotator sees them as A, B, C, ...).

How the selectors choose K-sets: the candidates are every K-subset of one prompt's samples not queued before. With
`random` (and `disagreement` before an ensemble exists) they are drawn at random. With any other selector, the
selector scores every candidate pair of the round's samples (`selecting.choose_pairs`) and a K-set's score is the mean
of its C(K,2) pairs' scores, so the sets whose comparisons the selector wants most come first. Either way the sets are
taken round-robin over the prompts (one set per prompt before any prompt gets a second), so a round's rankings spread
over its prompts as its pairs do; the queue serves them in that order (random) or highest score first.

    queued = queue_round_rankings(store, config, samples, prompts, wanted=60, seed=seed, round=g)
"""

from __future__ import annotations

import random
from collections import defaultdict
from itertools import combinations
from typing import Mapping

from labeling.transfer.conversations import PromptInput
from storage import Store
from storage.rankings import NewRanking, add_rankings, list_rankings, round_ranking_count
from storage.reward_models import latest_reward_models
from storage.rounds import round_label_count, round_pair_count
from storage.types import Generation, Selector

from .config import LoopConfig


def round_judgements(store: Store, round: int, job_id: int | None = None) -> int:
    """What a round has collected (with `job_id`: on the items that loop job queued, whoever labelled them): its pair
    labels that count (`round_label_count`) plus its ranking verdicts."""
    return round_label_count(store, round, job_id) + round_ranking_count(store, round, job_id)


def round_queued(store: Store, round: int, job_id: int | None = None) -> bool:
    """Has the round queued its items (pairs or rankings; with `job_id`, that loop job's) yet."""
    return round_pair_count(store, round, job_id) > 0 or any(
        job_id in (None, ranking.job_id) for ranking in list_rankings(store, round))


def choose_rankings(store: Store, config: LoopConfig, samples: list[Generation], prompts: Mapping[int, PromptInput],
                    wanted: int, seed: int, round: int) -> list[NewRanking]:
    """Up to `wanted` new K-sets (K = `config.rank_k`) of one prompt's samples, in queue order, each in a seeded
    random shown order."""
    k, rng = config.rank_k, random.Random(seed)
    queued = {frozenset(r.generation_ids) for r in list_rankings(store)}
    sets = {prompt_id: [s for s in combinations(gens, k) if frozenset(g.id for g in s) not in queued]
            for prompt_id, gens in sorted(_grouped(samples).items())}
    scores = _set_scores(store, config, samples, prompts, sets, seed, round)
    for candidates in sets.values():
        rng.shuffle(candidates)
        if scores is not None:
            candidates.sort(key=lambda s: -scores[frozenset(g.id for g in s)])
    order = list(sets)
    rng.shuffle(order)
    if scores is not None:  # the prompts whose best set scores highest first
        order.sort(key=lambda p: -max((scores[frozenset(g.id for g in s)] for s in sets[p]), default=float("-inf")))
    chosen: list[NewRanking] = []
    while len(chosen) < wanted and any(sets[p] for p in order):
        for prompt_id in order:
            if sets[prompt_id] and len(chosen) < wanted:
                members = list(sets[prompt_id].pop(0))
                rng.shuffle(members)
                score = None if scores is None else scores[frozenset(g.id for g in members)]
                chosen.append(NewRanking(prompt_id, tuple(g.id for g in members), config.selector, score, round,
                                         members[0].policy_id))
    return chosen


def _set_scores(store: Store, config: LoopConfig, samples: list[Generation], prompts: Mapping[int, PromptInput],
                sets: Mapping[int, list[tuple[Generation, ...]]], seed: int,
                round: int) -> dict[frozenset, float] | None:
    """Each K-set's mean pair score under the selector, or None for random selection."""
    selector = Selector(config.selector)
    if selector == Selector.RANDOM or (selector == Selector.DISAGREEMENT and len(latest_reward_models(store)) < 2):
        return None
    from .selecting import choose_pairs

    every_pair = sum(len(gens) * (len(gens) - 1) // 2 for gens in _grouped(samples).values())
    pair_scores = {frozenset((p.first_id, p.second_id)): p.score or 0.0
                   for p in choose_pairs(store, config, samples, prompts, every_pair, seed, round)}
    floor = min(pair_scores.values(), default=0.0)
    return {frozenset(g.id for g in s): sum(pair_scores.get(frozenset((a.id, b.id)), floor)
                                           for a, b in combinations(s, 2)) / (len(s) * (len(s) - 1) / 2)
            for candidates in sets.values() for s in candidates}


def _grouped(samples: list[Generation]) -> dict[int, list[Generation]]:
    groups: dict[int, list[Generation]] = defaultdict(list)
    for sample in samples:
        groups[sample.prompt_id].append(sample)
    return groups


def queue_round_rankings(store: Store, config: LoopConfig, samples: list[Generation],
                         prompts: Mapping[int, PromptInput], wanted: int, seed: int, round: int,
                         job_id: int | None = None) -> list[int]:
    """Queue the round's rankings (`choose_rankings`) in one transaction, owned by loop job `job_id`; returns their
    ids in queue order."""
    return add_rankings(store, choose_rankings(store, config, samples, prompts, wanted, seed, round), job_id)
