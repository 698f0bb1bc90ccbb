"""Check pairs: which pairs of the newest policy's samples check the reward model, where they go in the queue, and
how often the labels agree with it. Pure functions (no torch, no SQL); `trainers.loop.check_pairs` scores the
candidates.

Each round, `check_share` of the round's labels (default 10%) go to pairs of two samples of the newest policy that the
current reward model ranks most confidently (P(first better) farthest from 1/2). People label them like any pair:
they are spread evenly through the first places of the round's queue (as many as its labels), each taking the selector
score of the pair after it (so the queue's order puts it there) and queued in the same transaction as the others,
so neither their place, their id nor anything shown tells them apart. Their labels train the next reward model
like any other; `agreement` measures how often they side with the reward model, the signal of reward hacking that
comes from people rather than proxies (Christiano et al. 2017 watched their reward model this way).

Agreement of one label: 1 when it prefers the response the reward model preferred, 0 for the other one, 1/2 for a
tie or "both bad" (the person sees no winner where the model saw a clear one); skips do not count.

    checks = most_confident(candidates, probs, check_count(100, 0.1), round=3)
    pairs, marked = interleave(regular, checks, labels=100)
    agreement(votes)  # Agreement(value=0.8, labels=10)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from labeling.queue.selection import Candidate
from storage.check_pairs import CheckVote
from storage.pairs import NewPair
from storage.types import Outcome, Selector

DEFAULT_MIN_AGREEMENT = 0.6  # below this share of check labels siding with the reward model, the loop warns


@dataclass(frozen=True)
class CheckPair:
    """A pair to check the reward model with, and its predicted P(first response better)."""

    pair: NewPair
    prob_first: float


@dataclass(frozen=True)
class Agreement:
    """How often labels sided with the reward model (`value`, None without labels) over `labels` labels."""

    value: float | None
    labels: int


def check_count(labels: int, share: float) -> int:
    """How many of a round's `labels` go to check pairs: `share` of them, rounded (0 when share is 0)."""
    return int(round(labels * share))


def most_confident(candidates: Sequence[Candidate], prob_first: Sequence[float], n: int, round: int = 0
                   ) -> list[CheckPair]:
    """The `n` candidates whose P(first better) is farthest from 1/2, most confident first (ties: candidate order)."""
    if len(prob_first) != len(candidates):
        raise ValueError(f"{len(prob_first)} probabilities for {len(candidates)} candidates")
    confidence = np.abs(np.asarray(prob_first, dtype=float) - 0.5)
    order = sorted(range(len(candidates)), key=lambda i: -confidence[i])[:max(0, n)]
    return [CheckPair(NewPair(candidates[i].prompt_id, candidates[i].first.id, candidates[i].second.id, Selector.CHECK,
                              None, round, candidates[i].first.policy_id), float(prob_first[i])) for i in order]


def check_positions(count: int, labels: int) -> list[int]:
    """Places (0-based, in the final queue) of `count` check pairs spread evenly through the first `labels` places."""
    return [int((k + 0.5) * labels / count) for k in range(count)] if count else []


def interleave(regular: Sequence[NewPair], checks: Sequence[CheckPair], labels: int
               ) -> tuple[list[NewPair], dict[int, float]]:
    """The round's pairs in queue order with the check pairs spread through the first `labels` places, and the
    check pairs' places with their P(first better). `regular` comes highest selector score first; a check pair
    takes the score of the pair after it (the last pair's when none follows), so the queue serves it in its place."""
    places = check_positions(len(checks), min(labels, len(regular) + len(checks)))
    out, marked, pending = [], {}, list(regular)
    for check in checks:
        place = places[len(marked)]
        while len(out) < place and pending:
            out.append(pending.pop(0))
        following = pending[0] if pending else (out[-1] if out else None)
        marked[len(out)] = check.prob_first
        out.append(replace(check.pair, score=following.score if following else 0.0))
    return out + pending, marked


def vote_agreement(vote: CheckVote) -> float:
    """1 when the label prefers the response the reward model preferred, 0 for the other, 1/2 for a tie or both bad."""
    if vote.outcome in (Outcome.TIE, Outcome.BOTH_BAD):
        return 0.5
    return float((vote.outcome is Outcome.FIRST) == (vote.prob_first >= 0.5))


def agreement(votes: Sequence[CheckVote]) -> Agreement:
    """The mean agreement of the votes with the reward model (skips are not check votes)."""
    values = [vote_agreement(v) for v in votes if v.outcome is not Outcome.SKIP]
    return Agreement(float(np.mean(values)) if values else None, len(values))


def agreement_by_round(votes: Sequence[CheckVote]) -> dict[int, Agreement]:
    """`agreement` of each round's check votes, by round."""
    rounds = sorted({v.round for v in votes})
    return {r: agreement([v for v in votes if v.round == r]) for r in rounds}
