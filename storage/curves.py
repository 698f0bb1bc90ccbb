"""Read queries behind the Curves tab: a job's metric series, each point tagged with the round it belongs to.

A point belongs to round g when the first round boundary written after it is g's: a round's reward model is
registered right after its reward training, and its round row right after its PPO (both rows keep the job and
the time). Points after the last boundary belong to the round still in progress (round None).
Queries are range scans of the covering index metrics_series (job_id, name, step, value, created), so they stay
fast on large stores.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from itertools import groupby
from operator import itemgetter

from .db import Store


@dataclass(frozen=True)
class Series:
    """One metric of one job in step order; `rounds[i]` is the round of point i (None: in progress)."""

    name: str
    steps: list[int]
    values: list[float]
    rounds: list[int | None]


def metric_series(store: Store, job_id: int, names: list[str] | None = None,
                  prefix: str | None = None) -> dict[str, Series]:
    """The job's series by name: exact `names`, or every name starting with `prefix`, or all of them."""
    sql = "SELECT name, step, value, created FROM metrics WHERE job_id = ?"
    params: list = [job_id]
    if names:
        sql += f" AND name IN ({','.join('?' * len(names))})"
        params.extend(names)
    elif prefix:
        sql += " AND name >= ? AND name < ?"  # a prefix as a key range: the primary key serves it
        params.extend([prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1)])
    times, boundary_rounds = _round_boundaries(store, job_id)
    series: dict[str, Series] = {}
    for name, rows in groupby(store.db().execute(sql + " ORDER BY name, step", params).fetchall(), key=itemgetter(0)):
        _, steps, values, created = zip(*rows, strict=True)
        at = [bisect.bisect_left(times, t) for t in created]
        series[name] = Series(name, list(steps), list(values),
                              [boundary_rounds[i] if i < len(times) else None for i in at])
    return series


def _round_boundaries(store: Store, job_id: int) -> tuple[list[float], list[int]]:
    """(times, rounds) of the job's registered reward models and round rows, in time order."""
    rows = store.db().execute(
        "SELECT created, round FROM reward_models WHERE job_id = ? UNION ALL"
        " SELECT created, round FROM rounds WHERE job_id = ? ORDER BY created", [job_id, job_id]).fetchall()
    return [r[0] for r in rows], [r[1] for r in rows]
