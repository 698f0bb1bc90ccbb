"""Rankings of K answers to one prompt: the items, their reservations, verdicts, undo, and the verdicts that train.

A ranking item holds K generations of one prompt in a stored order, the order every annotator sees (A, B, C, ...).
A verdict is `ranked` with its tiers (lists of positions in that order, best tier first; two positions in one tier
are tied), `all_bad`, or `skip`. The queue follows the pairs' rules (`storage.votes`): an item wants `overlap`
distinct annotators; current non-skip verdicts (`rankings.votes`, kept by triggers) plus others' live reservations
fill it; an annotator holds at most one ranking reservation; an item they judged is never handed to them again;
newest round first, then score, then id. Each action is one `BEGIN IMMEDIATE` transaction. An item belongs to what
queued it: a loop job's round (`job_id`, whose synthetic annotator is served only its own items), or the people's queue.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from .db import Store
from .errors import Conflict, InvalidInput, NotFound
from .gold import NOT_GOLD_RANKING, left_out_annotators
from .prompts import stored_messages
from .types import LoopLabels, Selector

RANKED, ALL_BAD, SKIP = "ranked", "all_bad", "skip"


@dataclass(frozen=True)
class NewRanking:
    """K generations of one prompt, `generation_ids` in the order they are shown (A first)."""

    prompt_id: int
    generation_ids: tuple[int, ...]
    selector: str
    score: float | None = None
    round: int = 0
    policy_id: int | None = None


@dataclass(frozen=True)
class Ranking:
    id: int
    prompt_id: int
    generation_ids: tuple[int, ...]
    round: int
    policy_id: int | None
    selector: str
    score: float | None
    votes: int
    job_id: int | None = None  # the loop job whose round queued it; None: the people's queue


@dataclass(frozen=True)
class ReservedRanking:
    """A ranking reserved for one annotator: the prompt (`messages` its turns when it is a conversation) and the
    answers in the stored order (A, B, C, ...)."""

    ranking_id: int
    prompt: str
    responses: tuple[str, ...]
    expires: float
    messages: list[dict] | None = None


@dataclass(frozen=True)
class LabeledRanking:
    """A current verdict on a ranking with its texts: `tiers` (positions, best tier first) when ranked, else None."""

    label_id: int
    ranking_id: int
    annotator: str
    outcome: str  # ranked | all_bad | skip
    tiers: list[list[int]] | None
    prompt: str
    responses: tuple[str, ...]
    generation_ids: tuple[int, ...]
    decision_ms: int | None
    prompt_messages: list[dict] | None = None
    prompt_excluded: bool = False

    @property
    def prompt_content(self) -> str | list[dict]:
        return self.prompt_messages if self.prompt_messages is not None else self.prompt


def add_rankings(store: Store, items: list[NewRanking], job_id: int | None = None) -> list[int]:
    """Queue ranking items in one transaction, owned by loop job `job_id` (None: the people's queue); returns their
    ids in order."""
    now, ids = time.time(), []
    with store.write() as db:
        for item in items:
            if len(item.generation_ids) < 2 or len(set(item.generation_ids)) != len(item.generation_ids):
                raise InvalidInput(f"a ranking needs 2 or more different generations, got {list(item.generation_ids)}")
            ranking_id = db.execute(
                "INSERT INTO rankings (prompt_id, round, policy_id, selector, score, job_id, created)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                [item.prompt_id, item.round, item.policy_id, item.selector, item.score, job_id, now]).lastrowid
            for position, generation_id in enumerate(item.generation_ids):
                db.execute("INSERT INTO ranking_members (ranking_id, position, generation_id) VALUES (?, ?, ?)",
                           [ranking_id, position, generation_id])
            ids.append(ranking_id)
    return ids


def ranking_size(store: Store, ranking_id: int) -> int:
    """K, the answers of ranking `ranking_id`; NotFound when there is no such ranking."""
    size = store.db().execute("SELECT count(*) FROM ranking_members WHERE ranking_id = ?", [ranking_id]).fetchone()[0]
    if not size:
        raise NotFound(f"ranking {ranking_id} does not exist; ask for the next ranking instead")
    return size


def ranking_members(db, ranking_id: int) -> tuple[int, ...]:
    """A stored ranking's generation ids in position order (inside a transaction: `db` is its connection)."""
    return tuple(r[0] for r in db.execute("SELECT generation_id FROM ranking_members WHERE ranking_id = ?"
                                          " ORDER BY position", [ranking_id]))


def list_rankings(store: Store, round: int | None = None) -> list[Ranking]:
    db = store.db()
    where, params = ("", []) if round is None else ("WHERE round = ?", [round])
    return [Ranking(r["id"], r["prompt_id"], ranking_members(db, r["id"]), r["round"], r["policy_id"], r["selector"],
                    r["score"], r["votes"], r["job_id"])
            for r in db.query(f"SELECT * FROM rankings {where} ORDER BY id", params)]


_TAKEN = """
    k.votes + (SELECT count(*) FROM ranking_reservations r WHERE r.ranking_id = k.id AND r.annotator != :annotator
               AND r.expires > :now)
"""
_UNJUDGED_BY_THEM = ("NOT EXISTS (SELECT 1 FROM ranking_labels l WHERE l.ranking_id = k.id"
                     " AND l.annotator = :annotator AND l.undone IS NULL)")
_NEXT = f"""
SELECT k.id FROM rankings k INDEXED BY rankings_queue
WHERE k.votes < :overlap AND k.selector != '{Selector.IMPORTED}' AND {_UNJUDGED_BY_THEM} AND {_TAKEN} < :overlap
  AND (:job IS NULL OR k.job_id = :job)
ORDER BY k.round DESC, k.score DESC, k.id
LIMIT 1
"""


def _may_hold(db, ranking_id: int, annotator: str, overlap: int, now: float, live: bool = False) -> bool:
    params = {"ranking": ranking_id, "annotator": annotator, "now": now}
    row = db.execute(f"SELECT {_UNJUDGED_BY_THEM}, {_TAKEN} FROM rankings k WHERE k.id = :ranking", params).fetchone()
    return bool(row[0]) and (live or row[1] < overlap)


def write_ranking_reservation(db, ranking_id: int, annotator: str, expires: float, now: float) -> ReservedRanking:
    """Reserve ranking `ranking_id` for `annotator` until `expires` (inside a write: `db` is its connection)."""
    db.execute("INSERT INTO ranking_reservations (ranking_id, annotator, expires, shown) VALUES (?, ?, ?, ?)",
               [ranking_id, annotator, expires, now])
    prompt, messages = db.execute("SELECT p.text, p.messages FROM rankings k JOIN prompts p ON p.id = k.prompt_id"
                                  " WHERE k.id = ?", [ranking_id]).fetchone()
    texts = tuple(r[0] for r in db.execute(
        "SELECT g.text FROM ranking_members m JOIN generations g ON g.id = m.generation_id WHERE m.ranking_id = ?"
        " ORDER BY m.position", [ranking_id]))
    return ReservedRanking(ranking_id, prompt, texts, expires, stored_messages(messages))


def reserve_next_ranking(store: Store, annotator: str, overlap: int, ttl_s: float, now: float,
                         job_id: int | None = None) -> ReservedRanking | None:
    """The annotator's own ranking reservation if still theirs, else reserve the next open item; None when none.
    With `job_id`, only that loop job's items (its synthetic annotator labels nothing else)."""
    with store.write() as db:
        own = db.execute("SELECT r.ranking_id, r.expires, k.job_id FROM ranking_reservations r"
                         " JOIN rankings k ON k.id = r.ranking_id WHERE r.annotator = ? ORDER BY r.expires DESC",
                         [annotator]).fetchall()
        db.execute("DELETE FROM ranking_reservations WHERE annotator = ?", [annotator])
        for ranking_id, expires, owner in own:
            if job_id in (None, owner) and _may_hold(db, ranking_id, annotator, overlap, now, live=expires > now):
                return write_ranking_reservation(db, ranking_id, annotator, now + ttl_s, now)
        row = db.execute(_NEXT, {"annotator": annotator, "now": now, "overlap": overlap, "job": job_id}).fetchone()
        return None if row is None else write_ranking_reservation(db, row[0], annotator, now + ttl_s, now)


def submit_ranking(store: Store, annotator: str, ranking_id: int, outcome: str, tiers: list[list[int]] | None,
                   vote_id: str, overlap: int, now: float, decision_ms: int | None = None) -> int:
    """Store a verdict on a ranking reserved for `annotator` and release the reservation; returns its label id.
    A replayed `vote_id` (same annotator and item) returns the first verdict's id and stores nothing."""
    with store.write() as db:
        found = db.execute("SELECT id, ranking_id, annotator FROM ranking_labels WHERE vote_id = ?",
                           [vote_id]).fetchone()
        if found:
            if (found[1], found[2]) != (ranking_id, annotator):
                raise Conflict(f"vote id {vote_id!r} was already used for another vote; send a new vote id with "
                               "each vote")
            return found[0]
        if db.execute("SELECT 1 FROM rankings WHERE id = ?", [ranking_id]).fetchone() is None:
            raise NotFound(f"ranking {ranking_id} does not exist; ask for the next ranking instead")
        held = db.execute("SELECT expires, shown FROM ranking_reservations WHERE ranking_id = ? AND annotator = ?",
                          [ranking_id, annotator]).fetchone()
        if held is None:
            raise Conflict(f"ranking {ranking_id} is not reserved for {annotator}; ask for the next ranking and "
                           "judge that one")
        expires, shown = held
        if not _may_hold(db, ranking_id, annotator, overlap, now, live=expires > now):
            raise Conflict(f"your reservation of ranking {ranking_id} expired and the item went to someone else; "
                           "ask for the next ranking")
        if decision_ms is None and shown is not None:
            decision_ms = round((now - shown) * 1000)
        db.execute("DELETE FROM ranking_reservations WHERE ranking_id = ? AND annotator = ?", [ranking_id, annotator])
        return db.execute(
            "INSERT INTO ranking_labels (ranking_id, annotator, outcome, tiers, decision_ms, vote_id, created)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            [ranking_id, annotator, outcome, None if tiers is None else json.dumps(tiers), decision_ms, vote_id, now],
        ).lastrowid


def undo_last_ranking(store: Store, annotator: str, overlap: int, ttl_s: float, now: float) -> ReservedRanking | None:
    """Revert the annotator's latest current ranking verdict (kept, flagged undone) and reserve its item again; None
    when others filled it meanwhile. Raises Conflict when there is nothing to undo."""
    with store.write() as db:
        last = db.execute("SELECT id, ranking_id FROM ranking_labels WHERE annotator = ? AND undone IS NULL"
                          " ORDER BY id DESC LIMIT 1", [annotator]).fetchone()
        if last is None:
            raise Conflict(f"{annotator} has no ranking to undo")
        label_id, ranking_id = last
        db.execute("UPDATE ranking_labels SET undone = ? WHERE id = ?", [now, label_id])
        db.execute("DELETE FROM ranking_reservations WHERE annotator = ?", [annotator])
        if not _may_hold(db, ranking_id, annotator, overlap, now):
            return None
        return write_ranking_reservation(db, ranking_id, annotator, now + ttl_s, now)


def open_rankings(store: Store, annotator: str, overlap: int) -> int:
    """Items in the queue that still want a verdict and that this annotator has not judged."""
    params = {"annotator": annotator, "overlap": overlap, "now": 0.0}
    return store.db().execute(f"SELECT count(*) FROM rankings k WHERE k.votes < :overlap"
                              f" AND k.selector != '{Selector.IMPORTED}' AND {_UNJUDGED_BY_THEM}", params).fetchone()[0]


def ranking_verdicts(store: Store, include_skips: bool = False, include_undone: bool = False,
                     training: bool = False, loop: LoopLabels | None = None) -> list[LabeledRanking]:
    """Ranking verdicts with their texts in label order: current ones, without skips unless asked; `training`: none on
    a gold ranking (those check annotators) and none of an annotator whose labels training leaves out (flagged by
    their gold accuracy, `storage.gold`); with `loop`, a loop job's round's: no synthetic annotator's verdict on an
    item another job or the people's queue holds."""
    clauses = ([] if include_undone else ["l.undone IS NULL"]) + ([] if include_skips else ["l.outcome != 'skip'"])
    if training:
        clauses.append(NOT_GOLD_RANKING)
    left_out = sorted(left_out_annotators(store)) if training else []
    if left_out:
        clauses.append(f"l.annotator NOT IN ({', '.join('?' * len(left_out))})")
    params = list(left_out)
    if loop is not None:
        own, own_params = loop.clause("l.annotator", "k.job_id")
        clauses.append(own)
        params += own_params
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    db = store.db()
    rows = db.query(f"""
        SELECT l.id, l.ranking_id, l.annotator, l.outcome, l.tiers, l.decision_ms, p.text, p.messages, p.excluded
        FROM ranking_labels l JOIN rankings k ON k.id = l.ranking_id JOIN prompts p ON p.id = k.prompt_id
        {where} ORDER BY l.id""", params)
    verdicts = []
    for r in rows:
        members = list(db.execute("SELECT g.id, g.text FROM ranking_members m JOIN generations g"
                                  " ON g.id = m.generation_id WHERE m.ranking_id = ? ORDER BY m.position",
                                  [r["ranking_id"]]))
        verdicts.append(LabeledRanking(
            r["id"], r["ranking_id"], r["annotator"], r["outcome"], json.loads(r["tiers"]) if r["tiers"] else None,
            r["text"], tuple(m[1] for m in members), tuple(m[0] for m in members), r["decision_ms"],
            stored_messages(r["messages"]), bool(r["excluded"])))
    return verdicts


def round_ranking_count(store: Store, round: int, job_id: int | None = None) -> int:
    """Current non-skip verdicts on the rankings of `round` (with `job_id`: only those that job queued), none on a
    gold ranking (those check annotators)."""
    return store.db().execute("SELECT count(*) FROM ranking_labels l JOIN rankings k ON k.id = l.ranking_id"
                              f" WHERE k.round = ? AND l.undone IS NULL AND l.outcome != 'skip' AND {NOT_GOLD_RANKING}"
                              " AND (? IS NULL OR k.job_id = ?)", [round, job_id, job_id]).fetchone()[0]
