"""Rounds of the loop: one row per completed round, with its config and summary; per-round progress queries."""

from __future__ import annotations

import json
import time

from .db import Store
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


def round_label_count(store: Store, round: int) -> int:
    """Current non-skip labels on the pairs queued in `round`: the labels the round's budget counts, so none on a
    win-rate pair (those are evaluation, reported apart) nor on a gold pair (those check annotators)."""
    return store.db().execute(
        "SELECT count(*) FROM labels l JOIN pairs p ON p.id = l.pair_id"
        f" WHERE p.round = ? AND l.undone IS NULL AND l.outcome != 'skip' AND {_NOT_WINRATE} AND {NOT_GOLD}",
        [round]).fetchone()[0]


def round_pair_count(store: Store, round: int) -> int:
    """The pairs the round queued for its own labels (win-rate pairs placed among them are not the round's)."""
    return store.db().execute(f"SELECT count(*) FROM pairs p WHERE round = ? AND {_NOT_WINRATE}",
                              [round]).fetchone()[0]


def open_winrate_pairs(store: Store, round: int, annotator: str, overlap: int) -> int:
    """Win-rate pairs placed among `round`'s own (queued in it) that `annotator` may still be served: labels the
    round does not count."""
    return store.db().execute(
        f"SELECT count(*) FROM pairs p WHERE p.round = ? AND p.votes < ? AND {_WINRATE}"
        " AND NOT EXISTS (SELECT 1 FROM labels l WHERE l.pair_id = p.id AND l.annotator = ? AND l.undone IS NULL)",
        [round, overlap, annotator]).fetchone()[0]


def max_policy_round_before(store: Store, created: float) -> int:
    """Highest round of the policies registered before a time (0 when only the SFT policy exists)."""
    row = store.db().execute("SELECT max(round) FROM policies WHERE created < ?", [created]).fetchone()
    return row[0] or 0
