"""Exports (trl and soft, .jsonl and .parquet, read back with `datasets`), the export CLI, and preference import."""

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datasets import load_dataset

from labeling.queue.annotation import next_pair, submit_label
from labeling.transfer.export import export_labels
from labeling.transfer.preference_import import import_preference_file
from storage.errors import InvalidInput
from storage.labels import list_labels
from storage.pairs import list_pairs
from storage.prompts import count_prompts

ROOT = Path(__file__).resolve().parent.parent
CHOICES = ["left", "right", "tie", "both_bad", "skip", "left"]


def label_all(store, queue_pairs):
    """Label six pairs with CHOICES; returns the expected trl rows (chosen = the side picked)."""
    queue_pairs([(f"prompt {i}", f"first {i} ✓", f"second {i}") for i in range(len(CHOICES))])
    expected = []
    for choice in CHOICES:
        shown = next_pair(store, "ann")
        submit_label(store, "ann", shown.pair_id, choice, str(uuid.uuid4()))
        if choice in ("left", "right"):
            chosen, rejected = (shown.left, shown.right) if choice == "left" else (shown.right, shown.left)
            expected.append({"prompt": shown.prompt, "chosen": chosen, "rejected": rejected})
    return expected


def load(path):
    loader = "parquet" if path.suffix == ".parquet" else "json"
    return load_dataset(loader, data_files=str(path), split="train", cache_dir=str(path.parent / "hf-cache"))


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_trl_export_has_the_chosen_side_and_leaves_out_ties_both_bad_and_skips(store, queue_pairs, tmp_path, suffix):
    expected = label_all(store, queue_pairs)
    result = export_labels(store, "trl", tmp_path / f"prefs{suffix}")
    assert (result.rows, result.ties, result.both_bad, result.skips) == (3, 1, 1, 1)
    data = load(result.path)
    assert data.column_names == ["prompt", "chosen", "rejected"]
    assert sorted(data.to_list(), key=lambda r: r["prompt"]) == sorted(expected, key=lambda r: r["prompt"])


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_soft_export_keeps_every_label_with_its_target(store, queue_pairs, tmp_path, suffix):
    label_all(store, queue_pairs)
    result = export_labels(store, "soft", tmp_path / f"soft{suffix}")
    rows = load(result.path).to_list()
    assert result.rows == len(rows) == 6
    stored = {label.id: label for label in list_labels(store)}
    for row in rows:
        label = stored[row["label_id"]]
        assert (row["outcome"], row["annotator"], row["pair_id"]) == (label.outcome.value, "ann", label.pair_id)
        assert row["target"] == {"first": 1.0, "second": 0.0, "tie": 0.5, "both_bad": 0.5, "skip": None}[row["outcome"]]
        assert row["first"].startswith("first") and row["second"].startswith("second")


def test_an_empty_store_or_only_ties_refuse_to_export(store, queue_pairs, tmp_path):
    with pytest.raises(InvalidInput, match="no labels yet"):
        export_labels(store, "trl", tmp_path / "x.jsonl")
    queue_pairs([("p", "a", "b")])
    submit_label(store, "ann", next_pair(store, "ann").pair_id, "tie", "v1")
    with pytest.raises(InvalidInput, match="use --format soft"):
        export_labels(store, "trl", tmp_path / "x.jsonl")
    for bad in (tmp_path / "x.csv", tmp_path / "missing" / "x.jsonl", tmp_path):
        with pytest.raises(InvalidInput):
            export_labels(store, "soft", bad)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["studio.db", "studio.db-shm", "studio.db-wal"]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


PREFS = [{"prompt": "Review it.", "chosen": "Great film.", "rejected": "Dull film.", "margin": 2.0},
         {"prompt": "Review it.", "chosen": "Fine acting.", "rejected": "Dull film.", "margin": 0.5},
         {"prompt": "Another.", "chosen": "<b>bold</b> & sure", "rejected": "meh"}]


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_import_then_export_round_trips_and_reimport_skips_duplicates(store, tmp_path, suffix):
    path = tmp_path / f"in{suffix}"
    if suffix == ".jsonl":
        write_jsonl(path, PREFS)
    else:
        pq.write_table(pa.Table.from_pylist(PREFS), path)
    result = import_preference_file(store, path, source=" hh-rlhf ")
    assert (result.added, result.duplicates) == (3, 0)
    assert {label.annotator for label in list_labels(store)} == {"hh-rlhf"}
    assert count_prompts(store) == 2 and {p.selector for p in list_pairs(store)} == {"imported"}
    exported = load(export_labels(store, "trl", tmp_path / "out.jsonl").path).to_list()
    assert exported == [{**row, "margin": row.get("margin", 0.0)} for row in PREFS]
    again = import_preference_file(store, path, source="hh-rlhf")
    assert (again.added, again.duplicates) == (0, 3) and len(list_labels(store)) == 3


