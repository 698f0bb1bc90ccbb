"""Data files are read in bounded memory whatever their compression (`labeling.files.lines`, `labeling.files.columnar`):
a 300 MB line inside a `.jsonl.gz` of a few hundred KB is refused (or skipped with skip_invalid) while the importing
process grows by well under 150 MB, for prompts and preferences alike; a Parquet file whose one value decodes to 300 MB
is decoded in a child process of capped memory and refused in one line. Damaged Parquet files are one line too, and
Parquet rows are called `row N`. A lone surrogate escaped in JSON (`"\\ud800"`) is a bad row naming its field, for
every import command (exit 2, nothing stored). Memory grown is a fresh subprocess's peak RSS during the import
(VmHWM, reset through /proc/self/clear_refs) over its RSS before it (psutil)."""

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from labeling.files.lines import MAX_LINE_BYTES, UnreadableRow, json_value
from labeling.transfer.importing import import_prompt_file
from labeling.transfer.preference_import import import_preference_file
from storage import InvalidInput, Store
from storage.labels import list_labels
from storage.prompts import list_prompts

ROOT = Path(__file__).resolve().parent.parent
LONG_MB = 300
GROWTH_LIMIT_MB = 150
GOOD_ROW = {"prompt": "Review the film.", "chosen": "A fine film.", "rejected": "Go away."}

IMPORT_AND_MEASURE = """
import json, sys
import psutil
from labeling.transfer.importing import import_prompt_file
from labeling.transfer.preference_import import import_preference_file
from storage import InvalidInput, Store


def peak_mb() -> float:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024


kind, db, path = sys.argv[1:]
store = Store(db)
before = psutil.Process().memory_info().rss / 2**20  # everything imported
with open("/proc/self/clear_refs", "w") as clear:
    clear.write("5")  # the peak RSS starts again from now
try:
    done = (import_prompt_file(store, path).added if kind == "prompts" else
            import_preference_file(store, path, "probe", skip_invalid=kind == "skip").summary())
except InvalidInput as exc:
    done = f"error: {exc}"
print(json.dumps({"done": done, "grown_mb": peak_mb() - before}))
"""


