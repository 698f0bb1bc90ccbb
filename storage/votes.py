"""Votes and the label queue's SQL: reservations, the next pair, votes checked against reservations, undo,
progress, and the current votes behind annotator statistics.

Each action is one `BEGIN IMMEDIATE` transaction, so concurrent annotators see each other's reservations:
- a pair wants `overlap` distinct annotators; current non-skip labels plus live reservations of others fill it;
- an annotator holds at most one reservation; asking again returns it (same left side) with a fresh expiry;
- a pair the annotator already labeled (skips included) is never handed to them again;
- pairs come newest round first, then by selector score (highest first), then by id;
- pairs imported with their labels (selector `imported`) and arena votes (`storage.arena`) never enter the human
  queue;
- a pair belongs to what queued it (a loop job's round, or the people's queue): people are served every open pair, a
  loop's synthetic annotator only its own job's (`job_id`);
- a pair whose judge verdict trains (the user chose the judge as annotator: `storage.judge_verdicts`) is labelled
  and leaves the queue; a verdict that only suggests takes nothing from it.
The rules' inputs (overlap, TTL, the left/right coin, choice -> outcome) come from `labeling.queue.annotation`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .db import Store
from .errors import Conflict, NotFound
from .labels import NewLabel, find_vote, insert_label
from .prompts import stored_messages
from .types import Outcome, Selector


@dataclass(frozen=True)
class Reserved:
    """A pair reserved for one annotator, with the texts in the order they are shown; `messages` are the prompt's
    turns when it is a conversation (then `prompt` is their plain-text form), else None."""

    pair_id: int
    prompt: str
    left_id: int
    left: str
    right: str
    expires: float
    messages: list[dict] | None = None


@dataclass(frozen=True)
class Vote:
    """A current label as statistics need it: outcome relative to (first, second) and the side shown left."""

    label_id: int
    pair_id: int
    annotator: str
    outcome: Outcome
    first_id: int
    left_id: int | None
    decision_ms: int | None
    created: float


# Places taken on a pair by others: their current non-skip labels (pairs.votes, kept by triggers; the caller
# checks separately that the annotator has no current label there) plus their live reservations.
_TAKEN = """
    p.votes + (SELECT count(*) FROM reservations r WHERE r.pair_id = p.id AND r.annotator != :annotator
               AND r.expires > :now)
"""
# imported pairs and arena votes are never served
_QUEUED = f"p.selector NOT IN ('{Selector.IMPORTED}', '{Selector.ARENA}')"
_UNLABELED_BY_THEM = ("NOT EXISTS (SELECT 1 FROM labels l WHERE l.pair_id = p.id AND l.annotator = :annotator"
                      " AND l.undone IS NULL)")

_NEXT_PAIR = f"""
SELECT p.id, p.first_id, p.second_id FROM pairs p INDEXED BY pairs_queue_votes
WHERE p.votes < :overlap AND {_QUEUED} AND (:selector IS NULL OR p.selector = :selector)
  AND (:job IS NULL OR p.job_id = :job)
  AND {_UNLABELED_BY_THEM} AND {_TAKEN} < :overlap
  AND NOT EXISTS (SELECT 1 FROM judge_verdicts j WHERE j.pair_id = p.id AND j.trains = 1)
