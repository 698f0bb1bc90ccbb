"""Prompts: added all-or-nothing, duplicates skipped and counted. A conversation keeps its turns as JSON."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Iterable

from .db import Store
from .types import Prompt


@dataclass(frozen=True)
class PromptImport:
    added: int
    duplicates: int


@dataclass(frozen=True)
class NewPrompt:
    """A prompt to add: plain text, or a conversation's turns with their plain-text form as `text`."""

    text: str
    messages: list[dict] | None = None


def add_prompts(store: Store, prompts: Iterable[str | NewPrompt], source: str | None = None,
                heldout: bool = False) -> PromptImport:
    """Insert prompts in one transaction; texts already stored (or repeated in `prompts`) are skipped and counted."""
    added = duplicates = 0
    now = time.time()
    with store.write() as db:
        for prompt in prompts:
            if isinstance(prompt, str):
                prompt = NewPrompt(prompt)
            messages = json.dumps(prompt.messages, ensure_ascii=False) if prompt.messages is not None else None
            cursor = db.execute(
                "INSERT OR IGNORE INTO prompts (text, source, heldout, created, messages) VALUES (?, ?, ?, ?, ?)",
                [prompt.text, source, int(heldout), now, messages],
            )
            if cursor.rowcount:
                added += 1
            else:
                duplicates += 1
    return PromptImport(added, duplicates)


def stored_messages(column: str | None) -> list[dict] | None:
    """A conversation's turns from the `prompts.messages` column; None for a plain-text prompt."""
    return json.loads(column) if column else None


def _row(row: dict) -> Prompt:
    return Prompt(row["id"], row["text"], row["source"], bool(row["heldout"]), stored_messages(row.get("messages")))


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
