"""Metrics in long format: (job, step, name, value). A step written twice keeps the last value, never two rows."""

from __future__ import annotations

import math
import time

from .db import Store


def log_metrics(store: Store, job_id: int, step: int, values: dict[str, float]) -> None:
    """Write one step's metrics (namespaced names such as `ppo/kl`); non-finite values are skipped."""
    now = time.time()
    with store.write() as db:
        for name, value in values.items():
            value = float(value)
            if not math.isfinite(value):
                continue
            db.execute(
                "INSERT INTO metrics (job_id, step, name, value, created) VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT (job_id, name, step) DO UPDATE SET value = excluded.value, created = excluded.created",
                [job_id, step, name, value, now],
            )


def read_metrics(store: Store, job_id: int | None = None, names: list[str] | None = None,
                 prefix: str | None = None) -> list[dict]:
    """Rows `{job_id, step, name, value}` ordered by job, name, step; filter by job, exact names or a name prefix."""
    clauses, params = [], []
    if job_id is not None:
        clauses.append("job_id = ?")
        params.append(job_id)
    if names:
        clauses.append(f"name IN ({','.join('?' * len(names))})")
        params.extend(names)
    if prefix:
        clauses.append("name LIKE ? ESCAPE '\\'")
        params.append(prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%")
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    sql = f"SELECT job_id, step, name, value FROM metrics {where} ORDER BY job_id, name, step"
    return list(store.db().query(sql, params))


def last_step(store: Store, job_id: int, prefix: str = "") -> int | None:
    """Highest step logged by a job (optionally for names with a prefix); None when nothing was logged."""
    row = store.db().execute("SELECT max(step) FROM metrics WHERE job_id = ? AND name LIKE ?",
                             [job_id, prefix + "%"]).fetchone()
    return row[0]


def jobs_with_metrics(store: Store) -> set[int]:
    """The jobs that logged at least one metric."""
    return {row[0] for row in store.db().execute("SELECT DISTINCT job_id FROM metrics")}
