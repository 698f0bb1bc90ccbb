"""Prompt files: the three formats, duplicates counted, every bad input refused with the store unchanged."""

import json
from pathlib import Path

import pytest

from labeling.transfer.importing import MAX_PROMPT_CHARS, import_prompt_file, iter_prompts
from storage import InvalidInput, Store
from storage.policies import add_policy
from storage.prompts import list_prompts


def write(path, text, encoding="utf-8"):
    path.write_bytes(text.encode(encoding) if isinstance(text, str) else text)
    return path


@pytest.mark.parametrize("name,content", [
    ("p.jsonl", '{"prompt": "the movie was"}\n\n{"prompt": "i thought", "extra": 1}\n{"prompt": "the movie was"}\n'),
    ("p.csv", 'topic,prompt\nfilm,the movie was\nme,"i thought"\nfilm,the movie was\n'),
    ("p.txt", "the movie was\n\ni thought\nthe movie was\n"),
])
def test_formats_and_duplicates(store, tmp_path, name, content):
    result = import_prompt_file(store, write(tmp_path / name, content))
    assert (result.added, result.duplicates) == (2, 1)
    assert [p.text for p in list_prompts(store)] == ["the movie was", "i thought"]


def test_csv_with_quoted_commas_and_newlines(store, tmp_path):
    import_prompt_file(store, write(tmp_path / "p.csv", 'prompt\n"a, b"\n"two\nlines"\n'))
    assert [p.text for p in list_prompts(store)] == ["a, b", "two\nlines"]


def test_heldout_flag(store, tmp_path):
    import_prompt_file(store, write(tmp_path / "p.txt", "x\n"), heldout=True)
    assert list_prompts(store, heldout=True)[0].text == "x"


BAD = [
    ("missing.txt", None, "does not exist"),
    ("p.pdf", "prompt", "unsupported extension"),
    ("p.txt", "", "is empty"),
    ("p.txt", "\n\n  \n", "holds no prompts"),
    ("p.txt", b"caf\xe9 au lait\n", "not valid UTF-8"),
    ("p.jsonl", '{"prompt": "ok"}\n{"prompt": "broken\n', "line 2: not valid JSON"),
    ("p.jsonl", '{"text": "no prompt field"}\n', "line 1: no `prompt` field"),
    ("p.jsonl", '{"prompt": 42}\n', "line 1: `prompt` is int"),
    ("p.jsonl", '["a list"]\n', "line 1: no `prompt` field"),
    ("p.jsonl", '{"prompt": "   "}\n', "line 1: the prompt is empty"),
    ("p.csv", "text\nhello\n", "no `prompt` column"),
    ("p.csv", 'prompt,x\n"unterminated,1\n', "malformed CSV"),
    ("p.csv", "prompt\nok\nok,extra\n", "wrong number of fields"),
    ("p.txt", "ok\n" + "x" * (MAX_PROMPT_CHARS + 1) + "\n", "line 2: the prompt has"),
    ("p.txt", "ok\nnul\x00inside\n", "line 2: the prompt holds a NUL character"),
    ("p.jsonl", '{"prompt": "nul\\u0000inside"}\n', "line 1: the prompt holds a NUL character"),
    ("p.jsonl", json.dumps({"prompt": [{"role": "user", "content": "a\x00b"}]}) + "\n",
     "line 1: the prompt holds a NUL character"),
    ("p.csv", "prompt\nnul\x00inside\n", "line 2: the prompt holds a NUL character"),
]


@pytest.mark.parametrize("name,content,message", BAD)
def test_bad_files_leave_the_store_unchanged(store, tmp_path, name, content, message):
    import_prompt_file(store, write(tmp_path / "before.txt", "kept\n"))
    path = tmp_path / name if content is None else write(tmp_path / name, content)
    with pytest.raises(InvalidInput, match=message) as err:
        import_prompt_file(store, path)
    assert "\n" not in str(err.value)
    assert [p.text for p in list_prompts(store)] == ["kept"]


def test_a_folder_is_not_a_prompt_file(tmp_path):
    with pytest.raises(InvalidInput, match="is not a file"):
        list(iter_prompts(tmp_path))


