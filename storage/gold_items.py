"""Gold items' writes and serving: import gold pairs, mark a labelled pair as gold, reserve an annotator's next gold
pair (see `storage.gold` for what gold items are and how they score annotators)."""

from __future__ import annotations

import time
from typing import Iterable

from .db import Store
from .errors import Conflict, InvalidInput, NotFound
from .gold import ANSWERS
from .preferences import Preference, imported_pair_id, imported_prompt_id
from .votes import Reserved, write_reservation


def import_gold_pairs(store: Store, rows: Iterable[Preference], source: str) -> tuple[int, int]:
    """Store preference rows as gold pairs (chosen first, the answer `first`), all or none; (added, already gold)."""
    now, added, known = time.time(), 0, 0
    with store.write() as db:
        for row in rows:
            prompt_id, new_prompt = imported_prompt_id(db, row, source, now)
            if new_prompt:
                db.execute("UPDATE prompts SET excluded = 1 WHERE id = ?", [prompt_id])
            pair_id = imported_pair_id(db, prompt_id, new_prompt, row, source, now)
            if db.execute("SELECT 1 FROM gold_items WHERE pair_id = ?", [pair_id]).fetchone():
                known += 1
                continue
            db.execute("INSERT INTO gold_items (pair_id, answer, source, created) VALUES (?, 'first', ?, ?)",
                       [pair_id, source, now])
            added += 1
    return added, known


def mark_gold(store: Store, label_id: int) -> int:
    """Make the pair of label `label_id` a gold pair whose answer is that label's outcome; returns the pair id."""
    with store.write() as db:
        row = db.execute("SELECT pair_id, outcome, undone FROM labels WHERE id = ?", [label_id]).fetchone()
        if row is None:
            raise NotFound(f"label {label_id} does not exist; pick a label id from the Data tab's table")
        pair_id, outcome, undone = row
        if undone is not None or outcome not in ANSWERS:
            raise InvalidInput(f"label {label_id} is {'undone' if undone else outcome.replace('_', ' ')}; a gold "
                               "answer is first, second or tie of a current label")
        if db.execute("SELECT 1 FROM gold_items WHERE pair_id = ?", [pair_id]).fetchone():
            raise Conflict(f"label {label_id}'s pair ({pair_id}) is gold already")
        db.execute("INSERT INTO gold_items (pair_id, answer, origin_label_id, source, created) VALUES (?, ?, ?, ?, ?)",
                   [pair_id, outcome, label_id, "marked", time.time()])
    return pair_id


def count_gold(store: Store) -> int:
    return store.db().execute("SELECT count(*) FROM gold_items").fetchone()[0]


def holds_reservation(store: Store, annotator: str, now: float) -> bool:
    """Does the annotator hold a live pair reservation (which the queue gives back before anything else)."""
    return store.db().execute("SELECT 1 FROM reservations WHERE annotator = ? AND expires > ?",
                              [annotator, now]).fetchone() is not None


def labels_given(store: Store, annotator: str) -> int:
    """The annotator's current labels, skips and gold included: where they are in their own sequence."""
    return store.db().execute("SELECT count(*) FROM labels WHERE annotator = ? AND undone IS NULL",
                              [annotator]).fetchone()[0]


def reserve_gold_pair(store: Store, annotator: str, first_on_left: bool, ttl_s: float, now: float) -> Reserved | None:
    """Reserve for `annotator` the first gold pair they have not labelled, whatever the overlap (every annotator judges
    every gold pair); None when none is left for them."""
    with store.write() as db:
        row = db.execute(
            "SELECT p.id, p.first_id, p.second_id FROM gold_items g JOIN pairs p ON p.id = g.pair_id"
            " WHERE NOT EXISTS (SELECT 1 FROM labels l WHERE l.pair_id = p.id AND l.annotator = ?"
            " AND l.undone IS NULL) ORDER BY g.id LIMIT 1", [annotator]).fetchone()
        if row is None:
            return None
        pair_id, first_id, second_id = row
        db.execute("DELETE FROM reservations WHERE annotator = ?", [annotator])
        return write_reservation(db, pair_id, annotator, first_id if first_on_left else second_id, now + ttl_s, now)
