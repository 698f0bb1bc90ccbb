"""Demonstrations: a better answer to a prompt, which trains the policy by supervised fine-tuning (SFT).

Written or edited in the Label tab (source `label`: the pair and the response it was edited from, and the seconds
spent), written by a synthetic demonstrator (source `synthetic`), or imported from a data set (source
`import:<name>`, the name as author). Undone demonstrations are kept, flagged, never deleted, as labels are. Texts
are checked by the caller (`labeling.demonstrations.demonstrations`); here the rows they point to are.

    demo_id = add_demonstration(store, NewDemonstration(prompt_id, "A better answer.", "ada", LABEL_TAB, pair_id=3))
    undo_last_demonstration(store, "ada")
    [d.text for d in list_demonstrations(store)]
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Iterable

from sqlite_utils import Database

from .db import Store
from .errors import Conflict, InvalidInput, NotFound
from .prompts import stored_messages

LABEL_TAB = "label"  # written or edited by a person in the Label tab
SYNTHETIC = "synthetic"  # written by the synthetic demonstrator (tests and benches)
IMPORT_PREFIX = "import:"  # + the import's name
MAX_SECONDS = 24 * 3600  # the most time one demonstration is taken to have cost (a day); more is no person's


@dataclass(frozen=True)
class NewDemonstration:
    """A demonstration to store: the prompt it answers, its text, who wrote it and how (`source`), the pair and the
    response it was edited from (None when written from nothing) and the seconds spent writing it."""

    prompt_id: int
    text: str
    author: str
    source: str
    pair_id: int | None = None
    generation_id: int | None = None
    seconds: float | None = None


@dataclass(frozen=True)
class Demonstration:
    """A stored demonstration joined with its prompt (`prompt_messages`: its turns when it is a conversation)."""

    id: int
    prompt_id: int
    prompt: str
    text: str
    author: str
    source: str
    pair_id: int | None
    generation_id: int | None
    seconds: float | None
    created: float
    undone: float | None = None
    prompt_messages: list[dict] | None = None
    prompt_excluded: bool = False

    @property
    def prompt_content(self) -> str | list[dict]:
        """What the model is prompted with: the conversation's turns, or the prompt text."""
        return self.prompt_messages if self.prompt_messages is not None else self.prompt


@dataclass(frozen=True)
class ImportedDemonstration:
    """One row of a demonstrations data set: the prompt's text (a conversation's plain-text form when `messages`
    holds its turns) and the answer."""

    prompt: str
    text: str
    messages: list[dict] | None = None


@dataclass(frozen=True)
class DemonstrationImport:
    added: int
    duplicates: int
    prompt_ids: tuple[int, ...] = ()  # of the prompts the import added
    ids: tuple[int, ...] = ()  # of the demonstrations added


_INSERT = ("INSERT INTO demonstrations (prompt_id, text, author, source, pair_id, generation_id, seconds, created)"
           " VALUES (?, ?, ?, ?, ?, ?, ?, ?)")


def add_demonstration(store: Store, demo: NewDemonstration, now: float | None = None) -> int:
    """Store one demonstration and return its id. The prompt must exist; the pair (when given) must be one of its
    pairs and the response it was edited from one of that pair's two (or one of the prompt's when no pair is given);
    the time spent from 0 to MAX_SECONDS. A person's answer already stored for the prompt (Label tab, current) is
    refused (Conflict): the same text stored twice would train twice.
    """
    now = time.time() if now is None else now
    _check_seconds(demo.seconds)
    with store.write() as db:
        if db.execute("SELECT 1 FROM prompts WHERE id = ?", [demo.prompt_id]).fetchone() is None:
            raise NotFound(f"prompt {demo.prompt_id} does not exist; write the demonstration for a stored prompt")
        _check_origin(db, demo)
        if demo.source == LABEL_TAB:
            _check_new(db, demo)
        return _insert(db, demo, now)


def _check_seconds(seconds: object) -> None:
    """InvalidInput unless `seconds` is None or a number of seconds a person could spend: 0 to MAX_SECONDS."""
    if seconds is None:
        return
    number = isinstance(seconds, (int, float)) and not isinstance(seconds, bool)
    if not number or not 0 <= seconds <= MAX_SECONDS:
        shown = seconds if number else repr(seconds)[:40]
        raise InvalidInput(f"the time spent on a demonstration must be from 0 to {MAX_SECONDS} seconds (a day), not "
                           f"{shown}; send the seconds the answer took, or null")


def _check_new(db: Database, demo: NewDemonstration) -> None:
    """Conflict when the author's current answers to the prompt hold this text already."""
    row = db.execute("SELECT id FROM demonstrations WHERE prompt_id = ? AND author = ? AND source = ? AND text = ?"
                     " AND undone IS NULL", [demo.prompt_id, demo.author, demo.source, demo.text]).fetchone()
    if row is not None:
        raise Conflict(f"{demo.author} saved this answer to the prompt already (demonstration {row[0]}); nothing was "
                       "stored: write a different answer, or vote on the pair")


