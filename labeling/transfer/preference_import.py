"""Import an existing preference data set as labels, so a reward model can start from it.

Every format TRL's preference trainers read (`labeling.transfer.preference_formats`), from a `.jsonl`, `.jsonl.gz` or
`.parquet` file or a `datasets` save_to_disk folder, streamed (`labeling.files.data_files`). Each row becomes a prompt,
two generations (source `import:<name>`), a pair (chosen first, selector `imported`, never queued for people) and a
label by the annotator `<name>`, all in one transaction. A structurally broken row (not JSON, a missing column,
chosen identical to rejected, no shared prompt) fails the import naming its line, nothing stored; with
`skip_invalid` it is left out, counted and listed. Rows imported before from the same source are skipped and counted.

    result = import_preference_file(store, "hh.jsonl.gz", source="hh-rlhf", skip_invalid=True)
    print(result.summary())   # Imported 42 labeled pairs (0 already there). Skipped 1 invalid row: line 7. ...
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from labeling.files.data_files import FILE_FORMATS, check_data_path, data_kind, read_rows
from labeling.files.lines import UnreadableRow
from labeling.queue.annotation import check_name
from labeling.transfer.preference_formats import preference_from_row
from storage import Store
from storage.errors import InvalidInput
from storage.preferences import Preference, import_preferences

COLUMNS = ("prompt", "chosen", "rejected", "margin")
REQUIRED = ("chosen", "rejected")
LISTED = 5  # invalid rows named in a summary; the rest are counted
PROGRESS_EVERY = 10_000


@dataclass
class InvalidRows:
    """Rows left out of an import: how many, where the first few are, and the first problem."""

    count: int = 0
    where: list[str] = field(default_factory=list)
    first_problem: str | None = None

    def add(self, where: str, problem: str) -> None:
        self.count += 1
        if len(self.where) < LISTED:
            self.where.append(where)
        self.first_problem = self.first_problem or problem


@dataclass(frozen=True)
class PreferenceFileImport:
    """What an import did: labeled pairs added, rows already there, invalid rows left out."""

    added: int
    duplicates: int
    invalid: InvalidRows = field(default_factory=InvalidRows)
    prompt_ids: tuple[int, ...] = ()  # of the prompts the import added
    source: str = ""  # the annotator name the labels carry

    def summary(self) -> str:
        """One paragraph for the command line and the Data tab alike."""
        text = f"Imported {self.added} labeled pairs ({self.duplicates} already there)."
        if self.invalid.count:
            more = self.invalid.count - len(self.invalid.where)
            listed = ", ".join(self.invalid.where) + (f" and {more} more" if more else "")
            text += (f" Skipped {self.invalid.count} invalid row{'s' if self.invalid.count > 1 else ''}: {listed}."
                     f" First problem: {self.invalid.first_problem}")
        return text


def check_preference_file(path: str | Path) -> Path:
    """Fail fast (before any store is opened) on a missing, empty or unsupported file or folder."""
    return check_data_path(path, "preference file")


def default_source(path: str | Path) -> str:
    """The source name of a file or folder when none is given: its name without the format's suffix."""
    path = Path(path)
    kind = data_kind(path)
    return path.name[:-len(kind)] if kind in FILE_FORMATS and len(path.name) > len(kind) else path.name


def iter_preferences(path: str | Path, chat_turns: bool = False,
                     invalid: InvalidRows | None = None) -> Iterator[Preference]:
    """The rows of a preference file as Preferences, streamed. A bad row raises InvalidInput naming the file and its
    line (row, in Parquet and Arrow), unless `invalid` is given: then it is recorded there and left out."""
    path = check_preference_file(path)
    count = 0
    for where, row in read_rows(path, COLUMNS, REQUIRED):
        count += 1
        try:
            if isinstance(row, UnreadableRow):
                raise InvalidInput(f"{where}: {row.problem}")
            preference = preference_from_row(row, where, chat_turns)
        except InvalidInput as exc:
            if invalid is None:
                raise InvalidInput(f"{path} {exc}; or skip invalid rows (--skip-invalid)") from None
            invalid.add(where, str(exc))
            continue
        yield preference
    if count == 0:
        raise InvalidInput(f"{path} holds no rows; it needs rows with chosen and rejected (and a prompt)")


def import_preference_file(store: Store, path: str | Path, source: str, skip_invalid: bool = False,
                           chat_turns: bool = False,
                           progress: Callable[[int], None] | None = None) -> PreferenceFileImport:
    """Import every row of a preference file as labels by `source`, all of them or none (invalid rows left out and
    counted when `skip_invalid`). `chat_turns`: hh-rlhf dialogue prompts become role turns (the policy has a chat
    template). `progress(rows)` is called every PROGRESS_EVERY rows."""
    source = check_name(source, "source name")
    path = check_preference_file(path)
    invalid = InvalidRows() if skip_invalid else None

    def counted() -> Iterator[Preference]:
        for number, preference in enumerate(iter_preferences(path, chat_turns, invalid), 1):
            if progress and number % PROGRESS_EVERY == 0:
                progress(number)
            yield preference

    stored = import_preferences(store, counted(), source, time.time())
    return PreferenceFileImport(stored.added, stored.duplicates, invalid or InvalidRows(), stored.prompt_ids, source)
