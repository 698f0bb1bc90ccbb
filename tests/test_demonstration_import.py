"""Demonstrations in and out: TRL's SFT formats from every file kind the preference import reads, refusals in one
line with the store unchanged, too-long demonstrations kept and named, and `export --format sft` read back with
`datasets`."""

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datasets import Dataset, load_dataset

from app.commands.cli import main
from labeling.demonstrations.demonstration_export import export_demonstrations
from labeling.demonstrations.demonstration_import import import_demonstration_file
from storage import Store
from storage.demonstrations import count_demonstrations, list_demonstrations
from storage.errors import InvalidInput
from storage.policies import add_policy
from storage.prompts import count_prompts

TURNS = [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "hi"}]
ROWS = {
    "text": [{"prompt": "the movie was", "completion": " great .", "extra": 3}],
    "conversational": [{"prompt": TURNS, "completion": [{"role": "assistant", "content": "hello"}]}],
    "messages": [{"messages": [*TURNS, {"role": "assistant", "content": "hello"}], "id": "x"}],
}
EXPECTED = {"text": ("the movie was", None, " great ."), "conversational": ("System: Be kind.\n\nHuman: hi", TURNS,
                                                                            "hello"),
            "messages": ("System: Be kind.\n\nHuman: hi", TURNS, "hello")}


def write(path, rows):
    if path.name.endswith(".jsonl.gz"):
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    elif path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    elif path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    else:
        Dataset.from_list(rows).save_to_disk(str(path))
    return path


@pytest.mark.parametrize("kind", [".jsonl", ".jsonl.gz", ".parquet", "folder"])
@pytest.mark.parametrize("fmt", sorted(ROWS))
def test_each_format_from_each_file_kind(store, tmp_path, fmt, kind):
    path = write(tmp_path / f"demos{'' if kind == 'folder' else kind}", ROWS[fmt])
    result = import_demonstration_file(store, path, "writers")
    assert (result.added, result.duplicates, result.source) == (1, 0, "writers")
    [demo] = list_demonstrations(store)
    assert (demo.prompt, demo.prompt_messages, demo.text) == EXPECTED[fmt]
    assert (demo.author, demo.source) == ("writers", "import:writers")
    assert import_demonstration_file(store, path, "writers").duplicates == 1


REFUSED = [
    ({"text": "a whole document"}, "line 1: no 'prompt' and 'completion' .* plain 'text' row has no prompt"),
    ({"prompt": "the movie was"}, "line 1: no 'completion' field"),
    ({"completion": "great"}, "line 1: no 'prompt' field"),
    ({"prompt": "the movie was", "completion": "   "}, "line 1: the demonstration is empty"),
    ({"prompt": "the movie was", "completion": "gre\x00at"}, "line 1: the demonstration holds a NUL"),
    ({"prompt": 7, "completion": "great"}, "line 1: 'prompt' is int"),
    ({"prompt": "the movie was", "completion": 7}, "line 1: 'completion' is int"),
    ({"prompt": "", "completion": "great"}, "line 1: 'prompt' is empty"),
    ({"messages": [{"role": "user", "content": "hi"}, {"role": "user", "content": "again"}]},
     "line 1: the last turn of 'messages' must be the assistant's"),
    ({"messages": "hi"}, "line 1: 'messages' must be a list of turns"),
    ({"prompt": TURNS, "completion": [{"role": "user", "content": "no"}]}, "exactly one assistant turn"),
]


@pytest.mark.parametrize(("row", "problem"), REFUSED)
def test_refusals_name_the_line_and_store_nothing(store, tmp_path, row, problem):
    path = write(tmp_path / "demos.jsonl", [{"prompt": "fine", "completion": "ok"}, row])
    with pytest.raises(InvalidInput, match=problem.replace("line 1", "line 2")):
        import_demonstration_file(store, path, "writers")
    assert count_demonstrations(store) == 0 and count_prompts(store) == 0


def test_an_empty_file_and_a_file_of_blank_lines_are_refused(store, tmp_path):
    (tmp_path / "empty.jsonl").write_bytes(b"")
    with pytest.raises(InvalidInput, match="is empty"):
        import_demonstration_file(store, tmp_path / "empty.jsonl", "w")
    (tmp_path / "blank.jsonl").write_text("\n\n")
    with pytest.raises(InvalidInput, match="holds no rows"):
        import_demonstration_file(store, tmp_path / "blank.jsonl", "w")


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_sft_export_loads_with_datasets_and_imports_back(store, tmp_path, suffix):
    import_demonstration_file(store, write(tmp_path / "in.jsonl", ROWS["text"] + [
        {"prompt": "the plot was", "completion": " fine ."}]), "w")
    result = export_demonstrations(store, tmp_path / f"sft{suffix}")
    loader = "parquet" if suffix == ".parquet" else "json"
    data = load_dataset(loader, data_files=str(result.path), split="train", cache_dir=str(tmp_path / "cache"))
    assert data.to_list() == [{"prompt": "the movie was", "completion": " great ."},
                              {"prompt": "the plot was", "completion": " fine ."}]
    again = Store(tmp_path / "again.db")
    assert import_demonstration_file(again, result.path, "back").added == 2


def test_conversational_export_writes_every_row_as_turns(store, tmp_path):
    import_demonstration_file(store, write(tmp_path / "in.jsonl", ROWS["text"] + ROWS["messages"]), "w")
    path = export_demonstrations(store, tmp_path / "sft.jsonl").path
    data = load_dataset("json", data_files=str(path), split="train", cache_dir=str(tmp_path / "cache"))
    assert data.to_list() == [
        {"prompt": [{"role": "user", "content": "the movie was"}],
         "completion": [{"role": "assistant", "content": " great ."}]},
        {"prompt": TURNS, "completion": [{"role": "assistant", "content": "hello"}]}]


def test_cli_imports_names_the_too_long_ones_and_exports(tmp_path, capsys, tiny_qwen_dir):
    db = tmp_path / "s.db"
    add_policy(Store(db), str(tiny_qwen_dir))
    context = json.loads((tiny_qwen_dir / "config.json").read_text())["max_position_embeddings"]
    rows = [{"prompt": "hi", "completion": "hello"}, {"prompt": "hey", "completion": "word " * (context + 5)}]
    path = write(tmp_path / "demos.jsonl", rows)
    assert main(["import-demonstrations", "--db", str(db), str(path), "--source", "writers"]) == 0
    out = capsys.readouterr().out
    assert "Imported 2 demonstrations by writers (0 already there)." in out
    assert f"demonstrations by writers: 1 of 2 train SFT; 1 too long for the policy's context of {context} " \
           "(demonstrations 2)" in out
    assert count_demonstrations(Store(db)) == 2  # kept
    assert main(["export", "--db", str(db), "--format", "sft", "--out", str(tmp_path / "out.jsonl")]) == 0
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 2


def test_cli_refuses_in_one_line_with_exit_code_2(tmp_path, capsys):
    db = tmp_path / "s.db"
    path = write(tmp_path / "demos.jsonl", [{"prompt": "hi"}])
    assert main(["import-demonstrations", "--db", str(db), str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "line 1: no 'completion' field" in err and "\n" not in err
    assert count_demonstrations(Store(db)) == 0
    assert main(["export", "--db", str(db), "--format", "sft", "--out", str(tmp_path / "o.jsonl")]) == 2
    assert "no demonstrations yet" in capsys.readouterr().err
