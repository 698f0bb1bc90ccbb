"""Lines of a byte stream (a `.jsonl` file, a `.jsonl.gz` stream, a pipe) read in bounded memory, whatever the
compression: a line longer than MAX_LINE_BYTES is never held whole, only skipped and reported, so a small `.gz` whose
one line decompresses to gigabytes costs no more memory than a line at the limit.

    for line_no, line in bounded_lines(stream):      # line is None when over the limit (its bytes were skipped)
        value = json_value(line)                      # the JSON value, or an UnreadableRow saying why not

A JSON escape may spell half of a UTF-16 pair alone (`"\\ud800"`): Python reads it as a lone surrogate, which no
UTF-8 text (nor SQLite, nor a tokenizer) can hold, so such a line is unreadable too, naming the field
(`labeling.files.text_fields`, the check the served studio makes too).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from labeling.files.text_fields import surrogate_field

MAX_LINE_BYTES = 16 * 2**20  # a row at the studio's limits (20,000 + 2 x 100,000 characters) takes at most ~3 MB
_SKIP_BYTES = 2**20  # the rest of an overlong line is read and dropped this much at a time
ROW = "row"  # the name a row's fields are found under (`labeling.files.text_fields`)


@dataclass(frozen=True)
class UnreadableRow:
    """A line (or row) that holds no value the studio can read; `problem` says why."""

    problem: str


def bounded_lines(stream: BinaryIO) -> Iterator[tuple[int, bytes | None]]:
    """(line number, line) for each line of a binary stream; None for a line over MAX_LINE_BYTES."""
    line_no = 0
    while line := stream.readline(MAX_LINE_BYTES + 1):
        line_no += 1
        if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
            del line  # dropped before the rest is read
            while (rest := stream.readline(_SKIP_BYTES)) and not rest.endswith(b"\n"):
                pass
            yield line_no, None
        else:
            yield line_no, line


def too_long() -> UnreadableRow:
    return UnreadableRow(f"the line is over {MAX_LINE_BYTES // 2**20} MB; a row holds at most 20,000 characters of "
                         "prompt and 100,000 of each response: drop the other fields or shorten it")


def json_value(line: bytes | None) -> object:
    """The JSON value of a line from `bounded_lines`, or an UnreadableRow saying why there is none."""
    if line is None:
        return too_long()
    try:
        value = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError:
        return UnreadableRow("not valid UTF-8; re-save the file as UTF-8")
    except json.JSONDecodeError as exc:
        return UnreadableRow(f"not valid JSON ({exc.msg}); one JSON object per line")
    except RecursionError:
        return UnreadableRow("nested too deeply for a JSON row (lists or objects inside one another); flatten it")
    if b"\\ud" in line.lower():  # only a \uD800-\uDFFF escape makes a surrogate (a pair of them, one character)
        field = surrogate_field({ROW: value})  # `row` (a field's name), `row.completion`, `row.messages[1].content`
        if field is not None:
            where = (f"the field `{field.removeprefix(ROW + '.')}`" if field != ROW
                     else "a field's name" if isinstance(value, dict) else "the row")
            return UnreadableRow(f"{where} holds a lone surrogate (a \\ud800-\\udfff escape, half of a UTF-16 pair), "
                                 "which is no text; fix or remove the escape")
    return value
