"""Rows of a Parquet file or a `datasets` save_to_disk folder, decoded in a child process whose memory is capped.

A columnar file is compressed page by page, and pyarrow allocates a page's whole decoded size at once: a 10 KB
Parquet file can hold one 300 MB value (or a dictionary value repeated on every row) and take a reader over 1 GB.
So the studio never decodes one itself: `python -m labeling.files.columnar` does, with its data segment limited to
DECODE_BUDGET_MB beyond what it holds once pyarrow is loaded, and sends each row back as one JSON line; a row
whose line would pass `MAX_LINE_BYTES` is sent as its problem instead. The reader (`rows`) reads those lines in
bounded memory; a file that cannot be decoded within the budget, or at all, is one InvalidInput.

    for where, row in rows(path, columns=("prompt", "chosen"), required=("chosen",)):   # where: "row 7"
        ...
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from labeling.files.lines import MAX_LINE_BYTES, UnreadableRow, bounded_lines
from storage.errors import InvalidInput, first_line

DECODE_BUDGET_MB = 1024  # memory the child may allocate to decode a file (pages, record batches, rows)
BATCH_ROWS = 64  # rows decoded at once
ALL_COLUMNS = "*"  # in `columns`: every column the file holds
_STATE = "state.json"  # what save_to_disk writes beside a Dataset's Arrow files


class _NotJson(TypeError):
    """A value JSON cannot carry (bytes, a timestamp): the row is sent as a problem."""


def rows(path: Path, columns: Sequence[str], required: Sequence[str]) -> Iterator[tuple[str, object]]:
    """(where, row dict) for each row of a checked Parquet file or save_to_disk folder, decoded by the child process;
    a row it could not send comes as an UnreadableRow. InvalidInput when the file cannot be read."""
    command = [sys.executable, "-m", "labeling.files.columnar", str(path), json.dumps(list(columns)),
               json.dumps(list(required))]
    env = {**os.environ, "MALLOC_ARENA_MAX": "2"}  # one thread decodes: no per-thread malloc arenas to reserve
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    with tempfile.TemporaryFile() as errors:  # a file, not a pipe: a child writing much there never blocks
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, env=env)
        try:
            yield from _received(path, child, errors)
        finally:
            with contextlib.suppress(OSError):
                child.kill()
            child.wait()
            child.stdout.close()


def _received(path: Path, child: subprocess.Popen, errors) -> Iterator[tuple[str, object]]:
    sent = 0
    for _, line in bounded_lines(child.stdout):
        message = json.loads(line) if line is not None else {"error": f"the reader of {path} sent an overlong line"}
        if "error" in message:
            raise InvalidInput(message["error"])
        sent += 1
        yield f"row {sent}", message["row"] if "row" in message else UnreadableRow(message["problem"])
    if (code := child.wait()) != 0:  # killed, or crashed in pyarrow's own code: its last words say why
        errors.seek(max(0, errors.seek(0, 2) - 4096))
        said = errors.read().decode("utf-8", "replace").strip().splitlines() or [f"exit {code}"]
        raise InvalidInput(f"cannot read {path} after row {sent}: its reader stopped "
                           f"({first_line(Exception(said[-1]))}); check that the file is complete")


# ---- the child process ------------------------------------------------------------------------------------------

def _limit_memory() -> None:
    """Cap the data segment (heap and anonymous maps: what decoding allocates) at DECODE_BUDGET_MB beyond now (on
    Linux, which counts it; elsewhere the child runs uncapped, still apart from the studio)."""
    if not Path("/proc/self/status").is_file():
        return
    with open("/proc/self/status") as status:
        held_kb = next(int(line.split()[1]) for line in status if line.startswith("VmData:"))
    limit = held_kb * 1024 + DECODE_BUDGET_MB * 2**20
    resource.setrlimit(resource.RLIMIT_DATA, (limit, resource.getrlimit(resource.RLIMIT_DATA)[1]))


def _not_json(value) -> None:
    raise _NotJson(type(value).__name__)


def _line(row: dict) -> bytes:
    """A row as the JSON line sent back, or its problem when it holds a value JSON cannot carry or is too long."""
    try:
        line = json.dumps({"row": row}, ensure_ascii=False, default=_not_json).encode("utf-8")
    except _NotJson as exc:
        line = json.dumps({"problem": f"a column holds a {exc} value, not text or a number; convert it to text"})
        return line.encode("utf-8")
    except RecursionError:
        return json.dumps({"problem": "the row is nested too deeply (lists or structs inside one another)"}).encode()
    if len(line) >= MAX_LINE_BYTES:
        return json.dumps({"problem": f"the row is over {MAX_LINE_BYTES // 2**20} MB; shorten it"}).encode("utf-8")
    return line


def _open(path: Path):
    """(schema, batches(columns)) of a Parquet file or save_to_disk folder."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if path.is_dir():
        files = [path / entry["filename"] for entry in json.loads((path / _STATE).read_text("utf-8"))["_data_files"]]
        schema = pa.ipc.open_stream(pa.memory_map(str(files[0]))).schema

        def arrow_batches(columns: list[str]):
            for file in files:
                with pa.memory_map(str(file)) as source:
                    for batch in pa.ipc.open_stream(source):
                        selected = batch.select(columns)
                        yield from (selected.slice(start, BATCH_ROWS) for start in range(0, len(batch), BATCH_ROWS))

        return schema, arrow_batches
    parquet = pq.ParquetFile(path)
    return parquet.schema_arrow, lambda columns: parquet.iter_batches(batch_size=BATCH_ROWS, columns=columns,
                                                                      use_threads=False)


def _opened(path: Path, kind: str):
    import pyarrow as pa

    try:
        return _open(path)
    except (OSError, ValueError, KeyError, TypeError, IndexError, pa.ArrowException) as exc:
        fix = "save it again" if path.is_dir() else "re-export it"
        raise InvalidInput(f"{path} is not a readable {kind} ({first_line(exc)[:200]}); {fix}") from None


def _send_rows(path: Path, columns: list[str], required: list[str], out) -> None:
    import pyarrow as pa

    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)
    schema, batches = _opened(path, "save_to_disk folder" if path.is_dir() else "Parquet file")
    missing = [name for name in required if name not in schema.names]
    if missing:
        raise InvalidInput(f"{path} has no column {missing[0]!r}; it needs {' and '.join(required)}")
    row_no = 0
    try:
        for batch in batches(list(schema.names) if ALL_COLUMNS in columns else
                             [name for name in columns if name in schema.names]):
            for row in batch.to_pylist():
                row_no += 1
                out.write(_line(row) + b"\n")
    except MemoryError:  # pyarrow's out-of-memory error is one too
        raise InvalidInput(f"{path} row {row_no + 1} needs more than {DECODE_BUDGET_MB} MB to decode (a huge value, "
                           "or one repeated on many rows); shorten it") from None
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise InvalidInput(f"cannot read {path} after row {row_no} ({first_line(exc)[:200]}); check that it is "
                           "complete") from None


def main(argv: list[str]) -> int:
    """The child: rows of `argv[0]` (columns `argv[1]`, required `argv[2]`, JSON lists) as JSON lines on stdout."""
    path, columns, required = Path(argv[0]), json.loads(argv[1]), json.loads(argv[2])
    out = sys.stdout.buffer
    try:
        _limit_memory()
        _send_rows(path, columns, required, out)
    except InvalidInput as exc:
        out.write(json.dumps({"error": str(exc)}).encode("utf-8") + b"\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
