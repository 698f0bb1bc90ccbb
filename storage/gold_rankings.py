"""Gold rankings' writes and serving: import gold rankings, mark a ranking verdict as gold, reserve an annotator's
next gold ranking (see `storage.gold` for what gold items are and how a ranking scores an annotator)."""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from typing import Iterable

from .db import Store
from .errors import Conflict, InvalidInput, NotFound
from .preferences import imported_prompt_id, imported_response_id
from .rankings import RANKED, ReservedRanking, ranking_members, write_ranking_reservation
from .types import Selector


@dataclass(frozen=True)
class GoldRankingRow:
    """One gold ranking of a file: the prompt (`messages` its turns when a conversation), K different answers and
    their gold order as tiers of indices into `responses`, best tier first (two in one tier are tied)."""

    prompt: str
    responses: tuple[str, ...]
    tiers: list[list[int]]
    messages: list[dict] | None = None


def import_gold_rankings(store: Store, rows: Iterable[GoldRankingRow], source: str,
                         rng: random.Random | None = None) -> tuple[int, int]:
    """Store rows as gold rankings, all or none: the answers as generations of the prompt, shown in a random order
    (stored, the tiers mapped to it) as any ranking is; a ranking of selector `imported`, which the ordinary queue never
    serves; a new prompt stored excluded, so no loop samples it. Returns (added, already gold)."""
    rng = rng or random.Random()
    now, added, known = time.time(), 0, 0
    with store.write() as db:
        for row in rows:
            prompt_id, new_prompt = imported_prompt_id(db, row, source, now)
            if new_prompt:
                db.execute("UPDATE prompts SET excluded = 1 WHERE id = ?", [prompt_id])
            ids = [imported_response_id(db, prompt_id, text, source, now, new_prompt) for text in row.responses]
            if not new_prompt and _known(db, prompt_id, ids):
                known += 1
                continue
            shown = rng.sample(range(len(ids)), len(ids))  # shown[position] = the row's index shown there
            ranking_id = db.execute("INSERT INTO rankings (prompt_id, selector, created) VALUES (?, ?, ?)",
                                    [prompt_id, Selector.IMPORTED, now]).lastrowid
            for position, index in enumerate(shown):
                db.execute("INSERT INTO ranking_members (ranking_id, position, generation_id) VALUES (?, ?, ?)",
                           [ranking_id, position, ids[index]])
            tiers = [sorted(shown.index(i) for i in tier) for tier in row.tiers]
            db.execute("INSERT INTO gold_rankings (ranking_id, tiers, source, created) VALUES (?, ?, ?, ?)",
                       [ranking_id, json.dumps(tiers), source, now])
            added += 1
    return added, known


def _known(db, prompt_id: int, generation_ids: list[int]) -> bool:
    """Is a gold ranking of these answers of the prompt stored (in any order)?"""
    rows = db.execute("SELECT k.id FROM rankings k JOIN gold_rankings g ON g.ranking_id = k.id"
                      " WHERE k.prompt_id = ?", [prompt_id]).fetchall()
    return any(sorted(ranking_members(db, r[0])) == sorted(generation_ids) for r in rows)


def mark_gold_ranking(store: Store, label_id: int) -> int:
    """Make the ranking of verdict `label_id` a gold ranking whose order is that verdict's; returns the ranking id."""
    with store.write() as db:
        row = db.execute("SELECT ranking_id, outcome, tiers, undone FROM ranking_labels WHERE id = ?",
                         [label_id]).fetchone()
        if row is None:
            raise NotFound(f"ranking verdict {label_id} does not exist; pick a ranking label id from the Data tab")
        ranking_id, outcome, tiers, undone = row
        if undone is not None or outcome != RANKED or len(json.loads(tiers)) < 2:
            what = "undone" if undone is not None else {"all_bad": "all bad", "skip": "a skip"}.get(
                outcome, "a tie of every answer")
            raise InvalidInput(f"ranking verdict {label_id} is {what}; a gold order is a current verdict that ranks "
                               "at least two answers apart")
        if db.execute("SELECT 1 FROM gold_rankings WHERE ranking_id = ?", [ranking_id]).fetchone():
            raise Conflict(f"ranking verdict {label_id}'s ranking ({ranking_id}) is gold already")
        db.execute("INSERT INTO gold_rankings (ranking_id, tiers, origin_label_id, source, created)"
                   " VALUES (?, ?, ?, ?, ?)", [ranking_id, tiers, label_id, "marked", time.time()])
    return ranking_id


def count_gold_rankings(store: Store) -> int:
    return store.db().execute("SELECT count(*) FROM gold_rankings").fetchone()[0]


def holds_ranking_reservation(store: Store, annotator: str, now: float) -> bool:
    """Does the annotator hold a live ranking reservation (which the queue gives back before anything else)."""
    return store.db().execute("SELECT 1 FROM ranking_reservations WHERE annotator = ? AND expires > ?",
                              [annotator, now]).fetchone() is not None


def rankings_given(store: Store, annotator: str) -> int:
    """The annotator's current ranking verdicts, skips and gold included: where they are in their own sequence."""
    return store.db().execute("SELECT count(*) FROM ranking_labels WHERE annotator = ? AND undone IS NULL",
                              [annotator]).fetchone()[0]


def reserve_gold_ranking(store: Store, annotator: str, ttl_s: float, now: float) -> ReservedRanking | None:
    """Reserve for `annotator` the first gold ranking they have not judged, whatever the overlap (every annotator
    judges every gold ranking); None when none is left for them."""
    with store.write() as db:
        row = db.execute(
            "SELECT g.ranking_id FROM gold_rankings g WHERE NOT EXISTS (SELECT 1 FROM ranking_labels l"
            " WHERE l.ranking_id = g.ranking_id AND l.annotator = ? AND l.undone IS NULL) ORDER BY g.id LIMIT 1",
            [annotator]).fetchone()
        if row is None:
            return None
        db.execute("DELETE FROM ranking_reservations WHERE annotator = ?", [annotator])
        return write_ranking_reservation(db, row[0], annotator, now + ttl_s, now)
