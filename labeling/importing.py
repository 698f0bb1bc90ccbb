"""Reading prompt files (.jsonl with a `prompt` field, .csv with a `prompt` column, .txt one per line).

Files are streamed, so 100 000 prompts import in bounded memory; any bad line aborts the whole import.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Callable, Iterator

from storage import Store
from storage.errors import InvalidInput
from storage.prompts import PromptImport, add_prompts

FORMATS = (".jsonl", ".csv", ".txt")
MAX_PROMPT_CHARS = 20_000


def check_prompt_file(path: str | Path) -> Path:
    """Fail fast (before any store is opened) on a missing, unreadable, empty or unsupported file."""
    path = Path(path)
    if not path.exists():
        raise InvalidInput(f"prompt file {path} does not exist; check the path")
    if not path.is_file():
        raise InvalidInput(f"{path} is not a file; give a .jsonl, .csv or .txt file of prompts")
    if path.suffix.lower() not in FORMATS:
        raise InvalidInput(f"{path} has an unsupported extension {path.suffix!r}; use .jsonl, .csv or .txt")
    try:
        with path.open("rb") as f:
            empty = not f.read(1)
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror}; check its permissions") from exc
    if empty:
        raise InvalidInput(f"{path} is empty; add prompts, one per line (or a `prompt` field/column)")
    return path


def iter_prompts(path: str | Path) -> Iterator[str]:
    """Yield prompts from a file, raising InvalidInput naming the file and line of the first bad entry."""
    path = check_prompt_file(path)
    count = 0
    with path.open("rb") as raw:
        text = io.TextIOWrapper(raw, encoding="utf-8", errors="strict", newline="")
        try:
            for line_no, prompt in _parse(path, text):
                if not prompt.strip():
                    raise InvalidInput(f"{path} line {line_no}: the prompt is empty; remove the line or fill it in")
                if len(prompt) > MAX_PROMPT_CHARS:
                    raise InvalidInput(f"{path} line {line_no}: the prompt has {len(prompt)} characters, over the "
                                       f"limit of {MAX_PROMPT_CHARS}; shorten it")
                count += 1
                yield prompt.strip()
        except UnicodeDecodeError as exc:
            raise InvalidInput(f"{path} is not valid UTF-8 (byte {exc.start} of a read block); re-save it as UTF-8") from exc
    if count == 0:
        raise InvalidInput(f"{path} holds no prompts; add prompts, one per line (or a `prompt` field/column)")


def _parse(path: Path, text: io.TextIOWrapper) -> Iterator[tuple[int, str]]:
    suffix = path.suffix.lower()
    if suffix == ".txt":
        for line_no, line in enumerate(text, 1):
            if line.strip():
                yield line_no, line.rstrip("\r\n")
    elif suffix == ".jsonl":
        for line_no, line in enumerate(text, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InvalidInput(f"{path} line {line_no}: not valid JSON ({exc.msg}); one JSON object per line") from exc
            if not isinstance(row, dict) or "prompt" not in row:
                raise InvalidInput(f"{path} line {line_no}: no `prompt` field; each line needs {{\"prompt\": \"...\"}}")
            if not isinstance(row["prompt"], str):
                raise InvalidInput(f"{path} line {line_no}: `prompt` is {type(row['prompt']).__name__}, not text; quote it")
            yield line_no, row["prompt"]
    else:
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


def import_prompt_file(store: Store, path: str | Path, heldout: bool = False,
                       progress: Callable[[int], None] | None = None) -> PromptImport:
    """Import every prompt of a file in one transaction: all of them, or none when any line is bad."""
    path = check_prompt_file(path)

    def counted() -> Iterator[str]:
        for i, prompt in enumerate(iter_prompts(path), 1):
            if progress and i % 1000 == 0:
                progress(i)
            yield prompt

    return add_prompts(store, counted(), source=path.name, heldout=heldout)
