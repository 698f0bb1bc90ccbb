"""The Train tab's handlers, called directly with a Store (no server, no browser, no worker: `start_job` is replaced
by one that only writes the job row): starting from the API and the form, stopping and resuming through the
launcher, the job's status, admins only under --auth."""

import json
import os
import shutil
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import pytest

from app.auth import Users
from app.refusals import unchanged
from app.train import job_view, train_checks, train_form, train_tab
from app.train.train_checks import field_label
from labeling.queue.annotation import next_pair, submit_label
from storage import jobs as job_rows
from storage.policies import add_policy, latest_policy
from storage.rounds import add_round
from storage.types import JobStatus
from tests.helpers import workerless_studio
from trainers.jobs.launch_config import read_launch_config
from trainers.jobs.layer import JobKind
from trainers.loop.config import LoopConfig

ROOT = Path(__file__).resolve().parent.parent
USERS = Users({"alice": "a", "owner": "o"}, frozenset({"owner"}))
OWNER, ALICE = SimpleNamespace(username="owner"), SimpleNamespace(username="alice")
SMALL = {"rounds": 1, "prompts_per_round": 8, "policy_batch_size": 8, "labels_per_round": 8}


@pytest.fixture
def studio(store, monkeypatch):
    """A studio under --auth on a store with training prompts and the demo policy; jobs get no worker."""
    return workerless_studio(store, monkeypatch, USERS)


def test_start_loop_checks_the_settings_and_starts_a_job_for_admins_only(studio, store):
    with pytest.raises(gr.Error, match="only an admin"):
        train_tab.api_start_loop(studio, json.dumps(SMALL), ALICE)
    with pytest.raises(gr.Error, match="oracle 'os:system' names code to run, which only the command line may do"):
        train_tab.api_start_loop(studio, json.dumps({**SMALL, "oracle": "os:system"}), OWNER)
    with pytest.raises(gr.Error, match="prompts_per_round is 17 but only 16 training prompts can be used"):
        train_tab.api_start_loop(studio, json.dumps({**SMALL, "prompts_per_round": 17}), OWNER)
    assert job_rows.list_jobs(store) == []
    status = train_tab.api_start_loop(studio, json.dumps(SMALL), OWNER)
    [job] = job_rows.list_jobs(store)
    assert (status["job_id"], status["kind"], status["status"]) == (job.id, "loop", "queued")
    assert job.config["prompts_per_round"] == 8
    assert train_tab.api_job_status(studio, job.id, ALICE)["status"] == "queued"  # any signed-in user may look


def test_stop_goes_through_the_launcher_and_resume_continues(studio, store, monkeypatch):
    job_id = job_rows.create_job(store, "ppo", {})
    job_rows.claim_job(store, job_id, os.getpid())
    with pytest.raises(gr.Error, match="only an admin"):
        train_tab.api_stop_job(studio, job_id, ALICE)
    stopped = []

    def stop_job(store, job_id):
        stopped.append(job_id)
        return job_rows.get_job(store, job_id)

    monkeypatch.setattr(train_tab, "stop_job", stop_job)
    train_tab.on_stop(studio, OWNER)
    assert stopped == [job_id]  # the tab asks the launcher; it writes no cancel flag itself
    monkeypatch.undo()
    assert train_tab.api_stop_job(studio, job_id, OWNER)["status"] == "running"  # the worker ends it within a step
    assert job_rows.get_job(store, job_id).cancel_requested
    job_rows.finish_job(store, job_id, JobStatus.CANCELLED)
    with pytest.warns(UserWarning, match="no job is running"):  # a refusal: a message that goes away
        assert train_tab.on_stop(studio, OWNER) == unchanged(job_view.JobView)
    monkeypatch.setattr(train_tab, "resume_job", lambda store, job_id: job_rows.requeue_job(store, job_id))
    resumed = train_tab.on_resume(studio, OWNER)
    assert resumed.status.startswith(f"**Job {job_id}** (ppo) — **queued**") and resumed.timer.active


