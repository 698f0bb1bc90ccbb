"""Failure warnings as a job fired them: one row per rule and round, kept when the curves change later.

    new = record_warnings(store, job_id, [JobWarning(job_id, "kl_per_token", 2, 17, title, detail, advice, now)])
    pending = [w for w in list_warnings(store, job_id) if w.acknowledged is None]   # what a paused loop waits on

A resume of a paused job acknowledges its warnings (`storage.jobs.requeue_job`), so the loop goes on past them.
"""

from __future__ import annotations

from .db import Store
from .types import JobWarning

COLUMNS = "job_id, rule, round, step, title, detail, advice, created, acknowledged"


def record_warnings(store: Store, job_id: int, warnings: list[JobWarning]) -> list[JobWarning]:
    """Store the warnings not stored yet for the job (same rule and round); returns the new ones, in order."""
    new = []
    with store.write() as db:
        for w in warnings:
            cursor = db.execute(
                "INSERT INTO job_warnings (job_id, rule, round, step, title, detail, advice, created)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (job_id, rule, round) DO NOTHING",
                [job_id, w.rule, w.round, w.step, w.title, w.detail, w.advice, w.created])
            if cursor.rowcount:
                new.append(w)
    return new


def list_warnings(store: Store, job_id: int) -> list[JobWarning]:
    """The job's warnings in the order they fired."""
    rows = store.db().execute(f"SELECT {COLUMNS} FROM job_warnings WHERE job_id = ? ORDER BY id", [job_id])
    return [JobWarning(*row) for row in rows.fetchall()]


def acknowledge_warnings(db, job_id: int, now: float) -> None:
    """Mark the job's open warnings acknowledged (inside the caller's write transaction)."""
    db.execute("UPDATE job_warnings SET acknowledged = ? WHERE job_id = ? AND acknowledged IS NULL", [now, job_id])
