"""The audit trail: a row for each admin action in the studio (start, stop, resume a job; queue settings; imports;
exports) and for each admin command in a terminal (`cli:<OS user>`), with the time and what changed; nothing for a
refused or bad request; shown on the Data tab to admins only; exported as CSV from the tab, the API and the CLI."""

import argparse
import csv
import getpass
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import pytest
from gradio_client import Client

from app.audit import HEADERS
from app.auth import Users
from app.commands.cli import record_terminal_action
from app.context import Studio
from app.data import data_tab
from app.label import label_tab
from app.train import train_tab
from bench.studio_driver import hashed_auth_file
from storage import jobs as job_rows
from storage.audit import MAX_TEXT, AuditAction, list_actions, record_action
from tests.helpers import workerless_studio

ROOT = Path(__file__).resolve().parent.parent
USERS = Users({"alice": "a", "owner": "o"}, frozenset({"owner"}))
OWNER, ALICE = SimpleNamespace(username="owner"), SimpleNamespace(username="alice")
SMALL = {"rounds": 1, "prompts_per_round": 8, "policy_batch_size": 8, "labels_per_round": 8}


def trail(store) -> list[tuple[str, str, dict]]:
    """(actor, action, detail) of every row, oldest first."""
    return [(e.actor, e.action.value, e.detail) for e in reversed(list_actions(store))]


@pytest.fixture
def studio(store, monkeypatch):
    """A studio under --auth on a store with training prompts and the demo policy; jobs get no worker."""
    return workerless_studio(store, monkeypatch, USERS)


def test_each_admin_action_in_the_studio_is_recorded_with_its_user_and_what_changed(studio, store, tmp_path):
    start = time.time()
    with pytest.raises(gr.Error):  # refused or bad requests leave no row
        train_tab.api_start_loop(studio, json.dumps(SMALL), ALICE)
    with pytest.raises(gr.Error):
        train_tab.api_start_loop(studio, json.dumps({**SMALL, "prompts_per_round": 17}), OWNER)
    with pytest.raises(gr.Error):
        label_tab.save_queue_settings(studio, "x", 500, 600, OWNER)
    assert list_actions(store) == []

    job_id = train_tab.api_start_loop(studio, json.dumps(SMALL), OWNER)["job_id"]
    train_tab.api_stop_job(studio, job_id, OWNER)
    job_rows.request_cancel(store, job_id)  # no worker: the queued job is cancelled at once
    train_tab.api_resume_job(studio, job_id, OWNER)
    label_tab.save_queue_settings(studio, "Prefer the kinder review." * 20, 2, 600, OWNER)
    prompts, preferences = tmp_path / "prompts.txt", tmp_path / "prefs.jsonl"
    prompts.write_text("one\ntwo\none\n")
    preferences.write_text('{"prompt": "q", "chosen": "good", "rejected": "bad"}\n')
    data_tab.on_import_prompts(studio, str(prompts), True, OWNER)
    data_tab.on_import_preferences(studio, str(preferences), "hh", False, OWNER)
    export = data_tab.on_export(studio, "trl", ".jsonl", OWNER)
    audit_file = data_tab.on_export_audit(studio, OWNER).value["path"]

    rows = trail(store)
    assert {actor for actor, _, _ in rows} == {"owner"}
    assert [(action, detail) for _, action, detail in rows[:3]] == [
        ("job_started", {"job_id": job_id, "kind": "loop", "settings": SMALL}),
        ("job_stopped", {"job_id": job_id, "status": "cancelled"}),
        ("job_resumed", {"job_id": job_id})]
    action, changed = rows[3][1:]
    assert action == "queue_settings_changed" and set(changed) == {"guidelines", "overlap"}  # the TTL did not change
    assert changed["overlap"] == [1, 2] and len(changed["guidelines"][1]) == MAX_TEXT  # long text cut short
    assert [(action, detail) for _, action, detail in rows[4:]] == [
        ("prompts_imported", {"file": "prompts.txt", "heldout": True, "added": 2, "duplicates": 1}),
        ("preferences_imported", {"file": "prefs.jsonl", "source": "hh", "added": 1, "duplicates": 0, "invalid": 0}),
        ("labels_exported", {"format": "trl", "file": Path(export.download.value["path"]).name, "rows": 1}),
        ("audit_exported", {"rows": 7})]
    assert all(start <= e.at <= time.time() for e in list_actions(store))
    with open(audit_file, newline="") as f:
        table = list(csv.reader(f))
    assert table[0] == HEADERS and len(table) == 8
    assert table[-1][1:3] == ["owner", "job_started"] and json.loads(table[-1][3])["job_id"] == job_id


def test_the_data_tab_shows_the_trail_to_admins_only(studio, store):
    record_action(store, "owner", AuditAction.LABELS_EXPORTED, {"rows": 3}, at=1_700_000_000)
    shown = data_tab.on_audit(studio, OWNER)
    assert shown.audit_box.visible and [row[1:] for row in shown.audit_table] == [
        ["owner", "labels_exported", '{"rows": 3}']]
    assert shown.audit_table[0][0].startswith("2023-11-")  # ISO 8601 local time with its offset
    hidden = data_tab.on_audit(studio, ALICE)
    assert hidden.audit_box.visible is False and hidden.audit_table == []
    with pytest.raises(gr.Error, match="only an admin"):
        data_tab.on_export_audit(studio, ALICE)
    assert data_tab.on_audit(Studio(store), None).audit_box.visible  # without --auth everyone administers


