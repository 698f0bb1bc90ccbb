"""Prompts: added all-or-nothing, duplicates skipped and counted. A conversation keeps its turns as JSON. A prompt
can be excluded (left out of sampling, training and evaluation, still kept and exported), by id or by source. A
prompt may carry a reference (fields such as `answer` that reward functions check against): a prompt's text has one
reference, so a repeat of a stored text with a different reference is refused."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Iterable

from .db import Store
from .errors import InvalidInput, NotFound
from .types import Prompt


@dataclass(frozen=True)
class PromptImport:
    added: int
    duplicates: int
    ids: tuple[int, ...] = ()  # of the prompts added


@dataclass(frozen=True)
class NewPrompt:
    """A prompt to add: plain text, or a conversation's turns with their plain-text form as `text`."""

    text: str
    messages: list[dict] | None = None
    reference: dict | None = None


def add_prompts(store: Store, prompts: Iterable[str | NewPrompt], source: str | None = None,
                heldout: bool = False) -> PromptImport:
    """Insert prompts in one transaction; texts already stored (or repeated in `prompts`) are skipped and counted. A
    repeat carrying a reference other than the stored one is refused (InvalidInput) with nothing added."""
    ids, duplicates = [], 0
    now = time.time()
    with store.write() as db:
        for prompt in prompts:
            if isinstance(prompt, str):
                prompt = NewPrompt(prompt)
            messages = json.dumps(prompt.messages, ensure_ascii=False) if prompt.messages is not None else None
            reference = json.dumps(prompt.reference, ensure_ascii=False) if prompt.reference is not None else None
            cursor = db.execute(
                "INSERT OR IGNORE INTO prompts (text, source, heldout, created, messages, reference) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [prompt.text, source, int(heldout), now, messages, reference],
            )
            if cursor.rowcount:
                ids.append(cursor.lastrowid)
            else:
                _check_same_reference(db, prompt)
                duplicates += 1
    return PromptImport(len(ids), duplicates, tuple(ids))


def _check_same_reference(db, prompt: NewPrompt) -> None:
    """InvalidInput when a repeated prompt text carries a reference other than the one stored with it."""
    if prompt.reference is None:
        return
    stored = stored_reference(db.execute("SELECT reference FROM prompts WHERE text = ?", [prompt.text]).fetchone()[0])
    if stored != prompt.reference:
        raise InvalidInput(f"the prompt {prompt.text[:60]!r} is already stored with the reference {stored}, not "
                           f"{prompt.reference}; a prompt's text has one reference: drop the repeat or make its "
                           "fields agree")


def stored_reference(column: str | None) -> dict | None:
    """A prompt's reference fields from the `prompts.reference` column; None for a prompt without one."""
    return json.loads(column) if column else None


def stored_messages(column: str | None) -> list[dict] | None:
    """A conversation's turns from the `prompts.messages` column; None for a plain-text prompt."""
    return json.loads(column) if column else None


def _row(row: dict) -> Prompt:
    return Prompt(row["id"], row["text"], row["source"], bool(row["heldout"]), stored_messages(row.get("messages")),
                  bool(row.get("excluded")), stored_reference(row.get("reference")))


def list_prompts(store: Store, heldout: bool | None = None, limit: int | None = None,
                 excluded: bool | None = None, source: str | None = None) -> list[Prompt]:
    """Prompts in insertion order; `heldout` filters to held-out (True) or training (False) prompts, `excluded` to
    those left out of sampling (True) or not (False), `source` to one source's."""
    filters = {"heldout": heldout, "excluded": excluded, "source": source}
    given = {name: int(value) if isinstance(value, bool) else value for name, value in filters.items()
             if value is not None}
    where = ("WHERE " + " AND ".join(f"{name} = ?" for name in given)) if given else ""
    sql = f"SELECT * FROM prompts {where} ORDER BY id" + (f" LIMIT {int(limit)}" if limit else "")
    return [_row(r) for r in store.db().query(sql, list(given.values()))]


