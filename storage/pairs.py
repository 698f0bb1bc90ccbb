"""Pairs of generations of one prompt, queued for labeling with the selector that chose them, each owned by what
queued it: a loop job's round (`job_id`), or the people's queue (no job)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from .db import Store
from .errors import InvalidInput, NotFound
from .types import Pair


@dataclass(frozen=True)
class NewPair:
    prompt_id: int
    first_id: int
    second_id: int
    selector: str
    score: float | None = None
    round: int = 0
    policy_id: int | None = None


def add_pairs(store: Store, pairs: list[NewPair], job_id: int | None = None) -> list[int]:
    """Queue pairs in one transaction, owned by loop job `job_id` (None: the people's queue); returns their ids in
    order."""
    now = time.time()
    ids = []
    with store.write() as db:
        for p in pairs:
            if p.first_id == p.second_id:
                raise InvalidInput(f"a pair needs two different generations, got {p.first_id} twice")
            cursor = db.execute(
                "INSERT INTO pairs (prompt_id, first_id, second_id, round, policy_id, selector, score, job_id, created)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [p.prompt_id, p.first_id, p.second_id, p.round, p.policy_id, p.selector, p.score, job_id, now],
            )
            ids.append(cursor.lastrowid)
    return ids


def _row(row: dict) -> Pair:
    return Pair(row["id"], row["prompt_id"], row["first_id"], row["second_id"], row["round"], row["policy_id"],
                row["selector"], row["score"], row["job_id"])


def get_pair(store: Store, pair_id: int) -> Pair:
    rows = list(store.db().query("SELECT * FROM pairs WHERE id = ?", [pair_id]))
    if not rows:
        raise NotFound(f"pair {pair_id} does not exist; ask for the next pair instead")
    return _row(rows[0])


def list_pairs(store: Store, round: int | None = None) -> list[Pair]:
    where, params = ("", []) if round is None else ("WHERE round = ?", [round])
    return [_row(r) for r in store.db().query(f"SELECT * FROM pairs {where} ORDER BY id", params)]


def count_pairs(store: Store) -> int:
    return store.db().execute("SELECT count(*) FROM pairs").fetchone()[0]