BAD_ROWS = [
    ("not json at all\n", "not valid JSON"),
    (json.dumps({"prompt": "p", "chosen": "a"}) + "\n", "no 'rejected' field"),
    (json.dumps({"prompt": "p", "chosen": [{"role": "assistant", "content": "a"}], "rejected": "b"}) + "\n",
     "conversational"),
    (json.dumps({"prompt": 3, "chosen": "a", "rejected": "b"}) + "\n", "not text"),
    (json.dumps({"prompt": "p", "chosen": "same", "rejected": "same"}) + "\n", "the same text"),
    (json.dumps({"prompt": "p", "chosen": "a", "rejected": "b", "margin": "big"}) + "\n", "finite number"),
    ('{"prompt": "p", "chosen": "a", "rejected": "b", "margin": NaN}\n', "finite number"),
    (json.dumps({"prompt": " ", "chosen": "a", "rejected": "b"}) + "\n", "is empty"),
    (json.dumps({"prompt": "p" * 20_001, "chosen": "a", "rejected": "b"}) + "\n", "over the limit"),
    ("[1, 2]\n", "expected an object"),
]


@pytest.mark.parametrize("bad_line, message", BAD_ROWS)
def test_a_bad_row_aborts_the_whole_import_and_names_the_row(store, tmp_path, bad_line, message):
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps(PREFS[0]) + "\n" + bad_line, encoding="utf-8")
    with pytest.raises(InvalidInput, match=message) as error:
        import_preference_file(store, path, source="hh")
    assert "line 2" in str(error.value)
    assert (list_labels(store, include_undone=True), count_prompts(store), list_pairs(store)) == ([], 0, [])


def test_bad_files_and_sources_are_refused(store, tmp_path):
    cases = {
        tmp_path / "empty.jsonl": b"",
        tmp_path / "latin1.jsonl": '{"prompt": "caf\xe9", "chosen": "a", "rejected": "b"}\n'.encode("latin-1"),
        tmp_path / "in.csv": b"prompt,chosen,rejected\np,a,b\n",
        tmp_path / "broken.parquet": b"PAR1 not really",
        tmp_path / "blank.jsonl": b"\n\n",
    }
    for path, content in cases.items():
        path.write_bytes(content)
        with pytest.raises(InvalidInput):
            import_preference_file(store, path, source="hh")
    pq.write_table(pa.Table.from_pylist([{"prompt": "p", "chosen": "a"}]), tmp_path / "cols.parquet")
    with pytest.raises(InvalidInput, match="no column 'rejected'"):
        import_preference_file(store, tmp_path / "cols.parquet", source="hh")
    good = write_jsonl(tmp_path / "good.jsonl", PREFS)
    for source in ("", "a" * 10_000, "tab\there"):
        with pytest.raises(InvalidInput, match="source name"):
            import_preference_file(store, good, source=source)
    with pytest.raises(InvalidInput, match="does not exist"):
        import_preference_file(store, tmp_path / "missing.jsonl", source="hh")
    assert list_labels(store, include_undone=True) == [] and count_prompts(store) == 0


def run_app(*args, cwd):
    return subprocess.run([sys.executable, str(ROOT / "app.py"), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def test_export_cli_writes_the_file_and_reports_counts(store, queue_pairs, tmp_path):
    label_all(store, queue_pairs)
    store.close()
    out = tmp_path / "prefs.parquet"
    done = run_app("export", "--db", str(store.path), "--format", "trl", "--out", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "wrote 3 rows" in done.stdout and "1 ties, 1 both bad, 1 skips" in done.stdout
    assert load(out).num_rows == 3


def test_export_cli_bad_input_exits_2_with_one_line_and_creates_nothing(tmp_path):
    missing = tmp_path / "nope.db"
    for args in (["--db", str(missing), "--out", str(tmp_path / "x.jsonl")],
                 ["--db", str(missing), "--out", str(tmp_path / "x.txt")]):
        done = run_app("export", *args, cwd=tmp_path)
        assert done.returncode == 2 and done.stderr.startswith("error: ") and done.stderr.count("\n") == 1
    assert not missing.exists() and list(tmp_path.iterdir()) == []


def test_the_export_cli_module_does_not_import_torch():
    code = "import sys, app.commands.export_cli; assert 'torch' not in sys.modules, 'torch imported'"
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT, timeout=120).returncode == 0



@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_a_store_with_a_conversation_exports_every_row_in_trls_conversational_format(store, queue_pairs, tmp_path,
                                                                                    suffix):
    from storage.prompts import NewPrompt, add_prompts
    from storage.types import Outcome
    from tests.helpers import label_pairs

    turns = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi **there**"}]
    add_prompts(store, [NewPrompt("System: Be brief.\n\nHuman: Hi **there**", turns)])
    chat, text = queue_pairs([("System: Be brief.\n\nHuman: Hi **there**", "hello", "go away"),
                              ("a text prompt", "yes", "no")])
    label_pairs(store, "ann", {text: Outcome.SECOND, chat: Outcome.FIRST})
    rows = load(export_labels(store, "trl", tmp_path / f"chat{suffix}").path).to_list()
    assert sorted(rows, key=lambda r: len(r["prompt"])) == [
        {"prompt": [{"role": "user", "content": "a text prompt"}], "chosen": [{"role": "assistant", "content": "no"}],
         "rejected": [{"role": "assistant", "content": "yes"}]},
        {"prompt": turns, "chosen": [{"role": "assistant", "content": "hello"}],
         "rejected": [{"role": "assistant", "content": "go away"}]}]
    soft = load(export_labels(store, "soft", tmp_path / f"soft{suffix}").path).to_list()
    assert all(isinstance(r["prompt"], list) and r["first"][0]["role"] == "assistant" for r in soft)