def test_the_app_writes_no_job_row_itself():
    """Jobs are started, stopped and resumed by trainers.jobs.launcher; the UI only reads their rows. (The commands
    that run a job in the terminal's own process, in app/commands/, claim it there as a worker does.)"""
    writes = ("request_cancel", "create_job", "requeue_job", "finish_job", "claim_job", "mark_interrupted")
    found = [(path.name, name) for path in sorted((ROOT / "app").rglob("*.py")) for name in writes
             if "commands" not in path.relative_to(ROOT / "app").parts
             if name in path.read_text()]
    assert found == []


def test_the_form_starts_each_kind_of_job_with_its_settings(studio, store):
    values = train_form.fill_preset("demo")
    assert values == [LoopConfig().setting(name) for name in train_form.FORM]
    values[train_form.FORM.index("rounds")] = 2.0  # a float, as gr.Number sends it
    values[train_form.FORM.index("labels_per_round")] = 8.0
    values[train_form.FORM.index("label_decay")] = 0.5
    values[train_form.FORM.index("reward_patience")] = 2.0
    values[train_form.FORM.index("reward_warm_start")] = True
    values[train_form.FORM.index("on_warning")] = "pause"
    settings = json.dumps({"prompts_per_round": 8, "policy_batch_size": 8})
    shown = train_tab.on_start(studio, "loop", OWNER, "demo", settings, *values)
    [job] = job_rows.list_jobs(store)
    assert job.kind == "loop" and shown.status.startswith(f"**Job {job.id}** (loop) — **queued**")
    assert (job.config["rounds"], job.config["labels_per_round"], job.config["prompts_per_round"]) == (2, 8, 8)
    assert isinstance(job.config["rounds"], int) and isinstance(job.config["reward_patience"], int)
    assert (job.config["label_decay"], job.config["reward_patience"], job.config["reward_warm_start"],
            job.config["on_warning"]) == (0.5, 2, True, "pause")
    assert shown.progress == '<progress max="1" value="0.000" style="width:100%"></progress>'
    with pytest.warns(UserWarning, match="only an admin"):
        train_tab.on_start(studio, JobKind.POLICY, ALICE, "demo", "{}", *values)
    values[train_form.FORM.index("label_decay")] = 0.0
    with pytest.warns(UserWarning, match=r"Label decay \(each later round × this\) must be above 0, got 0"):
        train_tab.on_start(studio, "loop", OWNER, "demo", "{}", *values)


def test_labels_come_from_people_by_default_once_a_person_has_labelled(studio, store, queue_pairs):
    def labels_from() -> str:
        return train_form.project_form(studio)[1 + train_form.FORM.index("annotator")]

    def label(annotator: str, choice: str) -> None:
        submit_label(store, annotator, next_pair(store, annotator).pair_id, choice, f"{annotator}-{choice}")

    queue_pairs([("p", "a", "b"), ("q", "c", "d"), ("r", "e", "f")])
    assert labels_from() == "oracle"  # a fresh store: the preset's oracle, to try the loop out
    label("oracle", "left")
    label("alice", "skip")
    assert labels_from() == "oracle"  # the oracle's labels and a skip are no person's labels
    assert train_form.people_default(studio, False) == (gr.skip(), False)
    label("alice", "right")
    assert labels_from() == "human"
    # a page open while alice labelled: the Train tab, opened again, turns to people once, then keeps the user's choice
    assert train_form.people_default(studio, False) == ("human", True)
    assert train_form.people_default(studio, True) == (gr.skip(), True)
    assert train_form.on_preset(studio, "real model (LoRA)")[train_form.FORM.index("annotator")] == "human"


def test_a_queued_job_says_its_worker_is_starting(studio, store):
    job_id = job_rows.create_job(store, "ppo", {})
    assert "queued** — starting the worker: loading torch" in train_tab.newest_job(studio).status  # why it waits
    job_rows.claim_job(store, job_id, os.getpid())
    assert "starting the worker" not in train_tab.newest_job(studio).status


