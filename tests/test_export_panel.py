"""The Leaderboard's **Take a version out** panel and `/start_export`, called directly with a Store (no server:
`start_job` only writes the job row): admins only, an unknown version or GGUF type refused in one line before any job
row, an `export` job the worker's runner takes to a folder under the data folder's `exports/`, shown as the newest
export."""

from types import SimpleNamespace

import gradio as gr
import pytest

from app.auth import Users
from app.context import Studio
from app.versions import export_panel
from storage import jobs as job_rows
from storage.audit import list_actions
from tests.helpers import workerless_studio
from trainers.entry.worker import run_job

USERS = Users({"alice": "a", "owner": "o"}, frozenset({"owner"}))
OWNER, ALICE = SimpleNamespace(username="owner"), SimpleNamespace(username="alice")


@pytest.fixture
def studio(store, monkeypatch) -> Studio:
    studio = workerless_studio(store, monkeypatch, USERS)
    monkeypatch.setattr(export_panel, "start_job", lambda store, kind, config: job_rows.create_job(store, kind, config))
    return studio


def test_an_admin_exports_a_version_as_a_job_the_worker_takes_out(studio, store):
    assert export_panel.version_choices(studio) == ["v0"]
    assert export_panel.newest_export(studio, OWNER) == "No export yet."
    line = export_panel.start_export(studio, "v0", "q8_0", OWNER)
    job = job_rows.list_jobs(store)[0]
    assert line == f"export job {job.id} started: v0 with a q8_0 GGUF"
    assert (job.kind, job.config) == ("export", {"version": "v0", "quant": "q8_0"})
    assert list_actions(store)[0].detail["job_id"] == job.id
    assert run_job(store, job_rows.claim_job(store, job.id, 1)).value == "completed"
    (out,) = (store.data_dir / "exports").iterdir()
    assert out.name.startswith("v0-") and {"README.md", "model.safetensors"} <= {f.name for f in out.iterdir()}
    assert {f.name for f in (out / "gguf").iterdir()} == {"v0-q8_0.gguf", "Modelfile"}
    assert export_panel.newest_export(studio, ALICE) == f"export job {job.id} completed (admins see its folder)"
    shown = export_panel.newest_export(studio, OWNER)
    assert shown.startswith(f"export job {job.id} completed: exported v0 (SFT) to {out}") and "v0-q8_0.gguf" in shown


@pytest.mark.parametrize(("user", "version", "quant", "message"), [
    (ALICE, "v0", "f16", "only an admin"),
    (OWNER, "v7", "f16", "no version 'v7'"),
    (OWNER, "v0", "q4_k", "GGUF 'q4_k' is not one of"),
])
def test_refusals_are_one_line_before_any_job_row(studio, store, user, version, quant, message):
    with pytest.raises(gr.Error, match=message) as refused:
        export_panel.start_export(studio, version, quant, user)
    assert "\n" not in str(refused.value)
    assert job_rows.list_jobs(store) == []
