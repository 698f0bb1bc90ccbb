"""Reading prompt files: plain-text prompts and conversations.

Formats: `.jsonl` / `.jsonl.gz` (a `prompt` field holding text or a list of {role, content} turns, or a `messages`
field), `.parquet` (the same columns), `.csv` (a `prompt` column), `.txt` (one prompt per line). A conversation must
end with a user turn. A row's other fields or columns (an `answer`, a `solution`) are kept as the prompt's
reference, which reward functions read by name (`trainers.reward.functions`). Files are streamed, so 100 000 prompts
import in bounded memory (one line at most `labeling.files.lines.MAX_LINE_BYTES` held, Parquet decoded apart:
`labeling.files.data_files`); any bad row aborts the whole import, naming its line (row, for parquet). A prompt longer
than the policy reads is no bad row: it is kept, and the loop leaves it out, counted (`trainers.loop.prompt_use`).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path

from labeling.files.columnar import ALL_COLUMNS
from labeling.files.data_files import FILE_FORMATS as DATA_FORMATS
from labeling.files.data_files import read_rows
from labeling.files.lines import UnreadableRow, bounded_lines, too_long
from labeling.transfer.conversations import check_conversation, conversation_text
from storage import Store
from storage.errors import InvalidInput, first_line
from storage.prompts import NewPrompt, PromptImport, add_prompts

FORMATS = (".jsonl", ".jsonl.gz", ".parquet", ".csv", ".txt")
MAX_PROMPT_CHARS = 20_000
MAX_REFERENCE_CHARS = 20_000  # a reference's fields, as JSON
PROMPT_FIELDS = ("prompt", "messages")  # a row's other fields are its reference


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


def iter_prompts(path: str | Path) -> Iterator[NewPrompt]:
    """Yield the prompts of a file, raising InvalidInput naming the file and line (row) of the first bad entry."""
    path = check_prompt_file(path)
    count = 0
    try:
        for where, value, reference in _values(path):
            count += 1
            yield new_prompt(value, f"{path} {where}", reference)
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {first_line(exc)}; check that the file is complete") from exc
    if count == 0:
        raise InvalidInput(f"{path} holds no prompts; add prompts, one per line (or a `prompt` field/column)")


def new_prompt(value, where: str, reference: dict | None = None) -> NewPrompt:
    """A file's prompt value (text or turns), with its reference fields if any, as a NewPrompt, after checking it."""
    if reference is not None:
        check_text(json.dumps(reference, ensure_ascii=False), "the reference (the row's other fields)",
                   MAX_REFERENCE_CHARS, where)
        check_reference_values(reference, where)
    if isinstance(value, list):
        turns = check_conversation(value, where)
        if not any(turn["content"].strip() for turn in turns):
            raise InvalidInput(f"{where}: every turn of the conversation is empty; remove the row or fill it in")
        text = conversation_text(turns)
        check_text(text, "the prompt", MAX_PROMPT_CHARS, where)
        return NewPrompt(text, turns, reference)
    if not isinstance(value, str):
        raise InvalidInput(f"{where}: `prompt` is {type(value).__name__}, not text or a list of turns; quote it")
    if not value.strip():
        raise InvalidInput(f"{where}: the prompt is empty; remove the line or fill it in")
    check_text(value, "the prompt", MAX_PROMPT_CHARS, where)
    return NewPrompt(value.strip(), reference=reference)


def prompt_and_turns(prompt, where: str) -> tuple[str, list | None]:
    """A data row's `prompt` (text, or a list of turns made one text) and its turns, after checking it is one of them
    and not empty (the preference and demonstration formats read prompts so)."""
    if isinstance(prompt, list):
        made = new_prompt(prompt, f"{where}: prompt")
        return made.text, made.messages
    if not isinstance(prompt, str):
        raise InvalidInput(f"{where}: 'prompt' is {type(prompt).__name__}, not text or a list of turns")
    if not prompt.strip():
        raise InvalidInput(f"{where}: 'prompt' is empty; fill it in or remove the row")
    return prompt, None


def check_text(text: str, what: str, limit: int, where: str) -> None:
    """InvalidInput naming `where` when the text (`what`, e.g. "the prompt") is over `limit` characters or holds a
    NUL character (which no text holds, and which C libraries and many tools take for the end of the text)."""
    if len(text) > limit:
        raise InvalidInput(f"{where}: {what} has {len(text)} characters, over the limit of {limit}; shorten it")
    if "\x00" in text:
        raise InvalidInput(f"{where}: {what} holds a NUL character (\\x00 or \\u0000), which is no text; remove it")


