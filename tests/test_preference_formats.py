"""Preference import in every format TRL's preference trainers read (explicit and implicit prompt, text and
conversational), from .jsonl, .jsonl.gz, .parquet and a save_to_disk folder; hh-rlhf's implicit prompt cut at the
last "\\n\\nAssistant:"; role turns when the policy has a chat template; invalid rows failing the import (naming the
line, nothing stored) or skipped, counted and listed; re-imports skipping; the CLI and the Data tab."""

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers

from app.context import Studio
from app.data import data_tab
from app.data.preferences import import_into_project, policy_has_chat_template
from labeling.transfer.preference_formats import dialogue_turns, preference_from_row, shared_length, split_dialogues
from labeling.transfer.preference_import import LISTED, import_preference_file, iter_preferences
from storage import InvalidInput
from storage.labels import list_labels, training_labels
from storage.pairs import list_pairs
from storage.policies import add_policy
from storage.preferences import Preference
from storage.prompts import count_prompts, list_prompts
from trainers.models.chat_format import ChatFormat

ROOT = Path(__file__).resolve().parent.parent
H, A = "\n\nHuman:", "\n\nAssistant:"
USER, ASSISTANT = ({"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"})
LAST_QUESTION = {"role": "user", "content": "A joke?"}


def hh(*turns: str) -> str:
    """An hh-rlhf dialogue of alternating Human / Assistant turns ("" = an empty answer, no space after the mark)."""
    return "".join(f"{H if i % 2 == 0 else A}{' ' + t if t else ''}" for i, t in enumerate(turns))


def turns(*answer: str) -> list[dict]:
    return [USER, ASSISTANT, LAST_QUESTION, *({"role": "assistant", "content": a} for a in answer)]


# The same two preferences in each format: a two-exchange dialogue (margin 2) and a one-exchange one.
FORMATS = {
    "explicit": [{"prompt": "Review it.", "chosen": " Great film.", "rejected": " Dull film.", "margin": 2.0},
                 {"prompt": "Another.", "chosen": " Fine.", "rejected": " Bad."}],
    "implicit": [{"chosen": hh("Hi", "Hello!", "A joke?", "Why not."), "rejected": hh("Hi", "Hello!", "A joke?", "No."),
                  "margin": 2.0},
                 {"chosen": hh("Hi", "Fine."), "rejected": hh("Hi", "Bad.")}],
    "explicit conversational": [
        {"prompt": turns(), "chosen": [{"role": "assistant", "content": "Why not."}],
         "rejected": [{"role": "assistant", "content": "No."}], "margin": 2.0},
        {"prompt": [USER], "chosen": [{"role": "assistant", "content": "Fine."}],
         "rejected": [{"role": "assistant", "content": "Bad."}]}],
    "implicit conversational": [
        {"chosen": turns("Why not."), "rejected": turns("No."), "margin": 2.0},
        {"chosen": [USER, {"role": "assistant", "content": "Fine."}],
         "rejected": [USER, {"role": "assistant", "content": "Bad."}]}],
}
PLAIN_TWO_TURNS = "Human: Hi\n\nAssistant: Hello!\n\nHuman: A joke?"
EXPECTED = {  # (prompt text, its turns, chosen, rejected, margin) stored for each format
    "explicit": [("Review it.", None, " Great film.", " Dull film.", 2.0), ("Another.", None, " Fine.", " Bad.", None)],
    "implicit": [(hh("Hi", "Hello!", "A joke?", ""), None, " Why not.", " No.", 2.0),
                 (hh("Hi", ""), None, " Fine.", " Bad.", None)],
    "explicit conversational": [(PLAIN_TWO_TURNS, turns(), "Why not.", "No.", 2.0),
                                ("Human: Hi", [USER], "Fine.", "Bad.", None)],
}
EXPECTED["implicit conversational"] = EXPECTED["explicit conversational"]


def stored(store) -> list[tuple]:
    messages = {prompt.text: prompt.messages for prompt in list_prompts(store)}
    return [(row.prompt, messages[row.prompt], row.first, row.second, row.margin) for row in training_labels(store)]


