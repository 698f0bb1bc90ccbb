"""Rows of a data set file, streamed in bounded memory: JSON lines (`.jsonl`, `.jsonl.gz`, each line at most
`labeling.files.lines.MAX_LINE_BYTES` held), Parquet, or a folder written by `datasets.Dataset.save_to_disk` (decoded
with pyarrow in a child process of capped memory, `labeling.files.columnar`: no hub, no `datasets` import).

Each row comes with where it is: `line N` in JSON lines, `row N` in Parquet and Arrow. A row that holds no JSON
value (not UTF-8, too long) comes as an `UnreadableRow`, so a caller may skip it and read on; a file that cannot be
read at all raises InvalidInput.

    for where, row in read_rows(path, columns=("prompt", "chosen", "rejected"), required=("chosen", "rejected")):
        ...
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path

from labeling.files import columnar
from labeling.files.lines import bounded_lines, json_value
from storage.errors import InvalidInput, first_line

FILE_FORMATS = (".jsonl", ".jsonl.gz", ".parquet")
FOLDER = "save_to_disk folder"
_STATE = "state.json"  # what save_to_disk writes beside a Dataset's Arrow files
_DICT_STATE = "dataset_dict.json"  # ... and beside a DatasetDict's split folders


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
    """(where, row) for each row of a checked file or folder, in bounded memory (`labeling.files.lines`,
    `labeling.files.columnar`). Columnar files must hold the `required` columns and only the `columns` they hold are
    read; a JSON line is read whole."""
    if data_kind(path) in (FOLDER, ".parquet"):
        yield from columnar.rows(path, columns, required)
    else:
        yield from _jsonl_rows(path, gzip.open if data_kind(path) == ".jsonl.gz" else open)


def _check_folder(path: Path, given: str) -> None:
    if (path / _DICT_STATE).is_file():
        splits = sorted(p.name for p in path.iterdir() if (p / _STATE).is_file())
        raise InvalidInput(f"{path} holds several splits ({', '.join(splits) or 'none'}); give one split's folder, "
                           f"e.g. {path / (splits[0] if splits else 'train')}")
    if not (path / _STATE).is_file():
        raise InvalidInput(f"{path} is a folder without {_STATE}, so not one save_to_disk wrote; {given}")


def _jsonl_rows(path: Path, opener) -> Iterator[tuple[str, object]]:
    try:
        with opener(path, "rb") as stream:
            for line_no, line in bounded_lines(stream):
                if line is None or line.strip():
                    yield f"line {line_no}", json_value(line)
    except (OSError, EOFError, zlib.error) as exc:  # a damaged or truncated .gz
        raise InvalidInput(f"cannot read {path}: {first_line(exc)}; check that the file is complete") from None
