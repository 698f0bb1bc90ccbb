"""Generations: sampled (or imported) responses to prompts, with the sampling parameters and seed."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from .db import Store
from .types import Generation

SAMPLE_SOURCE = "sample"  # policy samples that may be paired and queued for labeling
EVAL_SOURCE = "eval"  # held-out samples drawn to compare policy versions, never queued for labeling


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


def add_generations(store: Store, generations: list[NewGeneration],
                    scores: list[dict[str, float]] | None = None) -> list[int]:
    """Insert generations, and their named scores when given (one dict per generation), in one transaction;
    returns their ids in order."""
    if scores is not None and len(scores) != len(generations):
        raise ValueError(f"{len(scores)} score sets for {len(generations)} generations")
    now = time.time()
    ids = []
    with store.write() as db:
        for g in generations:
            cursor = db.execute(
                "INSERT INTO generations (prompt_id, policy_id, text, token_count, params, seed, ended_with_eos, "
                "source, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [g.prompt_id, g.policy_id, g.text, g.token_count, json.dumps(g.params), g.seed,
                 None if g.ended_with_eos is None else int(g.ended_with_eos), g.source, now],
            )
            ids.append(cursor.lastrowid)
        for generation_id, named in zip(ids, scores or [], strict=False):
            _write_scores(db, generation_id, named)
    return ids


def generation_row(row: dict) -> Generation:
    """A `generations` row as a `Generation`."""
    eos = row["ended_with_eos"]
    return Generation(row["id"], row["prompt_id"], row["policy_id"], row["text"], row["token_count"],
                      json.loads(row["params"]), row["seed"], None if eos is None else bool(eos), row["source"])


def get_generations(store: Store, ids: list[int]) -> dict[int, Generation]:
    if not ids:
        return {}
    marks = ",".join("?" * len(ids))
    rows = store.db().query(f"SELECT * FROM generations WHERE id IN ({marks})", list(ids))
    return {r["id"]: generation_row(r) for r in rows}


def list_generations(store: Store, policy_id: int | None = None, prompt_id: int | None = None,
                     source: str | None = None) -> list[Generation]:
    clauses, params = [], []
    if source is not None:
        clauses.append("source = ?")
        params.append(source)
    if policy_id is not None:
        clauses.append("policy_id = ?")
        params.append(policy_id)
    if prompt_id is not None:
        clauses.append("prompt_id = ?")
        params.append(prompt_id)
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    return [generation_row(r) for r in store.db().query(f"SELECT * FROM generations {where} ORDER BY id", params)]




def _write_scores(db, generation_id: int, named: dict[str, float]) -> None:
    for name, value in named.items():
        db.execute("INSERT INTO generation_scores (generation_id, name, value) VALUES (?, ?, ?)"
                   " ON CONFLICT (generation_id, name) DO UPDATE SET value = excluded.value",
                   [generation_id, name, float(value)])


def eval_samples(store: Store, policy_id: int | None = None) -> list[dict]:
    """Held-out evaluation samples of every policy version (or of one): rows {policy_id, round, prompt, text,
    <score names>}."""
    rows = store.db().query(
        """
        SELECT g.id, g.policy_id, pol.round, p.text AS prompt, g.text, s.name, s.value
        FROM generations g
        JOIN prompts p ON p.id = g.prompt_id
        JOIN policies pol ON pol.id = g.policy_id
        LEFT JOIN generation_scores s ON s.generation_id = g.id
        WHERE g.source = ? AND (? IS NULL OR g.policy_id = ?)
        ORDER BY g.policy_id, g.prompt_id, g.id
        """, [EVAL_SOURCE, policy_id, policy_id])
    samples: dict[int, dict] = {}
    for r in rows:
        sample = samples.setdefault(r["id"], {"policy_id": r["policy_id"], "round": r["round"], "prompt": r["prompt"],
                                             "text": r["text"]})
        if r["name"] is not None:
            sample[r["name"]] = r["value"]
    return list(samples.values())


FUNCTION_SCORE_PREFIX = "fn:"  # a reward function's value on an evaluation sample: `fn:<label>`


def add_scores(store: Store, scores: dict[int, dict[str, float]]) -> None:
    """Add (or replace) named scores of stored generations, by generation id, in one transaction."""
    with store.write() as db:
        for generation_id, named in scores.items():
            _write_scores(db, generation_id, named)


def eval_sample_ids(store: Store, policy_id: int) -> list[int]:
    """The ids of a version's evaluation samples, in the order `eval_samples` lists them."""
    rows = store.db().execute("SELECT id FROM generations WHERE source = ? AND policy_id = ? ORDER BY prompt_id, id",
                              [EVAL_SOURCE, policy_id])
    return [row[0] for row in rows]


def function_scores(store: Store) -> dict[int, dict[str, tuple[float, int]]]:
    """Per policy version, each reward function's mean over its evaluation samples and how many it scored:
    {policy_id: {label: (mean, samples)}}, versions and labels in order."""
    rows = store.db().execute(
        """
        SELECT g.policy_id, s.name, avg(s.value), count(*)
        FROM generations g JOIN generation_scores s ON s.generation_id = g.id
        WHERE g.source = ? AND s.name >= ? AND s.name < ?
        GROUP BY g.policy_id, s.name ORDER BY g.policy_id, s.name
        """, [EVAL_SOURCE, FUNCTION_SCORE_PREFIX, FUNCTION_SCORE_PREFIX[:-1] + chr(ord(":") + 1)])
    scores: dict[int, dict[str, tuple[float, int]]] = {}
    for policy_id, name, mean, count in rows:
        scores.setdefault(policy_id, {})[name.removeprefix(FUNCTION_SCORE_PREFIX)] = (mean, count)
    return scores
