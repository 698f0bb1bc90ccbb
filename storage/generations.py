"""Generations: sampled (or imported) responses to prompts, with the sampling parameters and seed."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from .db import Store
from .types import Generation


@dataclass(frozen=True)
class NewGeneration:
    prompt_id: int
    text: str
    policy_id: int | None = None
    token_count: int | None = None
    params: dict = field(default_factory=dict)
    seed: int | None = None
    ended_with_eos: bool | None = None
    source: str | None = None


def add_generations(store: Store, generations: list[NewGeneration]) -> list[int]:
    """Insert generations in one transaction; returns their ids in order."""
    now = time.time()
    ids = []
    with store.write() as db:
        for g in generations:
            cursor = db.execute(
                "INSERT INTO generations (prompt_id, policy_id, text, token_count, params, seed, ended_with_eos, source, created)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [g.prompt_id, g.policy_id, g.text, g.token_count, json.dumps(g.params), g.seed,
                 None if g.ended_with_eos is None else int(g.ended_with_eos), g.source, now],
            )
            ids.append(cursor.lastrowid)
    return ids


def _row(row: dict) -> Generation:
    eos = row["ended_with_eos"]
    return Generation(row["id"], row["prompt_id"], row["policy_id"], row["text"], row["token_count"],
                      json.loads(row["params"]), row["seed"], None if eos is None else bool(eos), row["source"])


def get_generations(store: Store, ids: list[int]) -> dict[int, Generation]:
    if not ids:
        return {}
    marks = ",".join("?" * len(ids))
    return {r["id"]: _row(r) for r in store.db().query(f"SELECT * FROM generations WHERE id IN ({marks})", list(ids))}


def list_generations(store: Store, policy_id: int | None = None, prompt_id: int | None = None) -> list[Generation]:
    clauses, params = [], []
    if policy_id is not None:
        clauses.append("policy_id = ?")
        params.append(policy_id)
    if prompt_id is not None:
        clauses.append("prompt_id = ?")
        params.append(prompt_id)
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    return [_row(r) for r in store.db().query(f"SELECT * FROM generations {where} ORDER BY id", params)]
