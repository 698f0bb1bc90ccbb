"""Reading prompt files: plain-text prompts and conversations.

Formats: `.jsonl` / `.jsonl.gz` (a `prompt` field holding text or a list of {role, content} turns, or a
`messages` field), `.parquet` (the same columns), `.csv` (a `prompt` column), `.txt` (one prompt per line). A
conversation must end with a user turn. Files are streamed, so 100 000 prompts import in bounded memory; any bad
row aborts the whole import, naming its line (row, for parquet). Given a `PromptLimit` (the policy's context less
the response length), a prompt with more tokens is refused too, with its token count and the limit.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from pathlib import Path
from typing import Callable, Iterator, Protocol

from storage import Store
from storage.errors import InvalidInput
from storage.prompts import NewPrompt, PromptImport, add_prompts

from .conversations import check_conversation, conversation_text

FORMATS = (".jsonl", ".jsonl.gz", ".parquet", ".csv", ".txt")
MAX_PROMPT_CHARS = 20_000


class PromptLimit(Protocol):
    """Refuses (InvalidInput naming `where`) a prompt with more tokens than the policy can read before answering."""

    def check(self, prompt: str | list[dict], where: str) -> None: ...


def file_format(path: Path) -> str:
    """The file's format, one of FORMATS (`.jsonl.gz` counts as one), or '' when unsupported."""
    name = path.name.lower()
    return next((suffix for suffix in FORMATS if name.endswith(suffix)), "")


def check_prompt_file(path: str | Path) -> Path:
    """Fail fast (before any store is opened) on a missing, unreadable, empty or unsupported file."""
    path = Path(path)
    if not path.exists():
        raise InvalidInput(f"prompt file {path} does not exist; check the path")
    if not path.is_file():
        raise InvalidInput(f"{path} is not a file; give a {', '.join(FORMATS)} file of prompts")
    if not file_format(path):
        raise InvalidInput(f"{path} has an unsupported extension {path.suffix!r}; use {', '.join(FORMATS)}")
    try:
        with path.open("rb") as f:
            empty = not f.read(1)
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror}; check its permissions") from exc
    if empty:
        raise InvalidInput(f"{path} is empty; add prompts, one per line (or a `prompt` field/column)")
    return path


def iter_prompts(path: str | Path, limit: PromptLimit | None = None) -> Iterator[NewPrompt]:
    """Yield the prompts of a file, raising InvalidInput naming the file and line of the first bad entry."""
    path = check_prompt_file(path)
    count = 0
    try:
        for line_no, value in _values(path):
            prompt = new_prompt(value, f"{path} line {line_no}")
            if limit is not None:
                limit.check(prompt.messages if prompt.messages is not None else prompt.text, f"{path} line {line_no}")
            count += 1
            yield prompt
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{path} is not valid UTF-8 (byte {exc.start} of a read block); re-save it as UTF-8") from exc
    except (OSError, EOFError) as exc:  # a damaged .gz or .parquet
        raise InvalidInput(f"cannot read {path}: {exc}; check that the file is complete") from exc
    if count == 0:
        raise InvalidInput(f"{path} holds no prompts; add prompts, one per line (or a `prompt` field/column)")


def new_prompt(value, where: str) -> NewPrompt:
    """A file's prompt value (text or turns) as a NewPrompt, after checking it."""
    if isinstance(value, list):
        turns = check_conversation(value, where)
        if not any(turn["content"].strip() for turn in turns):
            raise InvalidInput(f"{where}: every turn of the conversation is empty; remove the row or fill it in")
        text = conversation_text(turns)
        _check_length(text, where)
        return NewPrompt(text, turns)
    if not isinstance(value, str):
        raise InvalidInput(f"{where}: `prompt` is {type(value).__name__}, not text or a list of turns; quote it")
    if not value.strip():
        raise InvalidInput(f"{where}: the prompt is empty; remove the line or fill it in")
    _check_length(value, where)
    return NewPrompt(value.strip())


def _check_length(text: str, where: str) -> None:
    if len(text) > MAX_PROMPT_CHARS:
        raise InvalidInput(f"{where}: the prompt has {len(text)} characters, over the limit of {MAX_PROMPT_CHARS}; "
                           "shorten it")


def _values(path: Path) -> Iterator[tuple[int, object]]:
    """(line or row number, prompt value) for each prompt of the file."""
    fmt = file_format(path)
    if fmt == ".parquet":
        yield from _parquet_values(path)
        return
    opener = gzip.open if fmt == ".jsonl.gz" else open
    with opener(path, "rb") as raw:
        text = io.TextIOWrapper(raw, encoding="utf-8", errors="strict", newline="")
        if fmt == ".txt":
            yield from ((n, line.rstrip("\r\n")) for n, line in enumerate(text, 1) if line.strip())
        elif fmt == ".csv":
            yield from _csv_values(path, text)
        else:
            yield from _jsonl_values(path, text)


def _field(row, where: str):
    """The prompt of a JSON object or parquet row: `prompt` (text or turns), else `messages`."""
    if not isinstance(row, dict) or ("prompt" not in row and "messages" not in row):
        raise InvalidInput(f"{where}: no `prompt` field (nor `messages`); each row needs {{\"prompt\": \"...\"}}")
    return row["prompt"] if row.get("prompt") is not None else row.get("messages")


def _jsonl_values(path: Path, text: io.TextIOWrapper) -> Iterator[tuple[int, object]]:
    for line_no, line in enumerate(text, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"{path} line {line_no}: not valid JSON ({exc.msg}); one JSON object per line") from exc
        yield line_no, _field(row, f"{path} line {line_no}")


def _csv_values(path: Path, text: io.TextIOWrapper) -> Iterator[tuple[int, str]]:
    reader = csv.DictReader(text, strict=True)
    try:
        if reader.fieldnames is None or "prompt" not in reader.fieldnames:
            raise InvalidInput(f"{path} has no `prompt` column; add a header row naming it")
        for row in reader:
            if None in row or row.get("prompt") is None:
                raise InvalidInput(f"{path} line {reader.line_num}: wrong number of fields; check the quoting")
            yield reader.line_num, row["prompt"]
    except csv.Error as exc:
        raise InvalidInput(f"{path} line {reader.line_num}: malformed CSV ({exc}); check the quoting") from exc


def _parquet_values(path: Path) -> Iterator[tuple[int, object]]:
    import pyarrow.parquet as pq

    try:
        table = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises its own error types for a file that is not parquet
        raise InvalidInput(f"{path} is not a readable parquet file ({str(exc).splitlines()[0]})") from None
    columns = [name for name in ("prompt", "messages") if name in table.schema_arrow.names]
    if not columns:
        raise InvalidInput(f"{path} has no `prompt` or `messages` column; name the prompt column `prompt`")
    row_no = 0
    for batch in table.iter_batches(columns=columns, batch_size=1024):
        for row in batch.to_pylist():
            row_no += 1
            yield row_no, _field(row, f"{path} row {row_no}")


def import_prompt_file(store: Store, path: str | Path, heldout: bool = False,
                       progress: Callable[[int], None] | None = None,
                       limit: PromptLimit | None = None) -> PromptImport:
    """Import every prompt of a file in one transaction: all of them, or none when any row is bad."""
    path = check_prompt_file(path)

    def counted() -> Iterator[NewPrompt]:
        for i, prompt in enumerate(iter_prompts(path, limit), 1):
            if progress and i % 1000 == 0:
                progress(i)
            yield prompt

    return add_prompts(store, counted(), source=path.name, heldout=heldout)