def get_prompt(store: Store, prompt_id: int) -> Prompt | None:
    rows = list(store.db().query("SELECT * FROM prompts WHERE id = ?", [prompt_id]))
    return _row(rows[0]) if rows else None


def count_prompts(store: Store) -> int:
    return store.db().execute("SELECT count(*) FROM prompts").fetchone()[0]


def excluded_prompt_ids(store: Store) -> tuple[int, ...]:
    """The ids of the prompts left out of sampling, training and evaluation, in order."""
    return tuple(row[0] for row in store.db().execute("SELECT id FROM prompts WHERE excluded = 1 ORDER BY id"))


def prompt_sources(store: Store) -> list[str | None]:
    """The sources prompts came from (a file's name, a preference import's source, `demo`), in order of arrival."""
    rows = store.db().execute("SELECT source FROM prompts GROUP BY source ORDER BY min(id)")
    return [row[0] for row in rows]


@dataclass(frozen=True)
class PromptSelection:
    """Prompts named by id and by source (every prompt of each)."""

    ids: tuple[int, ...] = ()
    sources: tuple[str, ...] = ()


def set_excluded(store: Store, exclude: PromptSelection = PromptSelection(),
                 include: PromptSelection = PromptSelection()) -> tuple[int, int]:
    """Exclude the prompts `exclude` names and include again those `include` names, in one transaction; returns
    how many changed each way. An id or a source the store does not hold is refused (NotFound) with nothing
    changed."""
    with store.write() as db:
        for selection in (exclude, include):
            _check_selection(db, store, selection)
        return tuple(_set_flag(db, selection, flag) for selection, flag in ((exclude, 1), (include, 0)))


def _check_selection(db, store: Store, selection: PromptSelection) -> None:
    ids = sorted(set(selection.ids))
    known = {row[0] for chunk in _chunks(ids)
             for row in db.execute(f"SELECT id FROM prompts WHERE id IN ({_marks(chunk)})", chunk)}
    missing = [i for i in ids if i not in known]
    if missing:
        more = f" (nor {len(missing) - 1} more of those given)" if len(missing) > 1 else ""
        raise NotFound(f"no prompt has id {missing[0]}{more}; python app.py prompts --list shows the ids")
    stored = prompt_sources(store)
    unknown = [name for name in selection.sources if name not in stored]
    if unknown:
        named = ", ".join(repr(name) for name in stored if name is not None) or "none"
        raise NotFound(f"no prompt comes from the source {unknown[0]!r}; the sources are {named}")


def _set_flag(db, selection: PromptSelection, flag: int) -> int:
    """Set `excluded` to `flag` on the selection's prompts; how many changed."""
    changed = sum(db.execute(f"UPDATE prompts SET excluded = ? WHERE excluded != ? AND id IN ({_marks(chunk)})",
                             [flag, flag, *chunk]).rowcount for chunk in _chunks(sorted(set(selection.ids))))
    return changed + sum(db.execute("UPDATE prompts SET excluded = ? WHERE excluded != ? AND source = ?",
                                    [flag, flag, name]).rowcount for name in dict.fromkeys(selection.sources))


_CHUNK = 500  # ids per statement, well under SQLite's limit on a statement's parameters


def _chunks(ids: list[int]) -> list[list[int]]:
    return [ids[start:start + _CHUNK] for start in range(0, len(ids), _CHUNK)]


def _marks(values: list) -> str:
    return ", ".join("?" * len(values))


def prompts_with_reference(store: Store, limit: int | None = None) -> list[Prompt]:
    """The prompts that carry a reference, in insertion order (the first `limit`)."""
    sql = "SELECT * FROM prompts WHERE reference IS NOT NULL ORDER BY id" + (f" LIMIT {int(limit)}" if limit else "")
    return [_row(r) for r in store.db().query(sql)]


def count_with_reference(store: Store) -> int:
    return store.db().execute("SELECT count(*) FROM prompts WHERE reference IS NOT NULL").fetchone()[0]
