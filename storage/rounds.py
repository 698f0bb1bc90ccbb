"""Rounds of the loop: one row per completed round, with its config and summary; per-round progress queries; the
store rounds each loop job owns (claimed once, never shared: two jobs never queue in, or name a version after, the
same round).

    first = claim_rounds(store, job_id, rounds=3)   # the job's store rounds are first .. first + 2
    have = round_label_count(store, first, job_id)  # labels on the pairs the job queued in its first round
"""

from __future__ import annotations

import json
import time

from .db import Store
from .errors import NotFound
from .gold import NOT_GOLD


def add_round(store: Store, job_id: int | None, round: int, config: dict, summary: dict, policy_id: int | None,
              reward_model_id: int | None) -> int:
    with store.write() as db:
        cursor = db.execute(
            "INSERT INTO rounds (job_id, round, config, summary, policy_id, reward_model_id, created)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            [job_id, round, json.dumps(config), json.dumps(summary), policy_id, reward_model_id, time.time()],
        )
        return cursor.lastrowid


def list_rounds(store: Store, job_id: int | None = None) -> list[dict]:
    """Completed rounds in order, config and summary decoded."""
    where, params = ("WHERE job_id = ?", [job_id]) if job_id is not None else ("", [])
    rows = store.db().query(f"SELECT * FROM rounds {where} ORDER BY round, id", params)
    return [{**r, "config": json.loads(r["config"]), "summary": json.loads(r["summary"])} for r in rows]


_WINRATE = "EXISTS (SELECT 1 FROM winrate_pairs w WHERE w.pair_id = p.id)"
_NOT_WINRATE = f"NOT {_WINRATE}"


_OWNED = "(:job IS NULL OR p.job_id = :job)"
_ROUNDS_HELD = (("policies", "round"), ("jobs", "last_round"), ("pairs", "round"), ("rankings", "round"),
                ("reward_models", "round"), ("rounds", "round"))  # where a store round is in use


def round_label_count(store: Store, round: int, job_id: int | None = None) -> int:
    """Current non-skip labels on the pairs queued in `round` (with `job_id`: only those that job queued): the labels
    the round's budget counts, so none on a win-rate pair (those are evaluation, reported apart) nor on a gold pair
    (those check annotators)."""
    return store.db().execute(
        "SELECT count(*) FROM labels l JOIN pairs p ON p.id = l.pair_id WHERE p.round = :round AND l.undone IS NULL"
        f" AND l.outcome != 'skip' AND {_NOT_WINRATE} AND {NOT_GOLD} AND {_OWNED}",
        {"round": round, "job": job_id}).fetchone()[0]


def round_pair_count(store: Store, round: int, job_id: int | None = None) -> int:
    """The pairs the round queued for its own labels (win-rate pairs placed among them are not the round's; with
    `job_id`, only those that job queued)."""
    return store.db().execute(f"SELECT count(*) FROM pairs p WHERE round = :round AND {_NOT_WINRATE} AND {_OWNED}",
                              {"round": round, "job": job_id}).fetchone()[0]


def open_winrate_pairs(store: Store, round: int, annotator: str, overlap: int, job_id: int | None = None) -> int:
    """Win-rate pairs placed among `round`'s own (queued in it; with `job_id`, by that job) that `annotator` may
    still be served: labels the round does not count."""
    return store.db().execute(
        f"SELECT count(*) FROM pairs p WHERE p.round = :round AND p.votes < :overlap AND {_WINRATE} AND {_OWNED}"
        " AND NOT EXISTS (SELECT 1 FROM labels l WHERE l.pair_id = p.id AND l.annotator = :annotator"
        " AND l.undone IS NULL)",
        {"round": round, "overlap": overlap, "annotator": annotator, "job": job_id}).fetchone()[0]


def claim_rounds(store: Store, job_id: int, rounds: int) -> int:
    """The first of the `rounds` store rounds loop job `job_id` owns, claimed on the first call (one past every round
    a version, a queued item, a reward model or another loop job holds) and the same on every later call (a resumed
    job keeps its rounds)."""
    with store.write() as db:
        row = db.execute("SELECT first_round FROM jobs WHERE id = ?", [job_id]).fetchone()
        if row is None:
            raise NotFound(f"job {job_id} does not exist; list the jobs with python app.py status")
        if row[0] is not None:
            return row[0]
        taken = db.execute("SELECT max(" + ", ".join(
            f"coalesce((SELECT max({column}) FROM {table}), 0)" for table, column in _ROUNDS_HELD) + ")").fetchone()[0]
        db.execute("UPDATE jobs SET first_round = ?, last_round = ? WHERE id = ?",
                   [taken + 1, taken + max(1, rounds), job_id])
        return taken + 1


def owned_rounds(store: Store, job_id: int) -> range | None:
    """The store rounds loop job `job_id` claimed (`claim_rounds`), or None before it claimed any."""
    row = store.db().execute("SELECT first_round, last_round FROM jobs WHERE id = ?", [job_id]).fetchone()
    return None if row is None or row[0] is None else range(row[0], row[1] + 1)


def open_items(store: Store, job_id: int) -> tuple[int, int]:
    """(pairs, rankings) loop job `job_id` queued for its rounds' labels that nobody labelled yet (win-rate pairs
    aside): after the job stopped, they stay in the people's queue."""
    db = store.db()
    pairs = db.execute(f"SELECT count(*) FROM pairs p WHERE p.job_id = ? AND p.votes = 0 AND {_NOT_WINRATE}",
                       [job_id]).fetchone()[0]
    rankings = db.execute("SELECT count(*) FROM rankings WHERE job_id = ? AND votes = 0", [job_id]).fetchone()[0]
    return pairs, rankings


def max_policy_round_before(store: Store, created: float) -> int:
    """Highest round of the policies registered before a time (0 when only the SFT policy exists)."""
    row = store.db().execute("SELECT max(round) FROM policies WHERE created < ?", [created]).fetchone()
    return row[0] or 0