def imported_in_a_fresh_process(kind: str, db: Path, path: Path) -> dict:
    """Import `path` (kind: prompts, preferences, skip = preferences skipping invalid rows) in a new Python process;
    what it said and how much its peak RSS grew meanwhile, in MB."""
    ran = subprocess.run([sys.executable, "-c", IMPORT_AND_MEASURE, kind, str(db), str(path)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300, check=False)
    assert ran.returncode == 0, ran.stderr[-2000:]
    return json.loads(ran.stdout.splitlines()[-1])


def write_long_line_gz(path: Path, field: str, megabytes: int) -> Path:
    """A .jsonl.gz whose first line holds `megabytes` MB of text in `field` (written a MB at a time), then a good
    row."""
    with gzip.open(path, "wb", compresslevel=6) as out:
        out.write(b'{"%s": "' % field.encode())
        chunk = b"x" * 2**20
        for _ in range(megabytes):
            out.write(chunk)
        out.write(b'", "chosen": "a", "rejected": "b"}\n' + json.dumps(GOOD_ROW).encode() + b"\n")
    return path


@pytest.mark.parametrize("kind", ["prompts", "preferences", "skip"])
def test_a_300_mb_line_in_a_small_gz_is_refused_without_being_held(tmp_path, kind):
    path = write_long_line_gz(tmp_path / "long.jsonl.gz", "prompt", LONG_MB)
    assert path.stat().st_size < 2**20  # a compression ratio of over 300
    result = imported_in_a_fresh_process(kind, tmp_path / "studio.db", path)
    assert result["grown_mb"] < GROWTH_LIMIT_MB, result
    if kind == "skip":  # the long line is left out and counted; the good row is imported
        expected = "Imported 1 labeled pairs (0 already there). Skipped 1 invalid row: line 1."
        assert result["done"].startswith(expected), result
    else:
        assert result["done"] == (f"error: {path} line 1: the line is over {MAX_LINE_BYTES // 2**20} MB; a row holds "
                                  "at most 20,000 characters of prompt and 100,000 of each response: drop the other "
                                  "fields or shorten it" + ("; or skip invalid rows (--skip-invalid)"
                                                            if kind == "preferences" else "")), result


def test_a_line_at_the_limit_is_read_and_the_next_line_after_a_long_one_is_not_lost(tmp_path, store):
    from labeling.files.lines import bounded_lines

    path = tmp_path / "lines.jsonl"
    path.write_bytes(b"a" * MAX_LINE_BYTES + b"\n" + b"b" * (MAX_LINE_BYTES + 1) + b"\nc\n")
    with path.open("rb") as stream:
        lines = [(n, None if line is None else len(line)) for n, line in bounded_lines(stream)]
    assert lines == [(1, MAX_LINE_BYTES + 1), (2, None), (3, 2)]


def write_parquet(path: Path, columns: dict, **options) -> Path:
    pq.write_table(pa.table(columns), path, **options)
    return path


def test_a_parquet_value_that_decodes_to_300_mb_is_refused_by_a_reader_of_capped_memory(tmp_path):
    path = write_parquet(tmp_path / "long.parquet", {"prompt": ["x" * (LONG_MB * 2**20)], "chosen": ["a"],
                                                     "rejected": ["b"]}, compression="zstd")
    assert path.stat().st_size < 2**20
    for kind in ("prompts", "preferences"):
        result = imported_in_a_fresh_process(kind, tmp_path / f"{kind}.db", path)
        assert result["grown_mb"] < GROWTH_LIMIT_MB, result
        assert result["done"].startswith(f"error: {path} row 1 needs more than ") and "\n" not in result["done"]


def test_a_damaged_parquet_file_is_one_line_and_its_rows_are_called_rows(tmp_path, store):
    texts = [f"prompt {i} " * 20 for i in range(3000)]
    good = write_parquet(tmp_path / "good.parquet", {"prompt": texts, "chosen": texts, "rejected": texts[::-1]},
                         compression="none")
    data = bytearray(good.read_bytes())
    for i in range(4, 30):  # the first page header: pyarrow's message about it spans lines
        data[i] ^= 0x5A
    damaged = tmp_path / "damaged.parquet"
    damaged.write_bytes(bytes(data))
    for importer in (lambda: import_prompt_file(store, damaged), lambda: import_preference_file(store, damaged, "x")):
        message = "cannot read .*damaged.parquet after row 0 .*check that it is complete"
        with pytest.raises(InvalidInput, match=message) as refused:
            importer()
        assert "\n" not in str(refused.value)
    numbered = write_parquet(tmp_path / "rows.parquet", {"prompt": ["fine", "   "]})
    with pytest.raises(InvalidInput, match=r"rows.parquet row 2: the prompt is empty"):
        import_prompt_file(store, numbered)
    assert list_prompts(store) == [] and list_labels(store) == []


@pytest.mark.parametrize("name,header,line", [("long.txt", b"first prompt\n", 2), ("long.csv", b"prompt\nfirst\n", 3)])
def test_a_text_or_csv_line_over_the_limit_is_refused_naming_it(store, tmp_path, name, header, line):
    path = tmp_path / name
    path.write_bytes(header + b"x" * (MAX_LINE_BYTES + 1) + b"\nlast prompt\n")
    with pytest.raises(InvalidInput, match=f"{name} line {line}: the line is over 16 MB"):
        import_prompt_file(store, path)
    assert list_prompts(store) == []


def test_a_line_nested_too_deeply_for_the_json_parser_is_an_invalid_row(store, tmp_path):
    path = tmp_path / "deep.jsonl"
    path.write_text('{"chosen": ' + "[" * 100_000 + "\n" + json.dumps(GOOD_ROW) + "\n")
    with pytest.raises(InvalidInput, match="deep.jsonl line 1: nested too deeply"):
        import_preference_file(store, path, "deep")
    assert import_preference_file(store, path, "deep", skip_invalid=True).summary().startswith(
        "Imported 1 labeled pairs (0 already there). Skipped 1 invalid row: line 1. First problem: line 1: nested "
        "too deeply")


@pytest.mark.parametrize("command,good,field", [
    ("import-prompts", {"prompt": "Fine."}, "prompt"),
    ("import-demonstrations", {"prompt": "Fine.", "completion": "Yes."}, "completion"),
    ("import-preferences", GOOD_ROW, "rejected"),
    ("import-gold", GOOD_ROW, "rejected"),
])
def test_a_lone_surrogate_is_one_line_naming_the_field_and_row_with_nothing_stored(tmp_path, command, good, field):
    path = tmp_path / "surrogate.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps({**good, field: "half a pair: \ud800"}) + "\n")
    db = tmp_path / "s.db"
    done = subprocess.run([sys.executable, str(ROOT / "app.py"), command, "--db", str(db), str(path)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert f"surrogate.jsonl line 2: the field `{field}` holds a lone surrogate" in done.stderr
    assert not db.exists() or list_prompts(Store(db)) == []


def test_a_lone_surrogate_deep_in_a_row_is_named_and_a_pair_of_escapes_is_text():
    row = json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "\udfff"}]})
    assert json_value(row.encode()) == UnreadableRow(
        "the field `messages[1].content` holds a lone surrogate (a \\ud800-\\udfff escape, half of a UTF-16 pair), "
        "which is no text; fix or remove the escape")
    assert json_value(json.dumps({"prompt": "a smile \U0001F600"}).encode()) == {"prompt": "a smile \U0001F600"}
