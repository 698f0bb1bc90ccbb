"""Import an existing preference data set in TRL's format as labels, so a reward model can start from it.

Rows `{prompt, chosen, rejected, margin?}` from a `.jsonl` or `.parquet` file become prompts, two generations
(source `import:<name>`), a pair (chosen first, selector `imported`, never queued for people) and a label by the
annotator `<name>`, all in one transaction: any bad row aborts the whole import, naming the row. Rows imported
before from the same source are skipped and counted.

    result = import_preference_file(store, "hh.jsonl", source="hh-rlhf")
"""

from __future__ import annotations

import io
import json
import math
import time
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from storage import Store
from storage.errors import InvalidInput
from storage.preferences import Preference, PreferenceImport, import_preferences

from .annotation import check_name
from .importing import MAX_PROMPT_CHARS

SUFFIXES = (".jsonl", ".parquet")
COLUMNS = ("prompt", "chosen", "rejected")
MAX_RESPONSE_CHARS = 100_000


def check_preference_file(path: str | Path) -> Path:
    path = Path(path)
    if not path.is_file():
        raise InvalidInput(f"preference file {path} does not exist or is not a file; check the path")
    if path.suffix.lower() not in SUFFIXES:
        raise InvalidInput(f"{path} has an unsupported extension {path.suffix[:10]!r}; use .jsonl or .parquet")
    if path.stat().st_size == 0:
        raise InvalidInput(f"{path} is empty; it needs rows with prompt, chosen and rejected")
    return path


def iter_preferences(path: str | Path) -> Iterator[Preference]:
    """Checked rows of a preference file, streamed; InvalidInput names the row of the first bad one."""
    path = check_preference_file(path)
    rows = _parquet_rows(path) if path.suffix.lower() == ".parquet" else _jsonl_rows(path)
    count = 0
    for where, row in rows:
        count += 1
        yield _preference(path, where, row)
    if count == 0:
        raise InvalidInput(f"{path} holds no rows; it needs rows with prompt, chosen and rejected")


def import_preference_file(store: Store, path: str | Path, source: str) -> PreferenceImport:
    """Import every row of a preference file as labels by `source`, all of them or none."""
    source = check_name(source, "source name")
    path = check_preference_file(path)
    return import_preferences(store, iter_preferences(path), source, time.time())


def _jsonl_rows(path: Path) -> Iterator[tuple[str, object]]:
    with path.open("rb") as raw:
        text = io.TextIOWrapper(raw, encoding="utf-8", errors="strict")
        try:
            for line_no, line in enumerate(text, 1):
                if not line.strip():
                    continue
                try:
                    yield f"line {line_no}", json.loads(line)
                except json.JSONDecodeError as exc:
                    raise InvalidInput(f"{path} line {line_no}: not valid JSON ({exc.msg}); one JSON object per line") from None
        except UnicodeDecodeError:
            raise InvalidInput(f"{path} is not valid UTF-8; re-save it as UTF-8") from None


def _parquet_rows(path: Path) -> Iterator[tuple[str, object]]:
    try:
        parquet = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as exc:
        raise InvalidInput(f"{path} is not a readable Parquet file ({str(exc)[:80]}); re-export it") from None
    missing = [c for c in COLUMNS if c not in parquet.schema_arrow.names]
    if missing:
        raise InvalidInput(f"{path} has no column {missing[0]!r}; it needs prompt, chosen and rejected (margin optional)")
    columns = [c for c in (*COLUMNS, "margin") if c in parquet.schema_arrow.names]
    row_no = 0
    for batch in parquet.iter_batches(batch_size=1000, columns=columns):
        for row in batch.to_pylist():
            row_no += 1
            yield f"row {row_no}", row


def _preference(path: Path, where: str, row: object) -> Preference:
    if not isinstance(row, dict):
        raise InvalidInput(f"{path} {where}: expected an object with prompt, chosen and rejected")
    for column in COLUMNS:
        value = row.get(column)
        if column not in row:
            raise InvalidInput(f"{path} {where}: no {column!r} field; rows need prompt, chosen and rejected "
                               "(TRL's explicit-prompt format)")
        if not isinstance(value, str):
            raise InvalidInput(f"{path} {where}: {column!r} is {type(value).__name__}, not text; conversational "
                               "rows are not supported, use plain text")
        if not value.strip():
            raise InvalidInput(f"{path} {where}: {column!r} is empty; fill it in or remove the row")
        limit = MAX_PROMPT_CHARS if column == "prompt" else MAX_RESPONSE_CHARS
        if len(value) > limit:
            raise InvalidInput(f"{path} {where}: {column!r} has {len(value)} characters, over the limit of {limit}")
    if row["chosen"] == row["rejected"]:
        raise InvalidInput(f"{path} {where}: chosen and rejected are the same text; remove the row")
    margin = row.get("margin")
    if margin is not None and (isinstance(margin, bool) or not isinstance(margin, (int, float))
                               or not math.isfinite(margin)):
        raise InvalidInput(f"{path} {where}: 'margin' must be a finite number (or absent)")
    return Preference(row["prompt"], row["chosen"], row["rejected"], None if margin is None else float(margin))
