"""Prompts: added all-or-nothing, duplicates skipped and counted."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterable

from .db import Store
from .types import Prompt


@dataclass(frozen=True)
class PromptImport:
    added: int
    duplicates: int


def add_prompts(store: Store, texts: Iterable[str], source: str | None = None, heldout: bool = False) -> PromptImport:
    """Insert prompts in one transaction; texts already stored (or repeated in `texts`) are skipped and counted."""
    added = duplicates = 0
    now = time.time()
    with store.write() as db:
        for text in texts:
            cursor = db.execute(
                "INSERT OR IGNORE INTO prompts (text, source, heldout, created) VALUES (?, ?, ?, ?)",
                [text, source, int(heldout), now],
            )
            if cursor.rowcount:
                added += 1
            else:
                duplicates += 1
    return PromptImport(added, duplicates)


def _row(row: dict) -> Prompt:
    return Prompt(row["id"], row["text"], row["source"], bool(row["heldout"]))


def list_prompts(store: Store, heldout: bool | None = None, limit: int | None = None) -> list[Prompt]:
    """Prompts in insertion order; `heldout` filters to held-out (True) or training (False) prompts."""
    where, params = ("", []) if heldout is None else ("WHERE heldout = ?", [int(heldout)])
    sql = f"SELECT * FROM prompts {where} ORDER BY id" + (f" LIMIT {int(limit)}" if limit else "")
    return [_row(r) for r in store.db().query(sql, params)]


def get_prompt(store: Store, prompt_id: int) -> Prompt | None:
    rows = list(store.db().query("SELECT * FROM prompts WHERE id = ?", [prompt_id]))
    return _row(rows[0]) if rows else None


def count_prompts(store: Store) -> int:
    return store.db().execute("SELECT count(*) FROM prompts").fetchone()[0]