def test_a_resumed_job_counts_only_its_running_time(studio, store):
    job_id = job_rows.create_job(store, "ppo", {})
    started = job_rows.claim_job(store, job_id, os.getpid()).started
    job_rows.finish_job(store, job_id, JobStatus.CANCELLED)
    ran = job_rows.get_job(store, job_id).finished - started
    time.sleep(1.0)  # the job stands stopped
    job_rows.requeue_job(store, job_id)
    job_rows.claim_job(store, job_id, os.getpid())
    job_rows.finish_job(store, job_id, JobStatus.CANCELLED)
    assert job_view.job_status_dict(studio, job_rows.get_job(store, job_id))["elapsed_s"] < ran + 0.5


@pytest.mark.parametrize(("field", "value", "message"), [
    ("rounds", None, "Rounds is required"),
    ("rounds", 0.0, "Rounds must be at least 1, got 0"),
    ("reward_lr", -1e-4, "Reward LR must be above 0, got -0.0001"),
    ("policy_lr", 0.0, "PPO LR must be above 0, got 0"),
    ("label_decay", 1.5, r"Label decay \(each later round × this\) must be at most 1, got 1.5"),
    ("selector", None, "Pair selector is required"),
    ("samples_per_prompt", 2.5, "K: samples per prompt must be a whole number, got 2.5"),
])
def test_each_field_is_checked_by_its_label_before_any_job_row(studio, store, field, value, message):
    values = train_form.fill_preset("demo")
    values[train_form.FORM.index(field)] = value
    with pytest.warns(UserWarning, match=f"^{message}$"):
        assert train_tab.on_start(studio, "loop", OWNER, "demo", "{}", *values) == unchanged(job_view.JobView)
    assert job_rows.list_jobs(store) == []


def test_answers_per_judgement_in_the_form_is_rank_k_pairs_or_a_ranking_and_7_is_refused_in_one_line(studio, store):
    values = train_form.fill_preset("demo")
    field = train_form.FORM.index("rank_k")
    assert field_label("rank_k", "ppo") == "Answers per judgement" and values[field] == 2
    values[train_form.FORM.index("labels_per_round")] = 8.0  # 8 prompts give 8 rankings of their 4 samples
    settings = json.dumps({"prompts_per_round": 8, "policy_batch_size": 8})
    assert train_checks.config_from_form({"demo": LoopConfig()}, "demo", settings, *values).rank_k == 2  # pairs
    values[field] = 4.0  # as gr.Number sends it
    train_tab.on_start(studio, "loop", OWNER, "demo", settings, *values)
    [job] = job_rows.list_jobs(store)
    assert job.config["rank_k"] == 4  # rankings of 4 answers
    values[field] = 7.0
    with pytest.warns(UserWarning, match="^Answers per judgement must be at most 6, got 7$"):
        assert train_tab.on_start(studio, "loop", OWNER, "demo", "{}", *values) == unchanged(job_view.JobView)
    values[field] = 5.0  # more than K (samples per prompt): the settings' own check, in the form's words
    with pytest.warns(UserWarning, match='^"Answers per judgement" must be 2 \\(pairs\\) to 6 and at most '
                                         '"K: samples per prompt" \\(4\\), got 5$'):
        train_tab.on_start(studio, "loop", OWNER, "demo", "{}", *values)
    assert job_rows.list_jobs(store) == [job]


def test_a_settings_check_across_fields_names_the_fields_by_their_labels(studio, store):
    values = train_form.fill_preset("demo")
    values[train_form.FORM.index("labels_per_round")] = 10_000.0
    with pytest.warns(UserWarning, match='^"N: labels in round 1 \\(then × label_decay\\)" is 10000 but a round '):
        train_tab.on_start(studio, "loop", OWNER, "demo", "{}", *values)
    assert job_rows.list_jobs(store) == []


def test_the_buttons_follow_the_newest_job(studio, store):
    def enabled(view) -> list[bool]:
        return [button["interactive"] for button in (view.start_loop, view.train_reward, view.run_policy, view.run_sft,
                                                      view.stop, view.resume)]

    assert enabled(train_tab.newest_job(studio)) == [True, True, True, True, False, False]  # nothing to stop or resume
    job_id = job_rows.create_job(store, "loop", {})
    job_rows.claim_job(store, job_id, os.getpid())
    assert enabled(train_tab.newest_job(studio)) == [False, False, False, False, True, False]  # one runs: Stop only
    job_rows.finish_job(store, job_id, JobStatus.CANCELLED)
    assert enabled(train_tab.newest_job(studio)) == [True, True, True, True, False, True]  # stopped early: Resume too
    job_rows.requeue_job(store, job_id)
    job_rows.claim_job(store, job_id, os.getpid())
    job_rows.finish_job(store, job_id, JobStatus.COMPLETED)
    assert enabled(train_tab.newest_job(studio)) == [True, True, True, True, False, False]


