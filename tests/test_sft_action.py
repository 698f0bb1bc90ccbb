"""The Train tab's **Run SFT** and the API's `/start_sft`, called directly with a Store (no server, no worker:
`start_job` only writes the job row): admins only, refusals in one line before any job row (no demonstrations, bad
settings, no such policy or author), an `sft` job whose config the worker's runner reads back and runs to a new root,
shown as other jobs; the form's SFT first."""

import json
from types import SimpleNamespace

import gradio as gr
import pytest

from app.auth import Users
from app.context import Studio
from app.train import sft_action, train_form, train_tab
from storage import jobs as job_rows
from storage.audit import list_actions
from storage.demonstrations import NewDemonstration, add_demonstration
from storage.policies import add_policy, latest_policy
from storage.prompts import list_prompts
from tests.helpers import workerless_studio
from trainers.policy.sft_config import SFTRun

USERS = Users({"alice": "a", "owner": "o"}, frozenset({"owner"}))
OWNER, ALICE = SimpleNamespace(username="owner"), SimpleNamespace(username="alice")


@pytest.fixture
def studio(store, monkeypatch):
    """A studio under --auth with training prompts and the demo policy; jobs get no worker."""
    studio = workerless_studio(store, monkeypatch, USERS)
    monkeypatch.setattr(sft_action, "start_job",
                        lambda store, kind, config, accelerate_config: job_rows.create_job(store, kind, config))
    return studio


def write_demonstrations(store, n: int = 4, author: str = "alice") -> None:
    for prompt in list_prompts(store)[:n]:
        add_demonstration(store, NewDemonstration(prompt.id, "A warm, well-paced film.", author, "written"))


def test_the_api_starts_an_sft_job_for_admins_only_with_the_settings_on_the_projects_preset(studio, store):
    write_demonstrations(store)
    with pytest.raises(gr.Error, match="only an admin"):
        sft_action.api_start_sft(studio, "{}", ALICE)
    assert job_rows.list_jobs(store) == []
    status = sft_action.api_start_sft(studio, json.dumps({"epochs": 2, "source": "alice", "batch_size": 4}), OWNER)
    [job] = job_rows.list_jobs(store)
    assert (status["job_id"], status["kind"], status["status"]) == (job.id, "sft", "queued")
    run = SFTRun.from_dict(job.config)  # as the worker's runner reads it
    assert (run.policy_id, run.source, run.as_root) == (latest_policy(store).id, "alice", True)  # the version fixed
    assert run.config.epochs == 2 and run.config.batch_size == 4
    assert run.config.learning_rate == 1e-3 and run.config.lora is False  # the demo preset's SFT settings
    [entry] = [e for e in list_actions(store) if e.action == "job_started"]
    assert entry.actor == "owner" and entry.detail["kind"] == "sft"


def test_the_api_names_the_version_to_fine_tune_as_vk(studio, store):
    write_demonstrations(store)
    first = latest_policy(store)
    add_policy(store, first.path, parent_id=first.id, round=1)
    status = sft_action.api_start_sft(studio, json.dumps({"version": "v0", "source": "alice"}), OWNER)
    assert SFTRun.from_dict(job_rows.get_job(store, status["job_id"]).config).policy_id == first.id


@pytest.mark.parametrize(("settings", "message"), [
    ({}, "the store has no demonstrations; write some in the Label tab (W) or import them"),
    ({"epochs": 0}, "epochs must be a positive number, got 0"),
    ({"epochs": "two"}, "the SFT setting epochs must be a number, got 'two'"),
    ({"batch_size": 2.5}, "the SFT setting batch_size must be a whole number, got 2.5"),
    ({"lora_target_modules": "q_proj"}, "lora_target_modules must be a list of module names or null, got 'q_proj'"),
    ({"lora": 1}, "the SFT setting lora must be true or false, got 1"),
    ({"heldout_share": 1.0}, "heldout_share must be in [0, 1)"),
    ({"epoch": 2}, "unknown SFT setting 'epoch'"),
    ({"source": "nobody"}, "no demonstrations by 'nobody'; the store's come from: alice"),
    ({"policy_id": 9}, "policy version 9 does not exist"),
    ({"policy_id": "newest"}, "policy_id must be a policy version's id (a whole number), got 'newest'"),
    ({"version": "v9"}, "version 'v9' is not one of this store's (v0 to v0); name one as vK, e.g. \"v0\""),
])
def test_each_refusal_is_one_line_before_any_job_row(studio, store, settings, message):
    if settings:  # the first case: none written
        write_demonstrations(store)
    with pytest.raises(gr.Error) as refused:
        sft_action.api_start_sft(studio, json.dumps(settings), OWNER)
    text = str(refused.value.message)
    assert message in text.replace("&#x27;", "'") and "\n" not in text
    assert job_rows.list_jobs(store) == []