def write_jsonl(path: Path, rows: list, opener=open) -> Path:
    with opener(path, "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    return path


def write_kind(folder: Path, kind: str, rows: list[dict]) -> Path:
    if kind == ".jsonl":
        return write_jsonl(folder / "prefs.jsonl", rows)
    if kind == ".jsonl.gz":
        return write_jsonl(folder / "prefs.jsonl.gz", rows, gzip.open)
    if kind == ".parquet":
        pq.write_table(pa.Table.from_pylist(rows), folder / "prefs.parquet")
        return folder / "prefs.parquet"
    from datasets import Dataset

    Dataset.from_list(rows).save_to_disk(str(folder / "prefs"))
    return folder / "prefs"


@pytest.mark.parametrize("kind", [".jsonl", ".jsonl.gz", ".parquet", "save_to_disk"])
@pytest.mark.parametrize("name", list(FORMATS))
def test_every_format_from_every_file_kind(store, tmp_path, name, kind):
    path = write_kind(tmp_path, kind, FORMATS[name])
    result = import_preference_file(store, path, "hh")
    assert (result.added, result.duplicates, result.invalid.count) == (2, 0, 0)
    assert stored(store) == EXPECTED[name]
    assert {label.annotator for label in list_labels(store)} == {"hh"}
    assert {pair.selector for pair in list_pairs(store)} == {"imported"}


# ---- hh-rlhf: the implicit prompt --------------------------------------------------------------------------------

def test_shared_length_of_strings_and_lists():
    assert [shared_length(a, b) for a, b in [("abc", "abd"), ("abc", "abc"), ("", "x"), ("ab", "abc"), ("x", "y")]] \
        == [2, 3, 0, 2, 0]
    assert shared_length([USER, ASSISTANT], [USER, LAST_QUESTION]) == 1


def test_the_prompt_runs_to_the_last_assistant_mark_of_the_shared_beginning():
    prompt = hh("Hi", "Hello!", "Can you help?", "")
    # the answers share "Sure" (TRL's extract_prompt would cut there, mid-word): the prompt stops at the mark
    assert split_dialogues(prompt + " Sure thing.", prompt + " Surely not.") == (prompt, " Sure thing.", " Surely not.")
    # an empty answer and a single space are answers
    assert split_dialogues(prompt, prompt + " ") == (prompt, "", " ")
    assert split_dialogues(prompt + " ", prompt + " No.") == (prompt, " ", " No.")
    # a mark inside the shared part of the answers is the last one: the prompt runs to it
    longer = prompt + " Yes." + A
    assert split_dialogues(longer + " more", longer + " less") == (longer, " more", " less")
    assert split_dialogues(hh("Hi", "a"), hh("Ho", "a")) is None  # they part before any Assistant mark


def test_dialogue_turns_are_role_turns():
    assert dialogue_turns(hh("Hi", "Hello!", "A joke?", "")) == [USER, ASSISTANT, LAST_QUESTION]
    assert dialogue_turns("Human: Hi" + A) == [USER]  # no leading blank line
    assert dialogue_turns("Summarize this." + A) is None  # text before the first turn: not a dialogue
    assert dialogue_turns(hh("Hi", "Hello!", "")) is None  # ends with an Assistant turn, then the mark
    assert dialogue_turns(hh("Hi")) is None  # no Assistant mark to answer after


def test_hh_rows_with_empty_and_single_space_answers_import(store, tmp_path):
    rows = [{"chosen": hh("Hi", ""), "rejected": hh("Hi", "Go away.")},     # empty chosen answer
            {"chosen": hh("Ho", "Hello."), "rejected": hh("Ho", " ")},     # a single space (written "Assistant:  ")
            {"chosen": hh("Hey", "Hi"), "rejected": hh("Hey", "") + " "}]  # "Assistant: " with nothing after
    import_preference_file(store, write_jsonl(tmp_path / "hh.jsonl", rows), "hh")
    assert [(p, c, r) for p, _, c, r, _ in stored(store)] == [
        (hh("Hi", ""), "", " Go away."), (hh("Ho", ""), " Hello.", "  "), (hh("Hey", ""), " Hi", " ")]


@pytest.mark.parametrize("row, message", [
    ({"chosen": hh("Hi", "a"), "rejected": hh("Ho", "a")}, "share no beginning ending with"),
    ({"chosen": hh("Hi", "a", "More?", "b"), "rejected": hh("Hi", "c")}, "'chosen' goes on past its answer"),
    ({"chosen": turns("a", "b"), "rejected": turns("c")}, "exactly one assistant turn"),
    ({"chosen": [USER, ASSISTANT], "rejected": [{"role": "user", "content": "Ho"}, ASSISTANT]}, "share no user turn"),
    ({"prompt": [USER], "chosen": [ASSISTANT, ASSISTANT], "rejected": [ASSISTANT]}, "exactly one assistant turn"),
    ({"prompt": [ASSISTANT], "chosen": "a", "rejected": "b"}, "must end with a user turn"),
    ({"prompt": "p", "chosen": "a", "rejected": ["b"]}, "chosen is text and rejected is conversational"),
    ({"chosen": hh("Hi", "a"), "rejected": hh("Hi", "a")}, "the same text"),
    ({"prompt": "p", "chosen": "a", "rejected": {"x": 1}}, "'rejected' is dict"),
    ({"prompt": "p", "chosen": "a\x00", "rejected": "b"}, "'chosen' holds a NUL character"),
    ({"prompt": "p\x00", "chosen": "a", "rejected": "b"}, "'prompt' holds a NUL character"),
    ({"chosen": hh("Hi", "a"), "rejected": hh("Hi", "b\x00")}, "'rejected' holds a NUL character"),
])
def test_structurally_broken_rows_are_refused_naming_the_line(row, message):
    with pytest.raises(InvalidInput, match=message) as error:
        preference_from_row(row, "line 7")
    assert str(error.value).startswith("line 7: ")


# ---- role turns when the policy has a chat template ---------------------------------------------------------------

CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def model_folder(path: Path, chat_template: str | None) -> Path:
    """What ChatFormat reads of a model: a tokenizer.json and a tokenizer config (with a chat template or not)."""
    tokenizer = Tokenizer(models.WordLevel({"<unk>": 0, "<|im_end|>": 1, "<|im_start|>": 2}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.add_special_tokens([AddedToken("<|im_end|>", special=True), AddedToken("<|im_start|>", special=True)])
    path.mkdir()
    tokenizer.save(str(path / "tokenizer.json"))
    config = {"eos_token": "<|im_end|>", **({"chat_template": chat_template} if chat_template else {})}
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    return path


def test_hh_dialogues_become_role_turns_when_the_policy_has_a_chat_template(store, tmp_path):
    policy = model_folder(tmp_path / "chat-model", CHAT_TEMPLATE)
    add_policy(store, str(policy))
    assert policy_has_chat_template(store)
    rows = FORMATS["implicit"] + [{"chosen": hh("Ho", ""), "rejected": hh("Ho", " ") + " Go."}]
    path = write_jsonl(tmp_path / "hh.jsonl", rows)
    assert import_into_project(store, path, "hh").added == 3
    assert stored(store) == [(PLAIN_TWO_TURNS, turns(), "Why not.", "No.", 2.0),
                             ("Human: Hi", [USER], "Fine.", "Bad.", None),
                             ("Human: Ho", [{"role": "user", "content": "Ho"}], "", "Go.", None)]
    prompt = next(p for p in list_prompts(store) if p.text == PLAIN_TWO_TURNS)
    assert ChatFormat.from_dir(policy).prompt_text(prompt.content) == (  # the template wraps each turn
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"
        "<|im_start|>user\nA joke?<|im_end|>\n<|im_start|>assistant\n")
    assert import_into_project(store, path, "hh").duplicates == 3


def test_without_a_chat_template_the_prompt_stays_the_plain_text(store, tmp_path):
    assert not policy_has_chat_template(store)  # no policy at all
    add_policy(store, str(model_folder(tmp_path / "base-model", None)))
    assert not policy_has_chat_template(store)
    import_into_project(store, write_jsonl(tmp_path / "hh.jsonl", FORMATS["implicit"]), "hh")
    assert stored(store) == EXPECTED["implicit"]


def test_answers_that_differ_only_in_spaces_are_one_answer_as_role_turns():
    row = {"chosen": hh("Hi", ""), "rejected": hh("Hi", "") + " "}
    assert preference_from_row(row, "line 1").rejected == " "
    with pytest.raises(InvalidInput, match="line 1: chosen and rejected give the same answer"):
        preference_from_row(row, "line 1", chat_turns=True)


def test_a_prompt_that_is_no_dialogue_stays_text_under_a_chat_template():
    row = {"prompt": "Summarize this." + A, "chosen": " Short.", "rejected": " Long."}
    assert preference_from_row(row, "line 1", chat_turns=True) == Preference(row["prompt"], " Short.", " Long.")


def test_the_chat_template_check_does_not_import_torch(store, tmp_path):
    add_policy(store, str(model_folder(tmp_path / "chat-model", CHAT_TEMPLATE)))
    code = (f"import sys; from storage import Store; from app.data.preferences import policy_has_chat_template; "
            f"assert policy_has_chat_template(Store({str(store.path)!r})); assert 'torch' not in sys.modules")
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT, timeout=120).returncode == 0


# ---- broken rows: fail naming the line, or skip, count and list them ----------------------------------------------

GOOD = {"chosen": hh("Hi", "Fine."), "rejected": hh("Hi", "")}
BROKEN = ['{"chosen": "no closing brace"\n',                                      # line 2: not JSON
          json.dumps({"prompt": "p", "chosen": "a"}) + "\n",                      # line 3: a missing column
          json.dumps({"prompt": "p", "chosen": "same", "rejected": "same"}) + "\n",  # line 4: chosen = rejected
          json.dumps({"chosen": hh("Hi", "a"), "rejected": hh("Ho", "b")}) + "\n"]   # line 5: no shared prompt


def broken_file(path: Path) -> Path:
    lines = [json.dumps(GOOD) + "\n", *BROKEN, "\n", json.dumps(FORMATS["implicit"][1]) + "\n"]
    path.write_bytes("".join(lines).encode("utf-8") + b'{"prompt": "caf\xe9", "chosen": "a", "rejected": "b"}\n')
    return path


@pytest.mark.parametrize("line", [2, 3, 4, 5, 8])
def test_a_broken_row_fails_the_import_naming_its_line_and_stores_nothing(store, tmp_path, line):
    import_preference_file(store, write_jsonl(tmp_path / "before.jsonl", FORMATS["explicit"]), "before")
    before = stored(store)
    path = tmp_path / "in.jsonl"
    lines = broken_file(tmp_path / "all.jsonl").read_bytes().splitlines(keepends=True)
    path.write_bytes(lines[0] + lines[line - 1])
    ends = r"; or skip invalid rows \(--skip-invalid\)$"
    with pytest.raises(InvalidInput, match=re.escape(f"{path} line 2: ") + ".*" + ends):
        import_preference_file(store, path, "hh")
    assert stored(store) == before and count_prompts(store) == 2


def test_a_parquet_row_is_named_by_its_row_number(store, tmp_path):
    pq.write_table(pa.Table.from_pylist([GOOD, GOOD | {"rejected": GOOD["chosen"]}]), tmp_path / "p.parquet")
    with pytest.raises(InvalidInput, match="p.parquet row 2: chosen and rejected are the same text"):
        import_preference_file(store, tmp_path / "p.parquet", "hh")
    assert count_prompts(store) == 0


def test_skip_invalid_leaves_broken_rows_out_counted_and_listed(store, tmp_path):
    result = import_preference_file(store, broken_file(tmp_path / "in.jsonl"), "hh", skip_invalid=True)
    assert (result.added, result.duplicates, result.invalid.count) == (2, 0, 5)
    assert result.invalid.where == ["line 2", "line 3", "line 4", "line 5", "line 8"]
    assert result.summary() == (
        "Imported 2 labeled pairs (0 already there). Skipped 5 invalid rows: line 2, line 3, line 4, line 5, line 8. "
        "First problem: line 2: not valid JSON (Expecting ',' delimiter); one JSON object per line")
    assert [(p, c, r) for p, _, c, r, _ in stored(store)] == [(hh("Hi", ""), " Fine.", ""),
                                                              (hh("Hi", ""), " Fine.", " Bad.")]


def test_skip_invalid_lists_the_first_few_and_counts_the_rest(store, tmp_path):
    rows = [GOOD] + [{"prompt": "p", "chosen": "x", "rejected": "x"}] * (LISTED + 3)
    result = import_preference_file(store, write_jsonl(tmp_path / "in.jsonl", rows), "hh", skip_invalid=True)
    assert (result.added, result.invalid.count) == (1, LISTED + 3)
    assert f"Skipped {LISTED + 3} invalid rows: line 2, line 3, line 4, line 5, line 6 and 3 more." in result.summary()


def test_rows_are_read_as_a_stream(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + "not json\n")
    rows = iter_preferences(path)
    assert next(rows).chosen == " Fine."  # the first row comes before the broken second line is read
    with pytest.raises(InvalidInput, match="line 2: not valid JSON"):
        next(rows)


def test_files_and_folders_that_are_not_data_sets_are_refused(store, tmp_path):
    from datasets import Dataset, DatasetDict

    DatasetDict({"train": Dataset.from_list(FORMATS["explicit"])}).save_to_disk(str(tmp_path / "splits"))
    (tmp_path / "plain-folder").mkdir()
    cases = {tmp_path / "splits": "holds several splits \\(train\\); give one split's folder",
             tmp_path / "plain-folder": "is a folder without state.json",
             tmp_path / "missing": "does not exist"}
    for path, message in cases.items():
        with pytest.raises(InvalidInput, match=message):
            import_preference_file(store, path, "hh")
    assert import_preference_file(store, tmp_path / "splits" / "train", "hh").added == 2


# ---- the command line and the Data tab --------------------------------------------------------------------------

def run_app(*args, cwd):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(ROOT / "app.py"), *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=120)


def test_cli_imports_skips_invalid_rows_and_reimports_as_duplicates(tmp_path):
    db, path = tmp_path / "s.db", broken_file(tmp_path / "harmless-test.jsonl.gz")
    path.write_bytes(gzip.compress(path.read_bytes()))
    failed = run_app("import-preferences", "--db", str(db), str(path), cwd=tmp_path)
    assert failed.returncode == 2 and failed.stderr.count("\n") == 1
    assert failed.stderr.startswith(f"error: {path} line 2: not valid JSON")
    done = run_app("import-preferences", "--db", str(db), str(path), "--skip-invalid", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Imported 2 labeled pairs (0 already there). Skipped 5 invalid rows: line 2, ")
    again = run_app("import-preferences", "--db", str(db), str(path), "--skip-invalid",
                    "--source", "harmless-test", cwd=tmp_path)
    assert again.stdout.startswith("Imported 0 labeled pairs (2 already there). Skipped 5")
    from storage import Store

    assert {label.annotator for label in list_labels(Store(db))} == {"harmless-test"}  # the file's name by default


def test_data_tab_says_what_the_cli_says(store, tmp_path):
    path = broken_file(tmp_path / "in.jsonl")
    owner = SimpleNamespace(username="owner")
    shown = data_tab.on_import_preferences(Studio(store), str(path), "hh", True, owner)
    assert shown.startswith("Imported 2 labeled pairs (0 already there). Skipped 5 invalid rows: line 2, line 3")
    again = data_tab.on_import_preferences(Studio(store), str(path), "hh", True, owner)
    assert again.startswith("Imported 0 labeled pairs (2 already there).")
