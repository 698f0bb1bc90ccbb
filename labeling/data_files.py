"""Rows of a data set file, streamed in bounded memory: JSON lines (`.jsonl`, `.jsonl.gz`), Parquet, or a folder
written by `datasets.Dataset.save_to_disk` (its Arrow files, read with pyarrow: no hub, no `datasets` import).

Each row comes with where it is: `line N` in JSON lines, `row N` in Parquet and Arrow. A line that holds no JSON
value (or is not UTF-8) comes as an `UnreadableRow`, so a caller may skip it and read on; a file that cannot be
read at all raises InvalidInput.

    for where, row in read_rows(path, columns=("prompt", "chosen", "rejected"), required=("chosen", "rejected")):
        ...
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from storage.errors import InvalidInput

FILE_FORMATS = (".jsonl", ".jsonl.gz", ".parquet")
FOLDER = "save_to_disk folder"
BATCH_ROWS = 1000
_STATE = "state.json"  # what save_to_disk writes beside a Dataset's Arrow files
_DICT_STATE = "dataset_dict.json"  # ... and beside a DatasetDict's split folders


@dataclass(frozen=True)
class UnreadableRow:
    """A line that holds no JSON value; `problem` says why."""

    problem: str


def data_kind(path: Path) -> str:
    """One of FILE_FORMATS (`.jsonl.gz` counts as one) or FOLDER, or '' when unsupported."""
    if path.is_dir():
        return FOLDER
    name = path.name.lower()
    return next((suffix for suffix in FILE_FORMATS if name.endswith(suffix)), "")


def check_data_path(path: str | Path, what: str) -> Path:
    """Fail fast (before any store is opened) on a missing, empty or unsupported file or folder of `what`."""
    path = Path(path)
    given = f"give a {', '.join(FILE_FORMATS)} file or a folder written by datasets' save_to_disk"
    if not path.exists():
        raise InvalidInput(f"{what} {path} does not exist; check the path")
    kind = data_kind(path)
    if kind == FOLDER:
        _check_folder(path, given)
    elif not kind:
        raise InvalidInput(f"{path} has an unsupported extension {path.suffix[:10]!r}; {given}")
    elif path.stat().st_size == 0:
        raise InvalidInput(f"{path} is empty: it holds no rows to import; choose another {what}")
    return path


def read_rows(path: Path, columns: Sequence[str], required: Sequence[str]) -> Iterator[tuple[str, object]]:
    """(where, row) for each row of a checked file or folder. Columnar files must hold the `required` columns and
    only the `columns` they hold are read; a JSON line is read whole."""
    kind = data_kind(path)
    if kind == FOLDER:
        yield from _table_rows(path, _arrow_batches(path), columns, required)
    elif kind == ".parquet":
        yield from _table_rows(path, _parquet_batches(path), columns, required)
    else:
        yield from _jsonl_rows(path, gzip.open if kind == ".jsonl.gz" else open)


def _check_folder(path: Path, given: str) -> None:
    if (path / _DICT_STATE).is_file():
        splits = sorted(p.name for p in path.iterdir() if (p / _STATE).is_file())
        raise InvalidInput(f"{path} holds several splits ({', '.join(splits) or 'none'}); give one split's folder, "
                           f"e.g. {path / (splits[0] if splits else 'train')}")
    if not (path / _STATE).is_file():
        raise InvalidInput(f"{path} is a folder without {_STATE}, so not one save_to_disk wrote; {given}")


def _jsonl_rows(path: Path, opener) -> Iterator[tuple[str, object]]:
    try:
        with opener(path, "rb") as lines:
            for line_no, line in enumerate(lines, 1):
                if line.strip():
                    yield f"line {line_no}", _json_value(line)
    except (OSError, EOFError) as exc:  # a damaged or truncated .gz
        raise InvalidInput(f"cannot read {path}: {exc}; check that the file is complete") from None


def _json_value(line: bytes) -> object:
    try:
        return json.loads(line.decode("utf-8"))
    except UnicodeDecodeError:
        return UnreadableRow("not valid UTF-8; re-save the file as UTF-8")
    except json.JSONDecodeError as exc:
        return UnreadableRow(f"not valid JSON ({exc.msg}); one JSON object per line")


Batches = Callable[[list[str]], Iterator[pa.RecordBatch]]  # record batches holding the given columns


def _parquet_batches(path: Path) -> tuple[pa.Schema, Batches]:
    try:
        parquet = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as exc:
        raise InvalidInput(f"{path} is not a readable Parquet file ({str(exc)[:80]}); re-export it") from None
    return parquet.schema_arrow, lambda columns: parquet.iter_batches(batch_size=BATCH_ROWS, columns=columns)


def _arrow_batches(path: Path) -> tuple[pa.Schema, Batches]:
    """The schema and record batches of a save_to_disk folder's Arrow files (IPC streams, memory-mapped)."""
    try:
        files = [path / entry["filename"] for entry in json.loads((path / _STATE).read_text("utf-8"))["_data_files"]]
        schema = pa.ipc.open_stream(pa.memory_map(str(files[0]))).schema
    except (OSError, ValueError, KeyError, TypeError, IndexError, pa.ArrowException) as exc:
        raise InvalidInput(f"{path} is not a readable save_to_disk folder ({str(exc)[:80]}); save it again") from None

    def batches(columns: list[str]) -> Iterator[pa.RecordBatch]:
        for file in files:
            with pa.memory_map(str(file)) as source:
                yield from (batch.select(columns) for batch in pa.ipc.open_stream(source))

    return schema, batches


def _table_rows(path: Path, opened: tuple[pa.Schema, Batches], columns: Sequence[str],
                required: Sequence[str]) -> Iterator[tuple[str, dict]]:
    schema, batches = opened
    missing = [name for name in required if name not in schema.names]
    if missing:
        raise InvalidInput(f"{path} has no column {missing[0]!r}; it needs {' and '.join(required)}")
    present = [name for name in columns if name in schema.names]
    row_no = 0
    try:
        for batch in batches(present):
            for row in batch.to_pylist():
                row_no += 1
                yield f"row {row_no}", row
    except (pa.ArrowException, OSError) as exc:
        raise InvalidInput(f"cannot read {path} after row {row_no} ({str(exc)[:80]}); check that it is "
                           "complete") from None
