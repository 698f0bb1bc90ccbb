"""Reward models: registered only after their checkpoint directory is complete."""

from __future__ import annotations

import json
import time

from .db import Store
from .types import RewardModel


def add_reward_model(store: Store, path: str, labels_used: int, metrics: dict, norm_mean: float, norm_std: float,
                     policy_id: int | None = None, round: int = 0, ensemble_index: int = 0, ensemble_size: int = 1,
                     job_id: int | None = None) -> int:
    with store.write() as db:
        cursor = db.execute(
            "INSERT INTO reward_models (path, policy_id, round, labels_used, metrics, norm_mean, norm_std,"
            " ensemble_index, ensemble_size, job_id, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [str(path), policy_id, round, labels_used, json.dumps(metrics), norm_mean, norm_std, ensemble_index,
             ensemble_size, job_id, time.time()],
        )
        return cursor.lastrowid


def _row(row: dict) -> RewardModel:
    return RewardModel(row["id"], row["path"], row["policy_id"], row["round"], row["labels_used"],
                       json.loads(row["metrics"]), row["norm_mean"], row["norm_std"], row["ensemble_index"],
                       row["ensemble_size"], row["job_id"], row["created"])


def list_reward_models(store: Store) -> list[RewardModel]:
    return [_row(r) for r in store.db().query("SELECT * FROM reward_models ORDER BY id")]


def latest_reward_models(store: Store) -> list[RewardModel]:
    """The newest ensemble (all members registered by the newest reward training), member 0 first."""
    db = store.db()
    newest = db.execute("SELECT id, job_id, ensemble_size FROM reward_models ORDER BY id DESC LIMIT 1").fetchone()
    if newest is None:
        return []
    _, job_id, size = newest
    rows = db.query("SELECT * FROM reward_models ORDER BY id DESC LIMIT ?", [size])
    members = [_row(r) for r in rows if r["job_id"] == job_id]
    return sorted(members, key=lambda m: m.ensemble_index)