def test_a_label_budget_in_the_form_sets_n_and_the_form_says_what_each_round_collects(studio, store):
    values = train_form.fill_preset("demo")
    assert values[train_form.FORM.index("label_budget")] is None
    values[train_form.FORM.index("label_budget")] = 40.0
    train_tab.on_start(studio, "loop", OWNER, "demo", json.dumps({"prompts_per_round": 8, "policy_batch_size": 8}),
                       *values)
    [job] = job_rows.list_jobs(store)
    # 28 + 8 + 3 = 39 labels: the N field gave way
    assert (job.config["label_budget"], job.config["labels_per_round"]) == (40, 28)
    assert train_form.schedule_text(3, 100, None, 0.3) == \
        "**Labels:** 100 + 30 + 9 = 139 labels over 3 rounds (N = 100; check pairs included)."
    assert train_form.schedule_text(3, 100, 150, 0.3) == \
        "**Labels:** 108 + 32 + 10 = 150 labels over 3 rounds (N = 108 from the budget B = 150; check pairs included)."
    assert train_form.schedule_text(3, None, None, 0.3).startswith("**Labels:** set the rounds, N (or B)")
    assert train_form.schedule_text(3, 100, None, 0).startswith("**Labels:** set the rounds")


def test_the_newest_job_is_shown(studio, store):
    empty = train_tab.newest_job(studio)
    assert (empty.status, empty.logs, empty.timer.active) == ("No job yet.", "", False)
    job_id = job_rows.create_job(store, "loop", {})
    job_rows.claim_job(store, job_id, os.getpid())
    job_rows.heartbeat(store, job_id, phase="round 1/2: <sampling>", progress=0.25)
    job_rows.add_log(store, job_id, "hello from the worker")
    shown = train_tab.newest_job(studio)
    assert shown.status.startswith(f"**Job {job_id}** (loop) — **running** — round 1/2: &lt;sampling&gt; — ")
    assert 'value="0.250"' in shown.progress and shown.logs == "hello from the worker" and shown.timer.active
    job_rows.finish_job(store, job_id, JobStatus.FAILED, "Traceback ...\nValueError: bad <thing>")
    failed = train_tab.newest_job(studio)
    assert failed.status.endswith("❌ ValueError: bad &lt;thing&gt;") and not failed.timer.active


def test_the_job_buttons_are_named_outputs(studio):
    with gr.Blocks():
        ui = train_tab.layout()
    assert job_view.JobView.components(ui) == [ui.status, ui.progress, ui.logs, ui.timer, ui.start_loop,
                                                ui.train_reward, ui.run_policy, ui.run_sft, ui.stop, ui.resume,
                                                ui.to_leaderboard]
    assert [c.label for c in ui.form] == [field_label(name, "ppo") for name in train_form.FORM]  # one set of labels
    assert [c.label for c in ui.form] == ["Rounds", "K: samples per prompt",
                                         "N: labels in round 1 (then × label_decay)",
                                         "B: labels of all rounds (blank: from N)", "M: PPO iterations",
                                         "Pair selector", "Reward ensemble size",
                                         "β: KL coefficient", "Reward LR", "PPO LR", "Reward epochs", "Labels from",
                                         "Policy optimiser", "G: GRPO responses per prompt",
                                         "DPO β (its KL to the SFT policy)", "Label decay (each later round × this)",
                                         "Check-pair share of labels",
                                         "Reward early-stop patience (0: off)", "Warm-start the reward model",
                                         "On a failure warning",
                                         "SFT first: fine-tune on the demonstrations before round 1",
                                         "Answers per judgement"]
    assert ui.run_policy.value == "Run PPO now"
    button, iterations, lr = train_form.on_algorithm("grpo")  # the labels follow the chosen optimiser
    assert (button.value, iterations.label, lr.label) == ("Run GRPO now", "M: GRPO iterations", "GRPO LR")