def run_cli(*args):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(ROOT / "app.py"), *args], capture_output=True, text=True, env=env,
                          timeout=120, check=False)


def test_terminal_commands_are_recorded_by_their_os_user(tmp_path, store, queue_pairs):
    queue_pairs([("a prompt", "a great film", "a dull film")])
    db, prompts, out = str(store.path), tmp_path / "p.txt", tmp_path / "labels.jsonl"
    prompts.write_text("one\ntwo\n")
    assert run_cli("import-prompts", "--db", db, str(tmp_path / "missing.txt")).returncode == 2
    assert list_actions(store) == []  # bad input did nothing: nothing recorded
    assert run_cli("import-prompts", "--db", db, str(prompts)).returncode == 0
    assert run_cli("label", "--db", db, "--n", "1").returncode == 0
    assert run_cli("export", "--db", db, "--format", "soft", "--out", str(out)).returncode == 0
    result = run_cli("audit", "--db", db, "--out", str(tmp_path / "audit.csv"))
    assert result.returncode == 0 and "wrote 3 actions" in result.stdout, result.stderr
    rows = trail(store)
    assert {actor for actor, _, _ in rows} == {f"cli:{getpass.getuser()}"}
    assert [action for _, action, _ in rows] == ["prompts_imported", "synthetic_labels_added", "labels_exported",
                                                 "audit_exported"]
    assert rows[0][2]["args"] == {"file": str(prompts), "heldout": False} and rows[0][2]["exit"] == 0
    assert rows[2][2]["args"] == {"format": "soft", "heldout": False, "out": str(out)}
    with open(tmp_path / "audit.csv", newline="") as f:
        assert [row[2] for row in csv.reader(f)] == ["action", "labels_exported", "synthetic_labels_added",
                                                      "prompts_imported"]
    bad = run_cli("audit", "--db", db, "--out", str(tmp_path / "audit.txt"))
    assert bad.returncode == 2 and bad.stderr.strip() == f"error: audit file {tmp_path / 'audit.txt'} must end in .csv"


def test_terminal_training_commands_record_the_jobs_they_ran(store):
    started = time.time()
    job_id = job_rows.create_job(store, "loop", {})
    args = argparse.Namespace(command="loop", db=str(store.path), run=None, resume=None, rounds=2)
    record_terminal_action(args, started, 0)
    record_terminal_action(argparse.Namespace(**{**vars(args), "command": "ppo", "resume": job_id}), started, 130)
    (actor, first, started_detail), (_, second, resumed_detail) = trail(store)
    assert actor.startswith("cli:") and (first, second) == ("job_started", "job_resumed")
    assert started_detail["jobs"] == [job_id] and started_detail["args"] == {"resume": None, "rounds": 2}
    assert resumed_detail["jobs"] == [job_id] and resumed_detail["exit"] == 130
    assert [e.at for e in list_actions(store)] == [started, started]  # when the command began


def test_an_admin_exports_the_trail_through_the_api(store, serve_studio, tmp_path):
    users = hashed_auth_file(tmp_path / "users.txt", {"alice": "alice-pw", "owner": "owner-pw"}, admins={"owner"})
    url = serve_studio(store, users).local_url
    owner, alice = Client(url, auth=("owner", "owner-pw"), verbose=False), Client(url, auth=("alice", "alice-pw"),
                                                                                 verbose=False)
    owner.predict("Be kind.", 1, 600, api_name="/save_queue_settings")
    with pytest.raises(Exception, match="only an admin"):
        alice.predict(api_name="/export_audit")
    download = owner.predict(api_name="/export_audit")
    with open(download["value"], newline="") as f:
        table = list(csv.reader(f))
    assert [row[1:3] for row in table[1:]] == [["owner", "queue_settings_changed"]]
    assert [(actor, action) for actor, action, _ in trail(store)] == [("owner", "queue_settings_changed"),
                                                                      ("owner", "audit_exported")]


FORMULAS = ["=1+1", "+1+1", "-1+1", "@SUM(A1:A2)", "\t=1+1", "\r=1+1", '=HYPERLINK("http://evil.example","x")']


def test_a_cell_a_spreadsheet_would_run_as_a_formula_is_exported_as_text(tmp_path, store):
    for actor in FORMULAS:  # users who signed in with such names and acted
        record_action(store, actor, AuditAction.QUEUE_SETTINGS_CHANGED, {"guidelines": ["", actor]})
    env = {**os.environ, "PYTHONPATH": str(ROOT), "STUDIO_ACTOR": FORMULAS[-1]}  # a command the studio ran for one
    ran = subprocess.run([sys.executable, str(ROOT / "app.py"), "audit", "--db", str(store.path), "--out",
                          str(tmp_path / "audit.csv")], capture_output=True, text=True, env=env, timeout=120,
                         check=False)
    assert ran.returncode == 0, ran.stderr
    with open(tmp_path / "audit.csv", newline="") as f:
        rows = list(csv.reader(f))[1:]
    assert [row[1] for row in rows] == ["'" + actor for actor in reversed(FORMULAS)]  # text, not a formula
    assert all(cell[:1] not in ("=", "+", "-", "@", "\t", "\r") for row in rows for cell in row)
    assert [actor for actor, _, _ in trail(store)] == [*FORMULAS, FORMULAS[-1]]  # the trail itself is unchanged