def test_large_file_streams(store, tmp_path):
    path = tmp_path / "many.jsonl"
    with path.open("w") as f:
        for i in range(100_000):
            f.write(json.dumps({"prompt": f"prompt number {i}"}) + "\n")
    seen = []
    result = import_prompt_file(store, path, progress=seen.append)
    assert result.added == 100_000 and seen[-1] == 100_000


CHAT = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "What is **markdown**?"}]


def write_parquet(path, column, values):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({column: values}), path)
    return path


@pytest.mark.parametrize("make", [
    lambda d: write(d / "c.jsonl", json.dumps({"prompt": CHAT}) + "\n" + json.dumps({"prompt": "plain"}) + "\n"),
    lambda d: write(d / "c.jsonl", json.dumps({"messages": CHAT}) + "\n"
                    + json.dumps({"messages": None, "prompt": "plain"}) + "\n"),
    lambda d: write(d / "c.jsonl.gz", __import__("gzip").compress(
        (json.dumps({"prompt": CHAT}) + "\n" + json.dumps({"prompt": "plain"}) + "\n").encode())),
    lambda d: write_parquet(d / "c.parquet", "messages", [CHAT, [{"role": "user", "content": "plain"}]]),
])
def test_conversations_and_text_from_every_format(store, tmp_path, make):
    import_prompt_file(store, make(tmp_path))
    first, second = list_prompts(store)
    assert first.messages == CHAT and first.content == CHAT
    assert first.text == "System: Answer briefly.\n\nHuman: What is **markdown**?"
    assert second.content in ("plain", [{"role": "user", "content": "plain"}])


@pytest.mark.parametrize("turns,message", [
    (CHAT + [{"role": "assistant", "content": "an answer"}],
     "line 2: the last turn is 'assistant'; a prompt must end with a user turn"),
    ([{"role": "robot", "content": "x"}], "line 2: turn 1 has role 'robot'"),
    ([{"role": "user"}], "line 2: turn 1 must be an object with a text `content`"),
    ([], "line 2: .*non-empty list"),
    ([{"role": "user", "content": "  "}], "line 2: every turn of the conversation is empty"),
])
def test_bad_conversations_name_their_line_and_store_nothing(store, tmp_path, turns, message):
    path = write(tmp_path / "c.jsonl", json.dumps({"prompt": "fine"}) + "\n" + json.dumps({"prompt": turns}) + "\n")
    with pytest.raises(InvalidInput, match=message) as err:
        import_prompt_file(store, path)
    assert "\n" not in str(err.value) and list_prompts(store) == []


def test_prompts_longer_than_the_policy_reads_are_imported_counted_and_named(capsys, tmp_path):
    from app.commands.cli import main

    db = str(tmp_path / "p.db")
    path = write(tmp_path / "p.txt", "the movie was\n" + "the movie was " * 20 + "\nthe plot was\n")
    assert main(["import-prompts", "--db", db, str(path)]) == 0  # no policy yet: nothing to count against
    assert "longer than the policy reads" not in capsys.readouterr().out
    store = Store(db)
    add_policy(store, str(Path("assets/demo_policy").resolve()))  # context 64: 40 tokens with 24 to answer
    path = write(tmp_path / "q.txt", "a short one\n" + "the film was " * 20 + "\n")
    assert main(["import-prompts", "--db", db, str(path)]) == 0
    out = capsys.readouterr().out
    assert "imported 2 prompts" in out
    assert (f"1 of the 2 new prompts are longer than the policy reads (40 tokens: its context of 64 less 24 response "
            f"tokens): prompts 5. They are kept (exports keep them) and left out of sampling, training and "
            f"evaluation; python app.py prompts --db {store.path} lists them") in out
    assert [p.id for p in list_prompts(store)] == [1, 2, 3, 4, 5]  # kept, the long ones too


def test_a_damaged_gzip_is_refused_in_one_line(store, tmp_path):
    with pytest.raises(InvalidInput, match="cannot read .* check that the file is complete"):
        import_prompt_file(store, write(tmp_path / "p.jsonl.gz", b"\x1f\x8b\x08\x00broken"))
    assert list_prompts(store) == []