def test_dpo_chosen_in_the_form_runs_in_the_loop_and_as_a_dpo_job_in_run_now(studio, store):
    values = train_form.fill_preset("demo")
    values[train_form.FORM.index("algorithm")] = "dpo"
    values[train_form.FORM.index("dpo_beta")] = 0.2
    small = json.dumps({"prompts_per_round": 8, "policy_batch_size": 8, "labels_per_round": 8})
    loop = train_tab.on_start(studio, "loop", OWNER, "demo", small, *values)
    job = job_rows.list_jobs(store)[0]
    assert (job.config["algorithm"], job.config["dpo_beta"]) == ("dpo", 0.2)
    assert loop.status.startswith(f"**Job {job.id}** (dpo loop) — **queued**")
    job_rows.finish_job(store, job.id, JobStatus.CANCELLED)
    run_now = train_tab.on_start(studio, JobKind.POLICY, OWNER, "demo", small, *values)  # the "Run DPO now" button
    job = job_rows.list_jobs(store)[0]
    assert job.kind == "dpo" and job.config["settings"]["dpo_beta"] == 0.2
    assert run_now.status.startswith(f"**Job {job.id}** (dpo) — **queued**")
    job_rows.finish_job(store, job.id, JobStatus.CANCELLED)
    button, iterations, lr = train_form.on_algorithm("dpo")
    assert (button.value, lr.label) == ("Run DPO now", "DPO LR") and "DPO runs epochs" in iterations.label
    values[train_form.FORM.index("dpo_beta")] = 0.0
    with pytest.warns(UserWarning, match="DPO β .its KL to the SFT policy. must be above 0, got 0"):
        train_tab.on_start(studio, "loop", OWNER, "demo", small, *values)
    api = train_tab.api_start_loop(studio, json.dumps({**SMALL, "algorithm": "dpo", "dpo_loss_type": "ipo"}), OWNER)
    assert job_rows.get_job(store, api["job_id"]).config["dpo_loss_type"] == "ipo"


def test_grpo_chosen_in_the_form_runs_in_the_loop_and_in_run_now(studio, store):
    values = train_form.fill_preset("demo")
    values[train_form.FORM.index("algorithm")] = "grpo"
    values[train_form.FORM.index("group_size")] = 6.0
    small = json.dumps({"prompts_per_round": 8, "policy_batch_size": 8, "labels_per_round": 8})
    loop = train_tab.on_start(studio, "loop", OWNER, "demo", small, *values)
    job = job_rows.list_jobs(store)[0]
    assert (job.config["algorithm"], job.config["group_size"]) == ("grpo", 6)
    assert loop.status.startswith(f"**Job {job.id}** (grpo loop) — **queued**")
    job_rows.finish_job(store, job.id, JobStatus.CANCELLED)
    run_now = train_tab.on_start(studio, JobKind.POLICY, OWNER, "demo", small, *values)
    job = job_rows.list_jobs(store)[0]
    settings = job.config["settings"]
    assert job.kind == "policy" and (settings["algorithm"], settings["group_size"]) == ("grpo", 6)
    assert run_now.status.startswith(f"**Job {job.id}** (grpo) — **queued**")
    job_rows.finish_job(store, job.id, JobStatus.CANCELLED)
    values[train_form.FORM.index("group_size")] = 1.0
    with pytest.warns(UserWarning, match="G: GRPO responses per prompt must be at least 2, got 1"):
        train_tab.on_start(studio, "loop", OWNER, "demo", small, *values)



