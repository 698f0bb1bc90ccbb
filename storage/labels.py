"""Labels: one current label per (pair, annotator); undone labels are kept, flagged, never deleted."""

from __future__ import annotations

import time
from dataclasses import dataclass

from .db import Store
from .types import Label, Outcome


def _row(row: dict) -> Label:
    return Label(row["id"], row["pair_id"], row["annotator"], Outcome(row["outcome"]), row["left_id"],
                 row["decision_ms"], row["vote_id"], row["created"])


def add_label(store: Store, pair_id: int, annotator: str, outcome: Outcome, left_id: int | None = None,
              decision_ms: int | None = None, vote_id: str | None = None) -> int:
    """Store a label durably and return its id. A replayed `vote_id` returns the first label's id, storing nothing.

    A new label by the same annotator on the same pair replaces their current one (the old is kept as undone).
    """
    with store.write() as db:
        if vote_id is not None:
            found = db.execute("SELECT id FROM labels WHERE vote_id = ?", [vote_id]).fetchone()
            if found:
                return found[0]
        now = time.time()
        db.execute("UPDATE labels SET undone = ? WHERE pair_id = ? AND annotator = ? AND undone IS NULL",
                   [now, pair_id, annotator])
        cursor = db.execute(
            "INSERT INTO labels (pair_id, annotator, outcome, left_id, decision_ms, vote_id, created)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            [pair_id, annotator, Outcome(outcome).value, left_id, decision_ms, vote_id, now],
        )
        return cursor.lastrowid


def list_labels(store: Store, annotator: str | None = None, include_undone: bool = False) -> list[Label]:
    clauses, params = ([] if include_undone else ["undone IS NULL"]), []
    if annotator is not None:
        clauses.append("annotator = ?")
        params.append(annotator)
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    return [_row(r) for r in store.db().query(f"SELECT * FROM labels {where} ORDER BY id", params)]


def count_labels(store: Store, include_skips: bool = True) -> int:
    extra = "" if include_skips else " AND outcome != 'skip'"
    return store.db().execute(f"SELECT count(*) FROM labels WHERE undone IS NULL{extra}").fetchone()[0]


@dataclass(frozen=True)
class LabeledPair:
    """A current label joined with its texts: a reward-model training example, or an exported row."""

    label_id: int
    pair_id: int
    annotator: str
    outcome: Outcome
    prompt: str
    first: str
    second: str
    margin: float | None = None  # by how much the winner leads (imported preference data may carry one)


def labeled_pairs(store: Store, include_skips: bool = False) -> list[LabeledPair]:
    """Every current label (skips only when asked), with prompt, both responses and margin, in label order."""
    skips = "" if include_skips else " AND l.outcome != 'skip'"
    rows = store.db().query(
        f"""
        SELECT l.id AS label_id, l.pair_id, l.annotator, l.outcome, p.text AS prompt,
               g1.text AS first, g2.text AS second, l.margin
        FROM labels l
        JOIN pairs pr ON pr.id = l.pair_id
        JOIN prompts p ON p.id = pr.prompt_id
        JOIN generations g1 ON g1.id = pr.first_id
        JOIN generations g2 ON g2.id = pr.second_id
        WHERE l.undone IS NULL{skips}
        ORDER BY l.id
        """
    )
    return [LabeledPair(r["label_id"], r["pair_id"], r["annotator"], Outcome(r["outcome"]), r["prompt"],
                        r["first"], r["second"], r["margin"]) for r in rows]
