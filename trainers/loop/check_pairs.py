"""Queue a round's pairs with its check pairs: the newest policy's sample pairs that the current reward model ranks
most confidently (`labeling.queue.check_pairs` says which, where they go and how agreement is counted).

A candidate pair's P(first better) is the mean over the current (newest) reward model's members of
`trainers.reward.scorer.pair_probabilities`; a pair with a side too long for the reward model's context (as its
tokenizer reads the texts) is no candidate. Without a reward model (round 1) or with `share` 0 the round has no check
pairs.

    queue_round_pairs(store, regular, samples, prompts_by_id, share=0.1, labels=100, round=g)
"""

from __future__ import annotations

from typing import Mapping, Sequence

from labeling.queue.check_pairs import CheckPair, check_count, interleave, most_confident
from labeling.queue.selection import candidate_pairs
from labeling.transfer.conversations import PromptInput
from storage import Store
from storage.check_pairs import queue_pairs_with_checks
from storage.pairs import NewPair, list_pairs
from storage.reward_models import latest_reward_models
from storage.types import Generation

from ..models.loading import default_device


def pick_check_pairs(store: Store, samples: Sequence[Generation], prompts: Mapping[int, PromptInput], n: int,
                     taken: Sequence[NewPair], round: int) -> tuple[list[CheckPair], int | None]:
    """Up to `n` check pairs among `samples` (none already queued or in `taken`), and the reward model they check
    (its first member's id; None without a reward model)."""
    members = latest_reward_models(store)
    if n < 1 or not members:
        return [], None
    from ..reward.scorer import RewardScorer, fitting_pairs, pair_probabilities

    queued = [(p.first_id, p.second_id) for p in list_pairs(store)] + [(p.first_id, p.second_id) for p in taken]
    candidates = candidate_pairs(samples, exclude=queued)
    if not candidates:
        return [], members[0].id
    scorer = RewardScorer.from_store(store, device=default_device())
    candidates, probs = fitting_pairs(candidates, pair_probabilities(scorer, candidates, prompts))
    return most_confident(candidates, probs.mean(0).astype(float), n, round), members[0].id  # the members' mean


def queue_round_pairs(store: Store, regular: list[NewPair], samples: Sequence[Generation],
                      prompts: Mapping[int, PromptInput], share: float, labels: int, round: int,
                      job_id: int | None = None) -> list[int]:
    """Queue the round's `regular` pairs (highest selector score first) with `share` of `labels` check pairs spread
    among them, in one transaction, owned by loop job `job_id`; returns the pair ids in queue order."""
    n = check_count(labels, share)
    checks, reward_model_id = pick_check_pairs(store, samples, prompts, n, regular, round)
    keep = regular[:max(0, len(regular) - len(checks))]  # the round queues as many pairs as without checks
    pairs, marked = interleave(keep, checks, labels)
    return queue_pairs_with_checks(store, pairs, {i: (reward_model_id, p) for i, p in marked.items()}, job_id)
