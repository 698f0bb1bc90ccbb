"""The Data tab's handlers, called directly with a Store: imports, the export offered as a download, the
annotators' statistics, and admins only under --auth."""

from types import SimpleNamespace

import gradio as gr
import pytest

from app.auth import Users
from app.context import Studio
from app.data import data_tab
from storage.audit import list_actions
from storage.prompts import count_prompts

USERS = Users({"alice": "a", "owner": "o"}, frozenset({"owner"}))
OWNER, ALICE = SimpleNamespace(username="owner"), SimpleNamespace(username="alice")


def test_imports_exports_and_statistics(store, tmp_path):
    studio = Studio(store, USERS)
    prompts, preferences = tmp_path / "p.txt", tmp_path / "prefs.jsonl"
    prompts.write_text("one\ntwo\none\n")
    preferences.write_text('{"prompt": "q", "chosen": "good", "rejected": "bad"}\n')
    with pytest.raises(gr.Error, match="only an admin"):
        data_tab.on_import_prompts(studio, str(prompts), False, ALICE)
    with pytest.raises(gr.Error, match="choose a .jsonl, .csv or .txt file of prompts first"):
        data_tab.on_import_prompts(studio, None, False, OWNER)
    imported = data_tab.on_import_prompts(studio, str(prompts), False, OWNER)
    assert imported == "Imported 2 prompts (1 duplicates skipped)."
    assert count_prompts(store) == 2
    assert data_tab.on_import_preferences(studio, str(preferences), "hh", False, OWNER) == (
        "Imported 1 labeled pairs (0 already there).")

    export = data_tab.on_export(studio, "soft", ".jsonl", OWNER)
    assert export.export_status == "1 rows (included: 0 ties, 0 both bad, 0 skips)."
    assert export.download.visible and len(open(export.download.value["path"]).read().splitlines()) == 1
    stats = data_tab.on_stats(studio, ALICE)
    assert [row[:3] for row in stats.table] == [["hh", 1, 0]]
    assert stats.summary.startswith("No pair has been labeled by two annotators yet")
    assert data_tab.Stats.components(SimpleNamespace(table="t", summary="s")) == ["t", "s"]  # /annotator_stats order


def test_marking_a_label_gold_names_that_label_and_the_table_counts_the_gold_item_at_once(store, queue_pairs):
    from app.data import gold_panel
    from labeling.queue.annotation import next_pair, submit_label, undo_label

    studio = Studio(store)
    [pair_id] = queue_pairs([("p", "good", "bad")])
    submit_label(store, "alice", next_pair(store, "alice").pair_id, "left", "v1")
    undo_label(store, "alice")
    label_id = submit_label(store, "alice", pair_id, "right", "v2")
    assert label_id != pair_id  # label 2 on pair 1: the message names what was clicked, the label
    assert gold_panel.gold_table(studio).startswith("No gold items yet")
    said, table = gold_panel.on_mark(studio, label_id, None)
    assert said.startswith(f"Label {label_id} is gold now: its pair ({pair_id}) is a gold pair")
    assert table.startswith("**1 gold pair, 0 gold rankings**") and "No gold" not in table
    with pytest.raises(gr.Error, match=f"label {label_id}'s pair \\({pair_id}\\) is gold already"):
        gold_panel.on_mark(studio, label_id, None)


def test_without_auth_the_audit_trail_names_the_local_admin_by_their_os_user(store, tmp_path, monkeypatch):
    import getpass

    monkeypatch.setattr(getpass, "getuser", lambda: "zoe")
    (tmp_path / "p.txt").write_text("one\n")
    data_tab.on_import_prompts(Studio(store), str(tmp_path / "p.txt"), False, None)
    [entry] = list_actions(store)
    assert entry.actor == "local admin (zoe)"


def test_the_project_section_shows_each_policy_versions_source(demo_store):
    from app.data.project_panel import show_project

    shown = show_project(Studio(demo_store), None)
    assert "**SFT policy** (v0)" in shown.project_summary and "100** training prompts and **20** held out" in \
        shown.project_summary
    assert [row[:3] for row in shown.policies] == [["v0", 0, "—"]]


def test_an_admin_starts_a_project_on_a_model_folder_and_bad_folders_are_one_line(store, tiny_qwen_dir, tmp_path):
    from app.data.project_panel import on_start_project, show_project

    studio = Studio(store, USERS)
    assert show_project(studio, OWNER).project_summary.startswith("No project yet")
    with pytest.raises(gr.Error, match="only an admin"):
        on_start_project(studio, str(tiny_qwen_dir), False, ALICE)
    with pytest.raises(gr.Error, match=f"model directory {tmp_path / 'nope'} does not exist") as refused:
        on_start_project(studio, str(tmp_path / "nope"), False, OWNER)
    assert "\n" not in str(refused.value)
    started = on_start_project(studio, str(tiny_qwen_dir), False, OWNER)
    assert "project started" in started.start_status
    assert started.policies[0][3] == f"SFT policy from {tiny_qwen_dir.resolve()}"
    [entry] = list_actions(store)
    assert (entry.actor, entry.action.value) == ("owner", "project_started")


def test_a_skipped_rows_problem_quoting_the_file_shows_as_text_never_as_an_image(store, tmp_path):
    studio = Studio(store, USERS)
    preferences = tmp_path / "prefs.jsonl"
    preferences.write_text('{"prompt": "q", "chosen": "good", "rejected": "bad"}\n'
                           '{"prompt": [{"role": "![a](http://t.co/a)", "content": "x"}], "chosen": "a", '
                           '"rejected": "b"}\n')
    summary = data_tab.on_import_preferences(studio, str(preferences), "hh", True, OWNER)
    assert summary.startswith("Imported 1 labeled pairs (0 already there). Skipped 1 invalid row: line 2.")
    assert "![a](" not in summary and "has role '\\!\\[a\\](http://t.co/a)'" in summary
