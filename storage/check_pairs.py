"""Check pairs: queued pairs the reward model ranked confidently, kept with its prediction, so that their labels
measure how often people agree with it on what the policy writes now.

A check pair is an ordinary row of `pairs` (selector `check`, `Selector.CHECK`), queued in the same transaction as the
round's other pairs and served by the same queue: nothing an annotator receives tells it apart. This table adds the
reward model and its probability that the first response is the better one.

    ids = queue_pairs_with_checks(store, pairs, {2: (reward_model_id, 0.93)})   # pairs[2] is a check pair
    votes = check_votes(store, round=3)
"""

from __future__ import annotations

from dataclasses import dataclass

from .db import Store
from .pairs import NewPair, add_pairs
from .types import Outcome


@dataclass(frozen=True)
class CheckVote:
    """A current non-skip label on a check pair, with what the reward model predicted for the pair."""

    pair_id: int
    round: int
    annotator: str
    outcome: Outcome
    prob_first: float


def queue_pairs_with_checks(store: Store, pairs: list[NewPair], checks: dict[int, tuple[int | None, float]],
                            job_id: int | None = None) -> list[int]:
    """Queue `pairs` in order, in one transaction, owned by loop job `job_id`, marking `pairs[i]` a check pair for
    each `i` in `checks` (`(reward model id, P(first better))`); returns the pair ids in order."""
    with store.write() as db:
        ids = add_pairs(store, pairs, job_id)
        for index, (reward_model_id, prob_first) in sorted(checks.items()):
            db.execute("INSERT INTO check_pairs (pair_id, reward_model_id, prob_first) VALUES (?, ?, ?)",
                       [ids[index], reward_model_id, float(prob_first)])
    return ids


def check_pair_ids(store: Store, round: int | None = None) -> list[int]:
    """The check pairs (of one round, or all), in queue order of insertion."""
    where, params = ("WHERE p.round = ?", [round]) if round is not None else ("", [])
    rows = store.db().execute(f"SELECT a.pair_id FROM check_pairs a JOIN pairs p ON p.id = a.pair_id {where}"
                              " ORDER BY a.pair_id", params)
    return [r[0] for r in rows.fetchall()]


def check_votes(store: Store, round: int | None = None) -> list[CheckVote]:
    """Current non-skip labels on check pairs (of one round, or all), in label order."""
    where, params = ("AND p.round = ?", [round]) if round is not None else ("", [])
    rows = store.db().execute(
        "SELECT l.pair_id, p.round, l.annotator, l.outcome, a.prob_first FROM labels l"
        " JOIN check_pairs a ON a.pair_id = l.pair_id JOIN pairs p ON p.id = l.pair_id"
        f" WHERE l.undone IS NULL AND l.outcome != 'skip' {where} ORDER BY l.id", params)
    return [CheckVote(r[0], r[1], r[2], Outcome(r[3]), r[4]) for r in rows.fetchall()]