ORDER BY p.round DESC, p.score DESC, p.id
LIMIT 1
"""


def _may_hold(db, pair_id: int, annotator: str, overlap: int, now: float, live: bool = False) -> bool:
    """True when `annotator` may hold `pair_id`: not labeled by them, and (unless their hold is `live`)
    fewer than `overlap` others on it."""
    params = {"pair": pair_id, "annotator": annotator, "now": now}
    row = db.execute(f"SELECT {_UNLABELED_BY_THEM}, {_TAKEN} FROM pairs p WHERE p.id = :pair", params).fetchone()
    return bool(row[0]) and (live or row[1] < overlap)


def _reserved(db, pair_id: int, left_id: int, expires: float) -> Reserved:
    row = db.execute(
        "SELECT pr.text, pr.messages, g1.id, g1.text, g2.text FROM pairs p JOIN prompts pr ON pr.id = p.prompt_id"
        " JOIN generations g1 ON g1.id = p.first_id JOIN generations g2 ON g2.id = p.second_id WHERE p.id = ?",
        [pair_id],
    ).fetchone()
    prompt, messages, first_id, first, second = row
    left, right = (first, second) if left_id == first_id else (second, first)
    return Reserved(pair_id, prompt, left_id, left, right, expires, stored_messages(messages))


def reserve_next_pair(store: Store, annotator: str, overlap: int, ttl_s: float, first_on_left: bool,
                      now: float, selector: str | None = None, job_id: int | None = None) -> Reserved | None:
    """The annotator's own reservation if still theirs, else reserve the next open pair; None when none is open.
    With `selector`, only pairs of that selector are served (the loop's oracle judging win-rate pairs); with
    `job_id`, only that loop job's pairs (its synthetic annotator labels nothing else).

    `first_on_left` decides the side of a new reservation only; a returned reservation keeps its sides.
    """
    with store.write() as db:
        own = db.execute("SELECT r.pair_id, r.left_id, r.expires, p.selector, p.job_id FROM reservations r"
                         " JOIN pairs p ON p.id = r.pair_id WHERE r.annotator = ? ORDER BY r.expires DESC",
                         [annotator]).fetchall()
        db.execute("DELETE FROM reservations WHERE annotator = ?", [annotator])
        for pair_id, left_id, expires, kind, owner in own:
            if left_id is not None and selector in (None, kind) and job_id in (None, owner) and _may_hold(
                    db, pair_id, annotator, overlap, now, live=expires > now):
                return write_reservation(db, pair_id, annotator, left_id, now + ttl_s, now)
        row = db.execute(_NEXT_PAIR, {"annotator": annotator, "now": now, "overlap": overlap,
                                      "selector": selector, "job": job_id}).fetchone()
        if row is None:
            return None
        pair_id, first_id, second_id = row
        return write_reservation(db, pair_id, annotator, first_id if first_on_left else second_id, now + ttl_s, now)


def write_reservation(db, pair_id: int, annotator: str, left_id: int, expires: float, now: float) -> Reserved:
    """Reserve pair `pair_id` for `annotator` until `expires`, `left_id` shown on the left (inside a write: `db`)."""
    db.execute("INSERT INTO reservations (pair_id, annotator, expires, left_id, shown) VALUES (?, ?, ?, ?, ?)",
               [pair_id, annotator, expires, left_id, now])
    return _reserved(db, pair_id, left_id, expires)


def submit_vote(store: Store, annotator: str, pair_id: int, to_outcome: Callable[[int, int], Outcome], vote_id: str,
                overlap: int, now: float, decision_ms: int | None = None, margin: float | None = None) -> int:
    """Store a vote on a pair reserved for `annotator` and release the reservation; returns the label id.

    `to_outcome(first_id, left_id)` turns the annotator's on-screen choice into an outcome. A replayed `vote_id`
    (same annotator and pair) returns the first label's id and stores nothing. A reservation that expired still
    counts while nobody else took the pair. Without `decision_ms`, the time since the pair was shown is used.
    `margin` is a graded verdict's Bradley-Terry margin (`labeling.queue.strength`).
    """
    with store.write() as db:
        found = find_vote(db, vote_id)
        if found:
            if (found[1], found[2]) != (pair_id, annotator):
                raise Conflict(f"vote id {vote_id!r} was already used for another vote; send a new vote id with "
                               "each vote")
            return found[0]
        pair = db.execute("SELECT first_id FROM pairs WHERE id = ?", [pair_id]).fetchone()
        if pair is None:
            raise NotFound(f"pair {pair_id} does not exist; ask for the next pair instead")
        held = db.execute("SELECT left_id, expires, shown FROM reservations WHERE pair_id = ? AND annotator = ?",
                          [pair_id, annotator]).fetchone()
        if held is None or held[0] is None:
            raise Conflict(f"pair {pair_id} is not reserved for {annotator}; ask for the next pair and label that one")
        left_id, expires, shown = held
        if not _may_hold(db, pair_id, annotator, overlap, now, live=expires > now):
            if expires > now:
                raise Conflict(f"{annotator} already labeled pair {pair_id}; undo that label first to change it")
            raise Conflict(f"your reservation of pair {pair_id} expired and the pair went to someone else; "
                           "ask for the next pair")
        if decision_ms is None and shown is not None:
            decision_ms = round((now - shown) * 1000)
        outcome = Outcome(to_outcome(pair[0], left_id))
        db.execute("DELETE FROM reservations WHERE pair_id = ? AND annotator = ?", [pair_id, annotator])
        return insert_label(db, NewLabel(pair_id, annotator, outcome, vote_id, left_id, decision_ms, margin), now)


def undo_last(store: Store, annotator: str, overlap: int, ttl_s: float, now: float) -> Reserved | None:
    """Revert the annotator's latest current label (kept, flagged undone) and reserve its pair again, same sides.

    Returns None when others filled the pair in the meantime (possible after a skip); the annotator then simply
    gets the next pair.
    """
    with store.write() as db:
        last = db.execute("SELECT id, pair_id, left_id FROM labels WHERE annotator = ? AND undone IS NULL"
                          " ORDER BY id DESC LIMIT 1", [annotator]).fetchone()
        if last is None:
            raise Conflict(f"{annotator} has no label to undo")
        label_id, pair_id, left_id = last
        db.execute("UPDATE labels SET undone = ? WHERE id = ?", [now, label_id])
        db.execute("DELETE FROM reservations WHERE annotator = ?", [annotator])
        if left_id is None or not _may_hold(db, pair_id, annotator, overlap, now):
            return None
        return write_reservation(db, pair_id, annotator, left_id, now + ttl_s, now)


def release_reservations(store: Store, annotator: str) -> int:
    """Give back every pair reserved for `annotator` (they changed their name or left); returns how many."""
    with store.write() as db:
        return db.execute("DELETE FROM reservations WHERE annotator = ?", [annotator]).rowcount


def labeled_since(store: Store, annotator: str, since: float) -> int:
    """Current labels the annotator gave since a time (a skip is no label)."""
    return store.db().execute("SELECT count(*) FROM labels WHERE annotator = ? AND created >= ? AND undone IS NULL"
                              " AND outcome != 'skip'", [annotator, since]).fetchone()[0]


def open_pairs(store: Store, annotator: str, overlap: int) -> int:
    """Pairs in the queue that still want a label and that this annotator has not labeled."""
    params = {"annotator": annotator, "overlap": overlap}
    db = store.db()
    wanted = db.execute(f"SELECT count(*) FROM pairs p INDEXED BY pairs_queue_votes"
                        f" WHERE p.votes < :overlap AND {_QUEUED}", params).fetchone()[0]
    theirs = db.execute(f"SELECT count(*) FROM labels l JOIN pairs p ON p.id = l.pair_id WHERE l.annotator = :annotator"
                        f" AND l.undone IS NULL AND p.votes < :overlap AND {_QUEUED}",
                        params).fetchone()[0]
    return wanted - theirs


def current_votes(store: Store) -> list[Vote]:
    """Every current label with its pair's first generation and the side shown, in label order."""
    rows = store.db().execute(
        "SELECT l.id, l.pair_id, l.annotator, l.outcome, p.first_id, l.left_id, l.decision_ms, l.created"
        " FROM labels l JOIN pairs p ON p.id = l.pair_id WHERE l.undone IS NULL ORDER BY l.id"
    )
    return [Vote(r[0], r[1], r[2], Outcome(r[3]), r[4], r[5], r[6], r[7]) for r in rows]
