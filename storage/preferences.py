"""Preference data sets stored as labels: each row's prompt, both responses, a pair and its label, in one go.

Imported pairs carry the selector `imported` (`Selector.IMPORTED`) and arrive already labeled, so they never enter
the human queue; their responses carry the generation source `import:<source>`, which keeps them out of sampling.
`imported_prompt_id`, `imported_pair_id` and `imported_response_id` find or store one row inside a write; gold items
and gold rankings import through them too.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Iterable

from sqlite_utils import Database

from .db import Store
from .labels import NewLabel, find_vote, insert_label
from .types import Outcome, Selector

# Lookups of rows stored before, each served by an index (migration m007). The GLOB term always holds for the
# `import:<source>` bound here; it lets SQLite use the partial index of imported responses.
_FIND_PAIR = "SELECT id FROM pairs WHERE first_id = ? AND second_id = ? AND selector = ?"
_FIND_GENERATION = ("SELECT id FROM generations WHERE prompt_id = ? AND text = ? AND source = ?"
                    " AND source GLOB 'import:*' LIMIT 1")


@dataclass(frozen=True)
class Preference:
    """One row of a preference data set: the prompt's text (a conversation's plain-text form when `messages` holds
    its turns) and the two answers, chosen first."""

    prompt: str
    chosen: str
    rejected: str
    margin: float | None = None
    messages: list[dict] | None = None


@dataclass(frozen=True)
class PreferenceImport:
    added: int
    duplicates: int
    prompt_ids: tuple[int, ...] = ()  # of the prompts the import added


def import_preferences(store: Store, rows: Iterable[Preference], source: str, now: float) -> PreferenceImport:
    """Store preference rows as labels by `source` (chosen = first), all in one transaction or none.

    Prompts and responses already stored are reused; a row imported before from the same source is a duplicate,
    skipped and counted (its vote id is a hash of source and texts).
    """
    added = duplicates = 0
    prompt_ids = []
    with store.write() as db:
        for row in rows:
            vote_id = preference_vote_id(source, row)
            prompt_id, new_prompt = imported_prompt_id(db, row, source, now)
            if new_prompt:
                prompt_ids.append(prompt_id)
            if not new_prompt and find_vote(db, vote_id):  # a stored vote's prompt is stored (never deleted)
                duplicates += 1
                continue
            pair_id = imported_pair_id(db, prompt_id, new_prompt, row, source, now)
            insert_label(db, NewLabel(pair_id, source, Outcome.FIRST, vote_id, margin=row.margin), now)
            added += 1
    return PreferenceImport(added, duplicates, tuple(prompt_ids))


def preference_vote_id(source: str, row: Preference) -> str:
    """The vote id of an imported row's label: a hash of its source and texts, so a row imported again is found."""
    return "import:" + hashlib.sha256("\0".join([source, row.prompt, row.chosen, row.rejected]).encode("utf-8")
                                      ).hexdigest()


def imported_prompt_id(db: Database, row: Preference, source: str, now: float) -> tuple[int, bool]:
    """The id of the row's prompt, stored now unless it was before, and whether it is new."""
    values = {"text": row.prompt, "source": source, "created": now}
    if row.messages is not None:  # only a conversation writes `messages` (m008): a text row fits any schema
        values["messages"] = json.dumps(row.messages, ensure_ascii=False)
    added = db.execute(f"INSERT OR IGNORE INTO prompts ({', '.join(values)}) VALUES ({', '.join('?' * len(values))})",
                       list(values.values()))
    if added.rowcount == 1:
        return added.lastrowid, True
    return db.execute("SELECT id FROM prompts WHERE text = ?", [row.prompt]).fetchone()[0], False


def imported_pair_id(db: Database, prompt_id: int, new_prompt: bool, row: Preference, source: str, now: float) -> int:
    """The imported pair (chosen first) of a row's texts, reused when stored before, else stored now. Nothing of a
    new prompt is stored yet, so its responses and pair are stored without lookups."""
    chosen_id, rejected_id = (imported_response_id(db, prompt_id, text, source, now, new_prompt)
                              for text in (row.chosen, row.rejected))
    pair = None if new_prompt else db.execute(_FIND_PAIR, [chosen_id, rejected_id, Selector.IMPORTED]).fetchone()
    if pair:
        return pair[0]
    return db.execute("INSERT INTO pairs (prompt_id, first_id, second_id, selector, created) VALUES (?, ?, ?, ?, ?)",
                      [prompt_id, chosen_id, rejected_id, Selector.IMPORTED, now]).lastrowid


def imported_response_id(db: Database, prompt_id: int, text: str, source: str, now: float, new_prompt: bool) -> int:
    """An imported response, reused by text; its generation source `import:<source>` keeps it out of sampling."""
    found = None if new_prompt else db.execute(_FIND_GENERATION, [prompt_id, text, f"import:{source}"]).fetchone()
    if found:
        return found[0]
    return db.execute("INSERT INTO generations (prompt_id, text, source, created) VALUES (?, ?, ?, ?)",
                      [prompt_id, text, f"import:{source}", now]).lastrowid
