"""Notes on a judgement: the annotator's rationale (free text) and 1-7 ratings of its answers, stored beside a pair
label or a ranking verdict (`judgement_notes`; ratings as {generation id: rating}). Written in the vote's own
transaction; a replayed vote writes nothing again."""

from __future__ import annotations

import json
from dataclasses import dataclass

from .db import Store


@dataclass(frozen=True)
class Note:
    kind: str  # pair | ranking
    label_id: int  # the pair label's or the ranking verdict's id
    annotator: str
    rationale: str | None
    ratings: dict[int, int] | None  # generation id -> 1..7


def add_pair_note(db, label_id: int, rationale: str | None, shown_ratings: list[int] | None) -> None:
    """Store the note of pair label `label_id`; `shown_ratings` are [left, right] as the annotator saw them."""
    ratings = None
    if shown_ratings is not None:
        left_id, first_id, second_id = db.execute(
            "SELECT l.left_id, p.first_id, p.second_id FROM labels l JOIN pairs p ON p.id = l.pair_id WHERE l.id = ?",
            [label_id]).fetchone()
        right_id = second_id if left_id == first_id else first_id
        ratings = {left_id: shown_ratings[0], right_id: shown_ratings[1]}
    _add(db, "label_id", label_id, rationale, ratings)


def add_ranking_note(db, label_id: int, rationale: str | None, shown_ratings: list[int] | None) -> None:
    """Store the note of ranking verdict `label_id`; `shown_ratings` in the order shown (A first)."""
    ratings = None
    if shown_ratings is not None:
        members = [r[0] for r in db.execute(
            "SELECT m.generation_id FROM ranking_labels l JOIN ranking_members m ON m.ranking_id = l.ranking_id"
            " WHERE l.id = ? ORDER BY m.position", [label_id])]
        ratings = dict(zip(members, shown_ratings, strict=True))
    _add(db, "ranking_label_id", label_id, rationale, ratings)


def _add(db, column: str, label_id: int, rationale: str | None, ratings: dict | None) -> None:
    if rationale is None and ratings is None:
        return
    db.execute(f"INSERT OR IGNORE INTO judgement_notes ({column}, rationale, ratings) VALUES (?, ?, ?)",
               [label_id, rationale, None if ratings is None else json.dumps(ratings)])


def _ratings(text: str | None) -> dict[int, int] | None:
    return None if text is None else {int(k): v for k, v in json.loads(text).items()}


def list_notes(store: Store, limit: int | None = None) -> list[Note]:
    """Notes of current judgements, newest first."""
    rows = store.db().execute(
        "SELECT 'pair', l.id, l.annotator, n.rationale, n.ratings, l.created FROM judgement_notes n"
        " JOIN labels l ON l.id = n.label_id WHERE l.undone IS NULL"
        " UNION ALL SELECT 'ranking', r.id, r.annotator, n.rationale, n.ratings, r.created FROM judgement_notes n"
        " JOIN ranking_labels r ON r.id = n.ranking_label_id WHERE r.undone IS NULL"
        " ORDER BY 6 DESC" + ("" if limit is None else f" LIMIT {int(limit)}")).fetchall()
    return [Note(kind, label_id, annotator, rationale, _ratings(ratings))
            for kind, label_id, annotator, rationale, ratings, _ in rows]


def notes_by_label(store: Store) -> dict[tuple[str, int], Note]:
    """Every current judgement's note, by (kind, label id)."""
    return {(note.kind, note.label_id): note for note in list_notes(store)}