def test_the_tab_shows_the_token_limits_and_how_many_prompts_and_labels_the_loop_leaves_out(demo_store):
    from app.context import Studio
    from app.train.train_form import loop_schedule, show_limits
    from storage.preferences import Preference, import_preferences
    from storage.prompts import PromptSelection, add_prompts, set_excluded

    studio = Studio(demo_store)
    shown = show_limits(studio, "demo", "{}")
    assert shown == ("**Limits:** policy context 64 tokens: responses up to 24, prompts up to 40; training prompts: "
                     "100 of 100 used; held-out prompts: 20 of 20 used; labels: the loop collects 139 (100 + 30 + 9 "
                     "over 3 rounds); the store has none yet.")
    assert "responses up to 60, prompts up to 4; training prompts: 69 of 100 used; 31 too long for 4 tokens (prompts " \
           in show_limits(studio, "demo", '{"response_length": 60}')  # the demo's prompts of 5 tokens or more
    assert "fix the advanced settings" in show_limits(studio, "demo", "{not json")
    [long_id] = add_prompts(demo_store, ["the movie was " * 15]).ids  # an imported long dialogue, say
    set_excluded(demo_store, PromptSelection(ids=(1, 2)))
    import_preferences(demo_store, [Preference("the film was", " great" * 70, " bad ."),
                                    Preference("the plot was", " fine .", " dull .")], "import", 0.0)
    shown = show_limits(studio, "demo", "{}")
    assert f"training prompts: 98 of 101 used; 1 too long for 40 tokens (prompts {long_id}); 2 excluded" in shown
    assert shown.endswith("; labels: the loop collects 139 (100 + 30 + 9 over 3 rounds) on top of the 2 in the store: "
                          "141 by its last round; labels in the store: 1 of 2 train the reward model; 1 too long for "
                          "its context of 64 (labels 1).")
    # the form's counts: 2 rounds of 100 (decay 1), or a budget B of 60 over 3 rounds; the advanced JSON on top
    assert "the loop collects 200 (100 + 100 over 2 rounds) on top of the 2 in the store: 202 by its last round" \
        in show_limits(studio, "demo", "{}", 2, 100, None, 1.0)
    assert "the loop collects 60 (20 + 20 + 20 over 3 rounds)" in show_limits(studio, "demo", "{}", 3, 100, 60, 1.0)
    assert "the loop collects 10 (10 over 1 round)" in show_limits(studio, "demo", '{"labels_per_round": 10}', 1, 100,
                                                                   None, 1.0)
    functions = '{"reward": "functions", "reward_functions": [{"name": "length", "weight": 1.0}]}'
    assert loop_schedule(LoopConfig(), functions, ()) == []  # a reward of the functions alone collects no labels
    assert shown.split("; labels: ")[0] + "; labels in the store: 1 of 2" in show_limits(studio, "demo", functions)
    unset = show_limits(studio, "demo", "{}", None, 100, None, 0.3)  # Rounds blank: the store's labels, so named
    assert "labels in the store: 1 of 2 train" in unset and "the loop collects" not in unset


def test_the_tab_and_the_job_status_say_how_jobs_run(studio, store, monkeypatch):
    assert train_tab.new_jobs_run_on(studio) == "1 process (the job's worker)"
    missing = ROOT / "accelerate" / "missing.yaml"
    shown = train_tab.new_jobs_run_on(replace(studio, accelerate_config=str(missing)))
    assert shown.startswith(f"no processes until the accelerate config is fixed (accelerate config {missing} does not "
                            "exist")
    studio = replace(studio, accelerate_config=str(ROOT / "accelerate" / "cpu-2proc.yaml"))
    two = "2 processes on 1 machine (CPU), mixed precision no, DeepSpeed off"
    assert train_tab.new_jobs_run_on(studio).startswith(two)
    started = []

    def start_job(store, kind, config, accelerate_config):  # as the launcher records it, without a worker
        started.append(accelerate_config)
        return job_rows.create_job(store, kind, config, read_launch_config(accelerate_config).to_dict())

    monkeypatch.setattr(train_tab, "start_job", start_job)
    status = train_tab.api_start_loop(studio, json.dumps(SMALL), OWNER)
    assert started == [studio.accelerate_config]
    assert status["runs_on"] == f"{two}, accelerate config {studio.accelerate_config}"
    job_id = status["job_id"]
    assert train_tab.api_job_status(studio, job_id, OWNER)["runs_on"] == status["runs_on"]
    assert train_tab.api_job_status(studio, job_id, ALICE)["runs_on"] == two  # no path on the machine for annotators
    assert f"Trains on {two}" in train_tab.newest_job(studio).status
    with gr.Blocks() as blocks:
        train_tab.layout(train_tab.new_jobs_run_on(studio))
    [intro] = [b for b in blocks.blocks.values() if getattr(b, "elem_id", None) == "train-runs-on"]
    assert f"Training phases run on {two}" in intro.value