def _check_origin(db: Database, demo: NewDemonstration) -> None:
    if demo.pair_id is not None:
        pair = db.execute("SELECT prompt_id, first_id, second_id FROM pairs WHERE id = ?", [demo.pair_id]).fetchone()
        if pair is None:
            raise NotFound(f"pair {demo.pair_id} does not exist; ask for the next pair instead")
        if pair[0] != demo.prompt_id:
            raise InvalidInput(f"pair {demo.pair_id} is not on prompt {demo.prompt_id}; write the demonstration for "
                               "the pair's own prompt")
        if demo.generation_id is not None and demo.generation_id not in pair[1:]:
            raise InvalidInput(f"response {demo.generation_id} is not one of pair {demo.pair_id}'s two; edit one of "
                               "the responses shown")
    elif demo.generation_id is not None:
        row = db.execute("SELECT prompt_id FROM generations WHERE id = ?", [demo.generation_id]).fetchone()
        if row is None or row[0] != demo.prompt_id:
            raise NotFound(f"response {demo.generation_id} is not a response to prompt {demo.prompt_id}")


def _insert(db: Database, demo: NewDemonstration, now: float) -> int:
    """The only INSERT INTO demonstrations."""
    return db.execute(_INSERT, [demo.prompt_id, demo.text, demo.author, demo.source, demo.pair_id,
                                demo.generation_id, demo.seconds, now]).lastrowid


def undo_last_demonstration(store: Store, author: str, now: float | None = None) -> Demonstration:
    """Take back the author's newest current demonstration (kept, flagged undone) and return it."""
    with store.write() as db:
        row = db.execute("SELECT id FROM demonstrations WHERE author = ? AND undone IS NULL ORDER BY id DESC LIMIT 1",
                         [author]).fetchone()
        if row is None:
            raise Conflict(f"{author} has no demonstration to undo")
        db.execute("UPDATE demonstrations SET undone = ? WHERE id = ?", [time.time() if now is None else now, row[0]])
    return get_demonstration(store, row[0])


def import_demonstrations(store: Store, rows: Iterable[ImportedDemonstration], name: str,
                          now: float | None = None) -> DemonstrationImport:
    """Store a data set's demonstrations by the author `name` (source `import:<name>`), all in one transaction or
    none. Prompts already stored are reused; a demonstration imported before from the same source (same prompt and
    text) is a duplicate, skipped and counted."""
    now = time.time() if now is None else now
    source = IMPORT_PREFIX + name
    added, duplicates, prompt_ids = [], 0, []
    with store.write() as db:
        for row in rows:
            prompt_id, new = _prompt_id(db, row, name, now)
            if new:
                prompt_ids.append(prompt_id)
            elif db.execute("SELECT 1 FROM demonstrations WHERE prompt_id = ? AND source = ? AND text = ?"
                            " AND undone IS NULL", [prompt_id, source, row.text]).fetchone():
                duplicates += 1
                continue
            added.append(_insert(db, NewDemonstration(prompt_id, row.text, name, source), now))
    return DemonstrationImport(len(added), duplicates, tuple(prompt_ids), tuple(added))


def _prompt_id(db: Database, row: ImportedDemonstration, source: str, now: float) -> tuple[int, bool]:
    """The id of the row's prompt, stored now unless it was before, and whether it is new."""
    messages = json.dumps(row.messages, ensure_ascii=False) if row.messages is not None else None
    added = db.execute("INSERT OR IGNORE INTO prompts (text, source, created, messages) VALUES (?, ?, ?, ?)",
                       [row.prompt, source, now, messages])
    if added.rowcount == 1:
        return added.lastrowid, True
    return db.execute("SELECT id FROM prompts WHERE text = ?", [row.prompt]).fetchone()[0], False


_SELECT = """
SELECT d.*, p.text AS prompt, p.messages, p.excluded FROM demonstrations d JOIN prompts p ON p.id = d.prompt_id
"""


def _row(row: dict) -> Demonstration:
    return Demonstration(row["id"], row["prompt_id"], row["prompt"], row["text"], row["author"], row["source"],
                         row["pair_id"], row["generation_id"], row["seconds"], row["created"], row["undone"],
                         stored_messages(row["messages"]), bool(row["excluded"]))


def get_demonstration(store: Store, demo_id: int) -> Demonstration:
    rows = list(store.db().query(f"{_SELECT} WHERE d.id = ?", [demo_id]))
    if not rows:
        raise NotFound(f"demonstration {demo_id} does not exist")
    return _row(rows[0])


def list_demonstrations(store: Store, author: str | None = None, source: str | None = None,
                        include_undone: bool = False) -> list[Demonstration]:
    """Demonstrations in the order they were stored: the current ones (undone too when asked), by one author or of
    one source when given."""
    clauses, params = ([] if include_undone else ["d.undone IS NULL"]), []
    for column, value in (("d.author", author), ("d.source", source)):
        if value is not None:
            clauses.append(f"{column} = ?")
            params.append(value)
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    return [_row(r) for r in store.db().query(f"{_SELECT} {where} ORDER BY d.id", params)]


def count_demonstrations(store: Store, author: str | None = None) -> int:
    """Current demonstrations (by one author when given)."""
    if author is None:
        return store.db().execute("SELECT count(*) FROM demonstrations WHERE undone IS NULL").fetchone()[0]
    return store.db().execute("SELECT count(*) FROM demonstrations WHERE undone IS NULL AND author = ?",
                              [author]).fetchone()[0]
