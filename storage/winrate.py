"""Win-rate pairs: blind pairs of two policy versions' held-out evaluation samples (the version judged against the SFT
root, or against the previous version), queued among the other pairs, whose labels say whether people prefer it.

A win-rate pair is an ordinary row of `pairs` (selector `winrate`) served by the same queue, so nothing an annotator
receives tells it apart; this table adds which version is judged and against which. Which of the two generations is
the pair's first (the version's or the opponent's) is drawn at random when the pair is made and kept in `pairs`; the
Label tab then draws the screen side again for each reservation. Labels on these pairs are evaluation: they never
train or validate a reward model (`storage.labels.training_labels` leaves them out) and never count against a
round's label budget (`storage.rounds.round_label_count`).

    ids = queue_winrate_pairs(store, pairs, [WinrateMark(policy_id=4, opponent_id=1)] * len(pairs))
    judgements = winrate_judgements(store)          # every current non-skip label on a win-rate pair
"""

from __future__ import annotations

from dataclasses import dataclass

from .arena import ARENA_SOURCE
from .db import Store
from .pairs import NewPair, add_pairs
from .types import Outcome, Selector


@dataclass(frozen=True)
class WinrateMark:
    """What a win-rate pair compares: policy version `policy_id` (judged) against version `opponent_id`."""

    policy_id: int
    opponent_id: int


@dataclass(frozen=True)
class WinratePair:
    """A queued win-rate pair; `version_first`: the judged version's sample is the pair's first generation."""

    pair_id: int
    prompt_id: int
    policy_id: int
    opponent_id: int
    version_first: bool


@dataclass(frozen=True)
class WinrateJudgement:
    """A current non-skip label on a win-rate pair. `outcome` is relative to the pair's (first, second), as every
    label's; `version_first` says which of the two is the judged version's sample. Token counts: the responses'."""

    label_id: int
    pair_id: int
    annotator: str
    policy_id: int
    opponent_id: int
    outcome: Outcome
    version_first: bool
    policy_tokens: int | None
    opponent_tokens: int | None
    own_prompt: bool = False  # on a prompt a person typed in the arena (source `arena`), not a held-out one


@dataclass(frozen=True)
class QueuePlace:
    """Where an open pair sits in the queue's order (round, then score, both descending)."""

    pair_id: int
    round: int
    score: float | None


def queue_winrate_pairs(store: Store, pairs: list[NewPair], marks: list[WinrateMark],
                        job_id: int | None = None) -> list[int]:
    """Queue `pairs` (selector `winrate`) with what each compares, in one transaction, owned by loop job `job_id`
    (None: the people's queue); returns the pair ids."""
    if len(pairs) != len(marks):
        raise ValueError(f"{len(marks)} marks for {len(pairs)} win-rate pairs")
    with store.write() as db:
        ids = add_pairs(store, pairs, job_id)
        for pair_id, mark in zip(ids, marks, strict=True):
            db.execute("INSERT INTO winrate_pairs (pair_id, policy_id, opponent_id) VALUES (?, ?, ?)",
                       [pair_id, mark.policy_id, mark.opponent_id])
    return ids


def list_winrate_pairs(store: Store, policy_id: int | None = None) -> list[WinratePair]:
    """The win-rate pairs the loop queued (of one judged version, or all; not the arena's votes), in queue insertion
    order."""
    rows = store.db().execute(
        "SELECT w.pair_id, p.prompt_id, w.policy_id, w.opponent_id, g.policy_id = w.policy_id FROM winrate_pairs w"
        " JOIN pairs p ON p.id = w.pair_id JOIN generations g ON g.id = p.first_id"
        " WHERE (? IS NULL OR w.policy_id = ?) AND p.selector != ? ORDER BY w.pair_id",
        [policy_id, policy_id, Selector.ARENA])
    return [WinratePair(r[0], r[1], r[2], r[3], bool(r[4])) for r in rows.fetchall()]


def winrate_judgements(store: Store) -> list[WinrateJudgement]:
    """Every current non-skip label on a win-rate pair, in label order."""
    rows = store.db().execute(
        "SELECT l.id, l.pair_id, l.annotator, w.policy_id, w.opponent_id, l.outcome, g1.policy_id = w.policy_id,"
        " g1.token_count, g2.token_count, pr.source = ? FROM labels l"
        " JOIN winrate_pairs w ON w.pair_id = l.pair_id JOIN pairs p ON p.id = l.pair_id"
        " JOIN prompts pr ON pr.id = p.prompt_id"
        " JOIN generations g1 ON g1.id = p.first_id JOIN generations g2 ON g2.id = p.second_id"
        " WHERE l.undone IS NULL AND l.outcome != 'skip' ORDER BY l.id", [ARENA_SOURCE])
    judgements = []
    for r in rows.fetchall():
        version_first = bool(r[6])
        tokens = (r[7], r[8]) if version_first else (r[8], r[7])
        judgements.append(WinrateJudgement(r[0], r[1], r[2], r[3], r[4], Outcome(r[5]), version_first, *tokens,
                                            bool(r[9])))
    return judgements


def open_places(store: Store, limit: int) -> list[QueuePlace]:
    """The first `limit` pairs of the queue that nobody labeled yet (imported pairs are never queued), in the order
    the queue serves them."""
    rows = store.db().execute(
        f"SELECT id, round, score FROM pairs p WHERE p.votes = 0"
        f" AND p.selector NOT IN ('{Selector.IMPORTED}', '{Selector.ARENA}')"
        " ORDER BY p.round DESC, p.score DESC, p.id LIMIT ?", [max(0, limit)])
    return [QueuePlace(*r) for r in rows.fetchall()]


def newest_pair_round(store: Store) -> int:
    """The highest round any pair was queued in (0 for an empty queue)."""
    return store.db().execute("SELECT coalesce(max(round), 0) FROM pairs").fetchone()[0]
