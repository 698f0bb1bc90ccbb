"""Prompt references: extra fields kept at import (training and held-out), one reference per text, NaN, Infinity and
NUL refused naming the row, the prompts export (as imported in JSON lines, mixed types too), and the Data tab's
section."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from app.context import Studio
from app.data.references_panel import show_references
from labeling.transfer.importing import import_prompt_file
from labeling.transfer.prompt_export import export_prompts
from storage import InvalidInput, Store
from storage.prompts import count_prompts, list_prompts

ROOT = Path(__file__).resolve().parent.parent


def run_app(*args, cwd):
    return subprocess.run([sys.executable, str(ROOT / "app.py"), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def test_jsonl_fields_beside_the_prompt_are_its_reference_held_out_too(store, tmp_path):
    import_prompt_file(store, jsonl(tmp_path / "train.jsonl", [
        {"prompt": "What is 2 + 3?", "answer": "5", "solution": "2 + 3 = 5"}, {"prompt": "Say hi"}]))
    import_prompt_file(store, jsonl(tmp_path / "eval.jsonl", [{"prompt": "What is 4 - 9?", "answer": -5}]),
                       heldout=True)
    train, heldout = list_prompts(store, heldout=False), list_prompts(store, heldout=True)
    assert [p.reference for p in train] == [{"answer": "5", "solution": "2 + 3 = 5"}, None]
    assert heldout[0].reference == {"answer": -5}


def test_csv_columns_and_parquet_columns_are_kept(store, tmp_path):
    (tmp_path / "p.csv").write_text("prompt,answer\nWhat is 1 + 1?,2\nempty answer,\n", encoding="utf-8")
    pq.write_table(pa.Table.from_pylist([{"prompt": "What is 10 * 3?", "answer": "30", "level": 2}]),
                   tmp_path / "p.parquet")
    import_prompt_file(store, tmp_path / "p.csv")
    import_prompt_file(store, tmp_path / "p.parquet")
    assert [p.reference for p in list_prompts(store)] == [{"answer": "2"}, None, {"answer": "30", "level": 2}]


def test_a_repeat_with_the_same_reference_is_a_duplicate(store, tmp_path):
    rows = [{"prompt": "What is 2 + 3?", "answer": "5"}] * 2 + [{"prompt": "What is 2 + 3?"}]
    result = import_prompt_file(store, jsonl(tmp_path / "p.jsonl", rows))
    assert (result.added, result.duplicates) == (1, 2)


@pytest.mark.parametrize("rows", [
    [{"prompt": "What is 2 + 3?", "answer": "5"}, {"prompt": "What is 2 + 3?", "answer": "6"}],
    [{"prompt": "What is 2 + 3?"}, {"prompt": "What is 2 + 3?", "answer": "5"}],
])
def test_a_repeat_with_another_reference_is_refused_in_one_line_with_nothing_stored(store, tmp_path, rows):
    with pytest.raises(InvalidInput, match="already stored with the reference .* a prompt's text has one reference"):
        import_prompt_file(store, jsonl(tmp_path / "p.jsonl", rows))
    assert count_prompts(store) == 0


def test_an_oversized_reference_is_refused_naming_its_line(store, tmp_path):
    rows = [{"prompt": "ok"}, {"prompt": "big", "answer": "9" * 30_000}]
    with pytest.raises(InvalidInput, match="line 2: the reference .* over the limit"):
        import_prompt_file(store, jsonl(tmp_path / "p.jsonl", rows))


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_the_prompts_export_writes_references_and_imports_back(store, tmp_path, suffix):
    rows = [{"prompt": "What is 2 + 3?", "answer": "5"}, {"prompt": "Say hi"}]
    import_prompt_file(store, jsonl(tmp_path / "in.jsonl", rows))
    import_prompt_file(store, jsonl(tmp_path / "eval.jsonl", [{"prompt": "held", "answer": "1"}]), heldout=True)
    result = export_prompts(store, tmp_path / f"out{suffix}")
    assert (result.rows, result.with_reference) == (2, 1)
    again = Store(tmp_path / "again.db")
    import_prompt_file(again, result.path)
    assert [(p.text, p.reference) for p in list_prompts(again)] == [("What is 2 + 3?", {"answer": "5"}),
                                                                   ("Say hi", None)]
    held = export_prompts(store, tmp_path / f"held{suffix}", heldout=True)
    assert held.rows == 1


@pytest.mark.parametrize("line,refused", [
    ('{"prompt": "b", "answer": NaN}', "line 2: the reference's `answer` is nan, not a finite number"),
    ('{"prompt": "b", "answer": {"steps": [1, -Infinity]}}', "line 2: the reference's `answer.steps[1]` is -inf"),
    ('{"prompt": "b", "answer": "8\\u0000"}', "line 2: the reference's `answer` holds a NUL character"),
    ('{"prompt": "b", "ans\\u0000wer": "8"}', "line 2: the reference's `ans\\x00wer` holds a NUL character"),
])
def test_nan_infinity_and_nul_in_a_reference_are_refused_naming_the_row(store, tmp_path, line, refused):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "a", "answer": 1.5}\n' + line + "\n", encoding="utf-8")
    with pytest.raises(InvalidInput, match=re.escape(refused)):
        import_prompt_file(store, path)
    assert count_prompts(store) == 0


def test_references_of_mixed_types_export_to_jsonl_as_imported_and_parquet_refuses_in_one_line(store, tmp_path):
    rows = [{"prompt": "What is 2+3?", "answer": "5"}, {"prompt": "What is 4+4?", "answer": 8},
            {"prompt": "Say hi", "level": [1, 2]}]
    import_prompt_file(store, jsonl(tmp_path / "in.jsonl", rows))
    store.close()
    out = tmp_path / "m.jsonl"
    done = run_app("export", "--db", str(store.path), "--format", "prompts", "--out", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert [json.loads(line) for line in out.read_text().splitlines()] == rows
    done = run_app("export", "--db", str(store.path), "--format", "prompts", "--out", "m.parquet", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "differ in type from prompt to prompt, which Parquet cannot hold" in done.stderr
    assert not (tmp_path / "m.parquet").exists()


def test_the_export_cli_writes_prompts_and_refuses_heldout_with_labels(store, tmp_path):
    import_prompt_file(store, jsonl(tmp_path / "in.jsonl", [{"prompt": "What is 2 + 3?", "answer": "5"}]))
    store.close()
    out = tmp_path / "prompts.jsonl"
    done = run_app("export", "--db", str(store.path), "--format", "prompts", "--out", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text()) == {"prompt": "What is 2 + 3?", "answer": "5"}
    done = run_app("export", "--db", str(store.path), "--heldout", "--out", str(tmp_path / "x.jsonl"), cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "--heldout goes with --format prompts" in done.stderr


def test_the_data_tab_shows_the_references(store, tmp_path):
    studio = Studio(store)  # without --auth: everyone is an admin
    assert "No prompt carries a reference" in show_references(studio, None).reference_summary
    import_prompt_file(store, jsonl(tmp_path / "p.jsonl", [{"prompt": "What is 2 + 3?", "answer": "5"}]))
    shown = show_references(studio, None)
    assert "**1** prompts carry a reference" in shown.reference_summary
    assert shown.references[0][1:] == ["training", "What is 2 + 3?", '{"answer": "5"}']