def test_the_limits_render_each_template_and_prompt_set_once_and_a_hostile_template_is_one_line(
        store, tmp_path, tiny_qwen_dir, monkeypatch):
    from app.context import Studio
    from storage.policies import add_policy
    from storage.prompts import PromptSelection, add_prompts, set_excluded
    from trainers.models.chat_format import PromptBudget

    folder = tmp_path / "qwen"
    shutil.copytree(tiny_qwen_dir, folder)
    add_policy(store, str(folder))
    add_prompts(store, [f"prompt {i}" for i in range(50)])
    rendered = []
    counts = PromptBudget.counts
    monkeypatch.setattr(PromptBudget, "counts", lambda budget, prompts: rendered.append(len(prompts)) or
                        counts(budget, prompts))
    studio = Studio(store)
    first = train_form.show_limits(studio)
    assert "prompts up to" in first and train_form.show_limits(studio) == first  # opening the tab again...
    assert rendered == [50]  # ...rendered nothing again
    add_prompts(store, ["one more prompt, the longest of them all"])
    assert "training prompts: 51 of 51 used" in train_form.show_limits(studio)
    assert rendered == [50, 51]  # a new prompt set: rendered again
    set_excluded(store, PromptSelection(ids=(51,)))
    assert "training prompts: 50 of 51 used; 1 excluded" in train_form.show_limits(studio)
    assert rendered == [50, 51, 50]  # an exclusion: counted again
    (folder / "chat_template.jinja").write_text(
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}")
    started = time.monotonic()
    shown = train_form.show_limits(studio)
    assert time.monotonic() - started < 10 and "\n" not in shown
    assert shown.startswith("**Limits:** the model's chat template was stopped: it ")  # too many steps, or too long
    assert train_form.show_limits(studio) == shown and rendered == [50, 51, 50, 50]  # the template changed: once


def test_a_jobs_error_shows_as_text_never_as_an_image_or_html(studio, store):
    job_id = job_rows.create_job(store, "loop", {})
    job_rows.finish_job(store, job_id, JobStatus.FAILED, error="InvalidInput: the template said "
                        "![seen](http://tracker.example/t.png) <img src=http://tracker.example/u.png>")
    status = train_tab.newest_job(studio).status
    assert "![seen](" not in status and "<img" not in status
    assert "\\!\\[seen\\](http://tracker.example/t.png) &lt;img src=http://tracker.example/u.png&gt;" in status


def test_reward_functions_from_the_form_and_module_functions_refused_from_the_browser_and_the_api(studio, store,
                                                                                                    caplog):
    from app.train.reward_form import BUILTIN_NAMES, reward_settings_json

    weights = [1.0 if name == "math_answer" else 0.5 if name == "length" else 0.0 for name in BUILTIN_NAMES]
    advanced = reward_settings_json('{"seed": 3}', "rm+functions", 0.5, 64, "", *weights)
    assert json.loads(advanced) == {"seed": 3, "reward": "rm+functions", "rm_weight": 0.5, "reward_functions": [
        {"name": "math_answer", "weight": 1.0}, {"name": "length", "weight": 0.5, "target": 64, "unit": "tokens"}]}
    custom = {"reward": "functions", "reward_functions": [{"name": "os:system", "weight": 1.0}]}
    with pytest.raises(gr.Error, match="'os:system' names code to run, which only the command line may do"):
        train_tab.api_start_loop(studio, json.dumps({**SMALL, **custom}), OWNER)
    train_tab.on_start(studio, "loop", OWNER, "demo", json.dumps(custom), *train_form.fill_preset("demo"))
    assert any("'os:system' names code to run" in r.getMessage() for r in caplog.records)  # the Train tab refuses
    assert job_rows.list_jobs(store) == []
    functions = reward_settings_json("{}", "functions", 1.0, 200, "", *weights)
    train_tab.api_start_loop(studio, json.dumps({**SMALL, **json.loads(functions)}), OWNER)
    [job] = job_rows.list_jobs(store)
    assert job.config["reward"] == "functions" and job.config["reward_functions"][0]["name"] == "math_answer"


