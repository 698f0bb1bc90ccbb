"""Import a demonstrations data set (TRL's SFT formats, `labeling.demonstrations.demonstration_formats`) from a
`.jsonl`, `.jsonl.gz` or `.parquet` file or a `datasets` save_to_disk folder, streamed (`labeling.files.data_files`),
all of it or none: a bad row fails the import naming its line, nothing stored. Rows imported before from the same source
are skipped and counted. A demonstration too long for the policy is no bad row: it is kept, and SFT leaves it out,
counted (`trainers.jobs.sft_data`).

    result = import_demonstration_file(store, "sft.jsonl", source="handwritten")
    print(result.summary())   # Imported 42 demonstrations (0 already there).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from labeling.demonstrations.demonstration_formats import COLUMNS, demonstration_from_row
from labeling.files.data_files import check_data_path, read_rows
from labeling.files.lines import UnreadableRow
from labeling.queue.annotation import check_name
from storage import Store
from storage.demonstrations import ImportedDemonstration, import_demonstrations
from storage.errors import InvalidInput


@dataclass(frozen=True)
class DemonstrationFileImport:
    added: int
    duplicates: int
    source: str
    prompt_ids: tuple[int, ...] = ()
    ids: tuple[int, ...] = ()  # of the demonstrations added

    def summary(self) -> str:
        return f"Imported {self.added} demonstrations by {self.source} ({self.duplicates} already there)."


def check_demonstration_file(path: str | Path) -> Path:
    """Fail fast (before any store is opened) on a missing, empty or unsupported file or folder."""
    return check_data_path(path, "demonstrations file")


def iter_demonstrations(path: str | Path) -> Iterator[ImportedDemonstration]:
    """The rows of a demonstrations file, streamed; a bad row raises InvalidInput naming the file and its line."""
    path = check_demonstration_file(path)
    count = 0
    for where, row in read_rows(path, COLUMNS, required=()):
        count += 1
        try:
            if isinstance(row, UnreadableRow):
                raise InvalidInput(f"{where}: {row.problem}")
            demonstration = demonstration_from_row(row, where)
        except InvalidInput as exc:
            raise InvalidInput(f"{path} {exc}") from None
        yield demonstration
    if count == 0:
        raise InvalidInput(f"{path} holds no rows; it needs rows with a prompt and a completion, or messages")


def import_demonstration_file(store: Store, path: str | Path, source: str) -> DemonstrationFileImport:
    """Import every row of a demonstrations file by the author `source`, all of them or none."""
    source = check_name(source, "source name")
    path = check_demonstration_file(path)
    stored = import_demonstrations(store, iter_demonstrations(path), source, time.time())
    return DemonstrationFileImport(stored.added, stored.duplicates, source, stored.prompt_ids, stored.ids)