def test_run_sft_in_the_tab_takes_the_forms_sft_settings_and_shows_the_job(studio, store):
    values = train_form.fill_preset("demo")
    with pytest.warns(UserWarning, match="the store has no demonstrations"):
        sft_action.on_start_sft(studio, OWNER, "demo", "{}", *values)
    assert job_rows.list_jobs(store) == []
    write_demonstrations(store)
    with pytest.warns(UserWarning, match="only an admin"):
        sft_action.on_start_sft(studio, ALICE, "demo", "{}", *values)
    with pytest.warns(UserWarning, match="sft_epochs must be"):
        sft_action.on_start_sft(studio, OWNER, "demo", '{"sft_epochs": 0}', *values)
    assert job_rows.list_jobs(store) == []
    shown = sft_action.on_start_sft(studio, OWNER, "demo", '{"sft_epochs": 2, "seed": 3}', *values)
    [job] = job_rows.list_jobs(store)
    assert job.kind == "sft" and shown.status.startswith(f"**Job {job.id}** (sft) — **queued**")
    assert shown.progress == '<progress max="1" value="0.000" style="width:100%"></progress>' and shown.timer.active
    assert [b["interactive"] for b in (shown.start_loop, shown.run_sft, shown.stop)] == [False, False, True]
    settings = SFTRun.from_dict(job.config).settings
    assert (settings["epochs"], settings["learning_rate"], settings["lora"]) == (2.0, 1e-3, False)
    assert SFTRun.from_dict(job.config).as_root
    assert train_tab.newest_job(studio).status == shown.status  # the live refresh shows it as any job


def test_sft_first_in_the_form_starts_a_loop_that_fine_tunes_first_and_needs_demonstrations(studio, store):
    values = train_form.fill_preset("demo")
    assert values[train_form.FORM.index("sft_first")] is False  # off unless asked
    values[train_form.FORM.index("sft_first")] = True
    small = json.dumps({"prompts_per_round": 8, "policy_batch_size": 8, "labels_per_round": 8})
    with pytest.warns(UserWarning, match="sft_first needs demonstrations, and the store has none"):
        train_tab.on_start(studio, "loop", OWNER, "demo", small, *values)
    assert job_rows.list_jobs(store) == []
    write_demonstrations(store)
    train_tab.on_start(studio, "loop", OWNER, "demo", small, *values)
    [job] = job_rows.list_jobs(store)
    assert job.kind == "loop" and job.config["sft_first"] is True


@pytest.mark.usefixtures("one_thread")
def test_the_job_the_api_starts_is_run_by_the_workers_sft_runner_to_a_new_root(seeded_store, monkeypatch):
    from storage.policies import list_policies, root_policy
    from trainers.entry.worker import run_job

    monkeypatch.setattr(sft_action, "start_job",
                        lambda store, kind, config, accelerate_config: job_rows.create_job(store, kind, config))
    write_demonstrations(seeded_store, n=4)
    status = sft_action.api_start_sft(Studio(seeded_store), json.dumps({"epochs": 1, "batch_size": 2}), OWNER)
    job = job_rows.claim_job(seeded_store, status["job_id"], 1)
    assert run_job(seeded_store, job).value == "completed"
    base, sft = list_policies(seeded_store)
    assert root_policy(seeded_store, sft).id == sft.id and sft.id != base.id  # a new root: the reference now
    assert job_rows.get_job(seeded_store, job.id).progress == 1.0