def test_the_status_says_percent_elapsed_and_time_left_and_a_finished_loop_shows_its_result(studio, store):
    assert job_view.time_line(80, 0.4, True, 120) == "40% · 1 min 20 s elapsed, about 2 min 00 s left"
    assert job_view.time_line(5, 0.01, True, None) == "1% · 5 s elapsed, estimating the time left…"  # too early
    assert job_view.time_line(4000, 1.0, active=False) == "100% · 1 h 06 min elapsed"
    assert job_view.time_line(3, None, active=True) == "3 s elapsed"
    job_id = job_rows.create_job(store, "loop", {"rounds": 2})
    job_rows.claim_job(store, job_id, os.getpid())
    job_rows.heartbeat(store, job_id, phase="round 1/2: training the reward model", progress=0.15)
    assert "15% · " in train_tab.newest_job(studio).status  # round 1's reward phase says nothing of the rest
    assert train_tab.newest_job(studio).status.count("estimating the time left…") == 1
    job_rows.heartbeat(store, job_id, phase="round 1/2: PPO iteration 1/10", progress=0.3)
    assert " left" in train_tab.newest_job(studio).status and "estimating" not in train_tab.newest_job(studio).status
    job_rows.heartbeat(store, job_id, phase="round 2/2: waiting for labels (0/150)", progress=0.6)
    assert "60% · " in train_tab.newest_job(studio).status and " left" not in train_tab.newest_job(studio).status
    job_rows.heartbeat(store, job_id, phase="round 1/1: judging policy v1 against the SFT policy", progress=0.99)
    policy_id = add_policy(store, "/models/v1", parent_id=latest_policy(store).id, round=1)
    add_round(store, job_id, 1, {}, {"labels": 8}, policy_id, None)
    running = train_tab.newest_job(studio)
    assert "judging policy v1" in running.status and running.to_leaderboard == gr.update(visible=False)
    job_rows.finish_job(store, job_id, JobStatus.COMPLETED)
    done = train_tab.newest_job(studio)
    assert "judging" not in done.status
    assert f"**Result:** job {job_id} (loop) completed: made v1 in 1 round" in done.status
    assert done.to_leaderboard == gr.update(visible=True)  # the card's link to the Leaderboard tab


def test_a_result_card_says_what_its_oracle_score_and_win_rate_mean(store):
    from app.context import Studio
    from tests.helpers import fill_synthetic_run

    fill_synthetic_run(store, rounds=2, reward_steps=2, policy_iterations=2)
    card = train_tab.newest_job(Studio(store)).status
    assert "oracle score" in card and "vs SFT" in card
    assert "*Oracle score*: the demo's synthetic scorer's mean score" in card
    assert "*vs SFT*: the share of blind pairs" in card


def test_the_limits_are_shown_again_when_the_poll_sees_the_job_end(demo_store):
    import os

    import gradio as gr

    from app.context import Studio
    from app.train.train_form import limits_once_idle, show_limits
    from storage import JobStatus
    from storage import jobs as job_rows
    from storage.preferences import Preference, import_preferences

    studio = Studio(demo_store)
    job = job_rows.create_job(demo_store, "loop", {})
    job_rows.claim_job(demo_store, job, os.getpid())
    assert limits_once_idle(studio, "demo", "{}") == gr.skip()  # while it runs, the line the tab showed stays
    import_preferences(demo_store, [Preference("the plot was", " fine .", " dull .")], "import", 0.0)  # its labels
    job_rows.finish_job(demo_store, job, JobStatus.COMPLETED)
    shown = limits_once_idle(studio, "demo", "{}")
    assert shown == show_limits(studio, "demo", "{}") and "on top of the 1 in the store" in shown