def check_reference_values(value, where: str, name: str = "") -> None:
    """InvalidInput naming `where` and the field when a reference holds a number that is not finite (NaN, Infinity:
    no JSON, and no answer a reward function can compare) or a NUL character, in a value or a field's name."""
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidInput(f"{where}: the reference's `{name}` is {value}, not a finite number; give a number or text")
    if isinstance(value, str) and "\x00" in value:
        shown = name.replace("\x00", "\\x00")
        raise InvalidInput(f"{where}: the reference's `{shown}` holds a NUL character (\\x00 or \\u0000), which is "
                           "no text; remove it")
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        inner = f"{name}[{key}]" if isinstance(value, list) else f"{name}.{key}" if name else str(key)
        check_reference_values(key, where, inner)
        check_reference_values(item, where, inner)


def _values(path: Path) -> Iterator[tuple[str, object, dict | None]]:
    """(where, prompt value, reference) for each prompt of the file, read in bounded memory: where is `line N`
    (`row N` in Parquet)."""
    if file_format(path) in DATA_FORMATS:
        for where, row in read_rows(path, (ALL_COLUMNS,), required=()):
            if isinstance(row, UnreadableRow):
                raise InvalidInput(f"{path} {where}: {row.problem}")
            yield where, _field(row, f"{path} {where}"), reference_fields(row)
        return
    with path.open("rb") as raw:
        lines = _text_lines(path, raw)
        if file_format(path) == ".txt":
            yield from ((f"line {n}", line.rstrip("\r\n"), None) for n, line in lines if line.strip())
        else:
            yield from _csv_values(path, lines)


def _text_lines(path: Path, raw) -> Iterator[tuple[int, str]]:
    """(line number, text) of a text file, each line at most MAX_LINE_BYTES (InvalidInput past it, or not UTF-8)."""
    for line_no, line in bounded_lines(raw):
        if line is None:
            raise InvalidInput(f"{path} line {line_no}: {too_long().problem}")
        try:
            yield line_no, line.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidInput(f"{path} line {line_no}: not valid UTF-8; re-save the file as UTF-8") from None


def _field(row, where: str):
    """The prompt of a JSON object or parquet row: `prompt` (text or turns), else `messages`."""
    if not isinstance(row, dict) or ("prompt" not in row and "messages" not in row):
        raise InvalidInput(f"{where}: no `prompt` field or column (nor `messages`); each row needs "
                           "{\"prompt\": \"...\"}")
    return row["prompt"] if row.get("prompt") is not None else row.get("messages")


def reference_fields(row: dict) -> dict | None:
    """A row's fields other than the prompt's, without empty ones (a Parquet row's missing values), or None."""
    fields = {name: value for name, value in row.items()
              if name not in PROMPT_FIELDS and value is not None and value != ""}
    return fields or None


def _csv_values(path: Path, lines: Iterator[tuple[int, str]]) -> Iterator[tuple[str, str, dict | None]]:
    reader = csv.DictReader((text for _, text in lines), strict=True)
    try:
        if reader.fieldnames is None or "prompt" not in reader.fieldnames:
            raise InvalidInput(f"{path} has no `prompt` column; add a header row naming it")
        for row in reader:
            if None in row or row.get("prompt") is None:
                raise InvalidInput(f"{path} line {reader.line_num}: wrong number of fields; check the quoting")
            yield f"line {reader.line_num}", row["prompt"], reference_fields(row)
    except csv.Error as exc:
        raise InvalidInput(f"{path} line {reader.line_num}: malformed CSV ({exc}); check the quoting") from exc


def import_prompt_file(store: Store, path: str | Path, heldout: bool = False,
                       progress: Callable[[int], None] | None = None) -> PromptImport:
    """Import every prompt of a file in one transaction: all of them, or none when any row is bad."""
    path = check_prompt_file(path)

    def counted() -> Iterator[NewPrompt]:
        for i, prompt in enumerate(iter_prompts(path), 1):
            if progress and i % 1000 == 0:
                progress(i)
            yield prompt

    return add_prompts(store, counted(), source=path.name, heldout=heldout)
