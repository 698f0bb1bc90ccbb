"""The Curves tab (app/curves/curves_tab.py): round tagging of metric series, warnings, exports, the handlers that fill
the tab (called directly, and on every opening of a tab), and the /metrics API via gradio_client. The Samples tab's
tests are in test_samples_tab.py.

`tests.helpers.fill_synthetic_run` writes what a finished loop leaves in a store (metrics, reward models, policies,
rounds, held-out samples) through storage functions only; the browser test uses it too.
"""

import csv
import os

import pytest

from storage import jobs as job_rows
from storage.curves import metric_series
from storage.metrics import log_metrics
from storage.types import JobStatus
from tests.helpers import fill_synthetic_run


@pytest.fixture
def run(store):
    return fill_synthetic_run(store)


def test_points_are_tagged_with_their_round(store):
    run = fill_synthetic_run(store, rounds=2, reward_steps=8, policy_iterations=5, in_progress=True)
    reward = metric_series(store, run["job_id"], prefix="reward/")
    assert set(reward) == {"reward/loss", "reward/accuracy", "reward/val_loss", "reward/val_accuracy"}
    loss = reward["reward/loss"]
    assert loss.steps == list(range(1, 21))  # 8 + 8 steps of two rounds, then 4 of the running round
    assert loss.rounds == [1] * 8 + [2] * 8 + [None] * 4
    kl = metric_series(store, run["job_id"], names=["ppo/kl"])["ppo/kl"]
    assert kl.steps == list(range(1, 11)) and kl.rounds == [1] * 5 + [2] * 5
    assert set(metric_series(store, run["job_id"], prefix="round/")) == {
        "round/labels", "round/reward_val_accuracy", "round/score", "round/kl", "round/oracle_score",
        "round/check_agreement"}
    assert metric_series(store, run["job_id"] + 1, prefix="ppo/") == {}


def test_prefix_is_a_prefix_not_a_pattern(store):
    job_id = job_rows.create_job(store, "ppo", {})
    log_metrics(store, job_id, 1, {"ppo/kl": 1.0, "ppo_x": 2.0, "ppo0": 3.0, "pp": 4.0, "ppo/z/y": 5.0})
    assert sorted(metric_series(store, job_id, prefix="ppo/")) == ["ppo/kl", "ppo/z/y"]


def test_points_in_no_finished_round_are_named_by_the_job_state(store):
    from app.context import Studio
    from app.curves.curves_tab import IN_PROGRESS, load_curves

    run = fill_synthetic_run(store, rounds=1, reward_steps=4, policy_iterations=3, in_progress=True)
    curves = load_curves(Studio(store), run["job_id"])
    assert [s.label for s in curves.reward["reward/loss"]] == ["round 1", "in progress"]
    assert curves.round_choices()[-1] == ("In progress", IN_PROGRESS)
    job_rows.request_cancel(store, run["job_id"])
    job_rows.finish_job(store, run["job_id"], JobStatus.CANCELLED)
    assert load_curves(Studio(store), run["job_id"]).reward["reward/loss"][-1].label == "unfinished round"
    ppo_job = job_rows.create_job(store, "ppo", {})
    log_metrics(store, ppo_job, 1, {"ppo/kl": 0.1})
    job_rows.finish_job(store, ppo_job, JobStatus.COMPLETED)
    assert [s.label for s in load_curves(Studio(store), ppo_job).optimiser["ppo/kl"]] == ["this job"]


def test_steps_count_from_the_start_of_each_round(store, run):
    from app.curves.charts import align_rounds, segments
    from storage.curves import Series

    loss = metric_series(store, run["job_id"], names=["reward/loss"])["reward/loss"]
    segs = align_rounds({"reward/loss": segments(loss)})["reward/loss"]
    assert [s.round for s in segs] == [1, 2, 3] and [s.offset for s in segs] == [0, 12, 24]
    assert all((s.steps - s.offset).tolist() == list(range(1, 13)) for s in segs)
    # round 1 logged only validation metrics (steps 6 and 12), round 2 also its loss (steps 13..24): loss in round 2
    # still counts from the end of round 1, 12
    val = Series("reward/val_loss", [6, 12, 18, 24], [0.7, 0.6, 0.7, 0.6], [1, 1, 2, 2])
    train = Series("reward/loss", list(range(13, 25)), [0.5] * 12, [2] * 12)
    aligned = align_rounds({"reward/val_loss": segments(val), "reward/loss": segments(train)})
    assert [s.offset for s in aligned["reward/loss"]] == [12]
    assert [s.offset for s in aligned["reward/val_loss"]] == [0, 12]


def test_curves_selection_and_exports(store, run):
    from app.context import Studio
    from app.curves.curves_tab import ALL, findings, load_curves, warnings_html, write_exports

    curves = load_curves(Studio(store), run["job_id"])
    assert curves.points == 3 * (12 + 12 + 3 + 3) + 3 * 20 * 12
    assert [value for _, value in curves.round_choices()] == [ALL, "1", "2", "3"]
    assert curves.sft_oracle == pytest.approx(0.4)
    assert findings(curves, ALL) == []
    assert "No known failure" in warnings_html([], True)

    only_two = curves.select(curves.optimiser, "2")
    assert [s.round for s in only_two["ppo/kl"]] == [2] and only_two["ppo/kl"][0].steps.tolist() == list(range(21, 41))

    metrics_csv, rounds_csv = write_exports(curves, "2")
    assert metrics_csv.endswith(f"job{run['job_id']}-round-2-metrics.csv")
    with open(metrics_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 * 12 + 2 * 3 + 20 * 12 and {r["round"] for r in rows} == {"2"}
    assert {r["job_id"] for r in rows} == {str(run["job_id"])}
    with open(rounds_csv, newline="") as f:
        assert [float(r["oracle_score"]) for r in csv.DictReader(f)] == pytest.approx([0.5, 0.6, 0.7])


def test_a_grpo_job_has_its_own_panels_and_its_warnings(store):
    import json

    from app.context import Studio
    from app.curves.charts import GRPO_PANELS
    from app.curves.curves_tab import ALL, findings, load_curves, show_charts, write_exports

    run = fill_synthetic_run(store, rounds=2, reward_steps=4, policy_iterations=5, algorithm="grpo")
    curves = load_curves(Studio(store), run["job_id"])
    assert curves.algorithm == "grpo" and set(curves.optimiser) == set(GRPO_PANELS)
    assert curves.points == 2 * (4 * 2 + 2) + 2 * 5 * 12  # reward: loss and accuracy, validation once per round
    shown = show_charts(Studio(store), run["job_id"], ALL, 0.0)
    assert shown.optimiser_title.startswith("### GRPO: iterations") and "· grpo loop ·" in shown.status
    spec = json.loads(shown.optimiser_plot.plot)
    titles = [a["text"] for a in spec["layout"]["annotations"] if a["text"].startswith("<b>")]
    assert titles == [f"<b>{title}</b>" for title in GRPO_PANELS.values()]
    assert not any("Value" in title or "Explained" in title for title in titles)  # no critic, no value panels
    assert "no data yet" not in [a["text"] for a in spec["layout"]["annotations"]]
    assert spec["config"]["toImageButtonOptions"]["filename"] == f"job{run['job_id']}-grpo"
    with open(write_exports(curves, ALL)[0]) as f:
        assert "grpo/zero_variance_groups" in f.read()

    job_id = job_rows.create_job(store, "ppo", {"ppo": {"algorithm": "grpo"}})  # a GRPO run whose KL runs away
    for step in range(1, 41):
        log_metrics(store, job_id, step, {"grpo/kl": 0.2 * 1.12 ** step, "grpo/score": 0.0, "grpo/entropy": 2.0})
    assert [f.rule for f in findings(load_curves(Studio(store), job_id), ALL)] == ["kl_runaway"]


def test_a_dpo_job_has_its_own_panels_and_its_sampled_kl_feeds_the_warnings(store):
    import json

    from app.context import Studio
    from app.curves.charts import DPO_PANELS
    from app.curves.curves_tab import ALL, findings, load_curves, show_charts

    job_id = job_rows.create_job(store, "dpo", {"settings": {}})
    for step in range(1, 41):  # each step's loss and margins; the policy's samples measured every 4th step
        log_metrics(store, job_id, step, {"dpo/loss": 0.69 - 0.01 * step, "dpo/margin": 0.02 * step,
                                          "dpo/accuracy": 0.5 + 0.01 * step, "dpo/chosen_reward": 0.01 * step,
                                          "dpo/rejected_reward": -0.01 * step, "dpo/logp_chosen": -20.0,
                                          "dpo/logp_rejected": -22.0, "dpo/learning_rate": 1e-4})
        if step % 4 == 0:
            log_metrics(store, job_id, step, {"dpo/kl": 0.3 * 1.35 ** (step / 4), "dpo/entropy": 2.0,
                                              "dpo/response_length": 20.0, "dpo/eos_rate": 0.9})
    curves = load_curves(Studio(store), job_id)
    assert curves.algorithm == "dpo" and set(curves.optimiser) == set(DPO_PANELS)
    shown = show_charts(Studio(store), job_id, ALL, 0.0)
    assert shown.optimiser_title.startswith("### DPO: steps across rounds") and "· dpo ·" in shown.status
    spec = json.loads(shown.optimiser_plot.plot)
    titles = [a["text"] for a in spec["layout"]["annotations"] if a["text"].startswith("<b>")]
    assert titles == [f"<b>{title}</b>" for title in DPO_PANELS.values()]
    assert "no data yet" not in [a["text"] for a in spec["layout"]["annotations"]]
    assert spec["layout"]["xaxis1"]["title"]["text"] == "DPO step"
    assert [f.rule for f in findings(curves, ALL)] == ["kl_runaway"]  # read from the samples' KL


def test_an_sft_job_has_its_own_panels_and_exports_and_no_policy_rules(store):
    import json

    from app.context import Studio
    from app.curves.charts import SFT_PANELS
    from app.curves.curves_tab import ALL, findings, load_curves, show_charts, write_exports

    fill_synthetic_run(store, rounds=2)  # the store's rounds: the rules that read them are a loop's, not SFT's
    job_id = job_rows.create_job(store, "sft", {"settings": {}})
    for step in range(1, 13):  # training loss and accuracy each step; the held-out demonstrations every 4th
        log_metrics(store, job_id, step, {"sft/loss": 3.0 - 0.2 * step, "sft/token_accuracy": 0.05 * step,
                                          "sft/learning_rate": 1e-3, "ppo/kl": 9.0 * step})
        if step % 4 == 0:
            log_metrics(store, job_id, step, {"sft/heldout_loss": 3.1 - 0.1 * step,
                                              "sft/heldout_token_accuracy": 0.04 * step})
    job_rows.claim_job(store, job_id, 1)
    job_rows.finish_job(store, job_id, JobStatus.COMPLETED)
    curves = load_curves(Studio(store), job_id)
    assert set(SFT_PANELS) <= set(curves.optimiser) and "ppo/kl" not in curves.optimiser
    assert [len(s.steps) for s in curves.optimiser["sft/heldout_loss"]] == [3]
    shown = show_charts(Studio(store), job_id, ALL, 0.0)
    assert shown.optimiser_title.startswith("### SFT: steps on the demonstrations") and "· sft ·" in shown.status
    spec = json.loads(shown.optimiser_plot.plot)
    titles = [a["text"] for a in spec["layout"]["annotations"] if a["text"].startswith("<b>")]
    assert titles == [f"<b>{title}</b>" for title in SFT_PANELS.values()]
    assert titles[:3] == ["<b>Loss (answer tokens)</b>", "<b>Token accuracy (answer tokens)</b>",
                          "<b>Held-out loss (demonstrations never trained on)</b>"]
    assert "no data yet" not in [a["text"] for a in spec["layout"]["annotations"]]
    assert spec["layout"]["xaxis1"]["title"]["text"] == "SFT step"
    loss = next(t for t in spec["data"] if t["xaxis"] == "x1")
    assert loss["x"] == list(range(1, 13)) and loss["y"][0] == pytest.approx(2.8)
    assert findings(curves, ALL) == []  # no rule judges SFT's curves, nor the store's rounds through this job
    with open(write_exports(curves, ALL)[0]) as f:
        names = {row["name"] for row in csv.DictReader(f)}
    assert names == {"sft/loss", "sft/token_accuracy", "sft/learning_rate", "sft/heldout_loss",
                     "sft/heldout_token_accuracy"}


def test_warning_shows_in_plain_words_and_escaped(store):
    from app.context import Studio
    from app.curves.curves_tab import ALL, findings, load_curves, warnings_html

    job_id = job_rows.create_job(store, "ppo", {})
    for step in range(1, 41):
        log_metrics(store, job_id, step, {"ppo/kl": 0.2 * 1.12 ** step, "ppo/score": 0.0, "ppo/entropy": 2.0})
    found = findings(load_curves(Studio(store), job_id), ALL)
    assert [f.rule for f in found] == ["kl_runaway"]
    text = warnings_html(found, True)
    assert "KL is rising without bound" in text and "<script" not in warnings_html(
        [found[0].__class__("x", "<script>", "d", "a")], True)


def test_a_loops_warnings_are_the_ones_it_recorded_and_a_job_run_alone_gets_the_whole_job_rules(store):
    from app.context import Studio
    from app.curves.curves_tab import ALL, findings, load_curves
    from storage.job_warnings import record_warnings
    from storage.types import JobWarning

    rising = {step: {"ppo/kl": 0.2 * 1.12 ** step, "ppo/score": 0.0, "ppo/entropy": 2.0} for step in range(1, 41)}
    loop_id = job_rows.create_job(store, "loop", {})
    for step, values in rising.items():  # a healthy loop's KL rises round after round; its own rules judged it
        log_metrics(store, loop_id, step, values)
    assert findings(load_curves(Studio(store), loop_id), ALL) == []
    record_warnings(store, loop_id, [JobWarning(loop_id, "kl_per_token", 2, 37, "KL per token beyond healthy runs",
                                                "0.9 nats per token", "raise beta", 1.0)])
    assert [f.rule for f in findings(load_curves(Studio(store), loop_id), ALL)] == ["kl_per_token"]
    job_rows.finish_job(store, loop_id, JobStatus.COMPLETED)
    ppo_id = job_rows.create_job(store, "ppo", {})
    for step, values in rising.items():
        log_metrics(store, ppo_id, step, values)
    assert [f.rule for f in findings(load_curves(Studio(store), ppo_id), ALL)] == ["kl_runaway"]


def test_recorded_warnings_show_with_their_round_and_step(store, run):
    from app.context import Studio
    from app.curves.curves_tab import ALL, findings, load_curves, warnings_html
    from storage.job_warnings import record_warnings
    from storage.types import JobWarning

    job_id = run["job_id"]
    record_warnings(store, job_id, [JobWarning(job_id, "kl_per_token", 2, 37, "KL per token beyond healthy runs",
                                               "0.9 nats per token", "raise beta", 1.0)])
    curves = load_curves(Studio(store), job_id)
    [fired] = findings(curves, ALL)
    assert (fired.rule, fired.round, fired.step) == ("kl_per_token", 2, 37)
    assert findings(curves, "2") == [fired] and findings(curves, "3") == []
    assert "<i>Round 2, step 37:</i> 0.9 nats per token" in warnings_html([fired], True)


def test_a_loop_jobs_rounds_charts_show_its_own_rounds_and_say_the_others_are_left_out(store, run):
    import json

    from app.context import Studio
    from app.curves.curves_tab import ALL, DEFAULT_SMOOTHING, load_curves, show_charts, write_exports
    from storage.policies import add_policy
    from storage.rounds import add_round

    def plotted(shown) -> set:
        """The rounds on the rounds charts' x axes (the reference lines' ends are not whole rounds)."""
        traces = json.loads(shown.rounds_plot.plot)["data"]
        return {x for trace in traces for x in trace.get("x", []) if isinstance(x, int)}

    studio, first = Studio(store), run["job_id"]
    newer = job_rows.create_job(store, "loop", {"rounds": 2})  # a second loop on the store, after the first's 3 rounds
    job_rows.claim_job(store, newer, os.getpid())
    shown = show_charts(studio, newer, ALL, DEFAULT_SMOOTHING)
    assert plotted(shown) == set()  # not the first job's rounds 1-3
    assert shown.rounds_title == (f"### Rounds: is the loop working?\n\nJob {newer}'s rounds (none finished yet); the "
                                  f"store's 3 other rounds (job {first}) are left out: pick their job in the list "
                                  "above to see them.")
    add_round(store, newer, 4, {}, {"labels": 30, "oracle_score": 0.9},
              add_policy(store, "/synthetic/policy-4", parent_id=run["policy_ids"][-1], round=4), None)
    shown = show_charts(studio, newer, ALL, DEFAULT_SMOOTHING)
    assert plotted(shown) == {4} and f"Job {newer}'s rounds (store round 4); the store's 3 other" in shown.rounds_title
    with open(write_exports(load_curves(studio, newer), ALL)[1]) as f:
        assert [row["round"] for row in csv.DictReader(f)] == ["4"]
    old = show_charts(studio, first, ALL, DEFAULT_SMOOTHING)
    assert plotted(old) == {1, 2, 3}
    assert old.rounds_title.endswith(f"Job {first}'s rounds (store rounds 1–3); the store's 1 other round (job "
                                     f"{newer}) is left out: pick its job in the list above to see it.")
    job_rows.finish_job(store, newer, JobStatus.COMPLETED)
    ppo_job = job_rows.create_job(store, "ppo", {})  # a job run alone has no rounds: the store's, all of them
    alone = show_charts(studio, ppo_job, ALL, DEFAULT_SMOOTHING)
    assert plotted(alone) == {1, 2, 3, 4} and alone.rounds_title.endswith("Every round of the store (this job runs "
                                                                          "no rounds).")


def test_opening_the_curves_tab_shows_the_jobs_of_now(store):
    """What the tab shows when it opens (page load or the tab selected later): the newest job unless one was picked
    by hand, so a job that started after the page loaded shows without a reload."""
    from app.context import Studio
    from app.curves.curves_tab import ALL, DEFAULT_SMOOTHING, pick_job, show_jobs

    studio = Studio(store)
    empty = show_jobs(studio, None, ALL, DEFAULT_SMOOTHING)
    assert empty.status.startswith("No training job yet") and empty.job.choices == [] and not empty.timer.active
    run = fill_synthetic_run(store, rounds=2, reward_steps=4, policy_iterations=3)
    opened = show_jobs(studio, None, ALL, DEFAULT_SMOOTHING)
    assert opened.job.value == run["job_id"] and f"**Job {run['job_id']}** · loop · **completed**" in opened.status
    picked = pick_job(studio, run["job_id"], DEFAULT_SMOOTHING)
    assert picked.picked_job == run["job_id"] and picked.round_choice.value == ALL
    newer = job_rows.create_job(store, "ppo", {})
    assert show_jobs(studio, None, ALL, DEFAULT_SMOOTHING).job.value == newer  # nothing picked: the newest
    kept = show_jobs(studio, picked.picked_job, "2", DEFAULT_SMOOTHING)
    assert kept.job.value == run["job_id"] and kept.round_choice.value == "2"
    assert "round-2" in kept.optimiser_plot.plot
    assert [value for _, value in kept.job.choices] == [newer, run["job_id"]]


def test_the_curves_tab_opens_on_the_newest_job_with_data_not_a_cancelled_empty_one(store):
    from app.context import Studio
    from app.curves.curves_tab import ALL, DEFAULT_SMOOTHING, show_jobs

    studio = Studio(store)
    run = fill_synthetic_run(store, rounds=1, reward_steps=2, policy_iterations=2)
    empty = job_rows.create_job(store, "loop", {})
    job_rows.finish_job(store, empty, JobStatus.CANCELLED)  # cancelled before its first step: nothing to chart
    opened = show_jobs(studio, None, ALL, DEFAULT_SMOOTHING)
    assert opened.job.value == run["job_id"] and f"**Job {run['job_id']}**" in opened.status
    assert [value for _, value in opened.job.choices] == [empty, run["job_id"]]  # still listed, to pick by hand


def test_tabs_that_list_jobs_or_samples_refresh_each_time_they_are_opened(store):
    import gradio as gr

    from app.door.ui import build_app

    blocks = build_app(store)
    tabs = {block_id: block.label for block_id, block in blocks.blocks.items() if isinstance(block, gr.Tab)}
    on_open = {(tabs[target], fn.name) for fn in blocks.fns.values() for target, event in fn.targets
               if event == "select" and target in tabs}
    assert on_open == {("Train", "newest_job"), ("Train", "show_limits"), ("Train", "people_default"),
                       ("Curves", "show_jobs"), ("Samples", "show_samples"), ("Leaderboard", "show_leaderboard"),
                       ("Leaderboard", "show_exports"), ("Arena", "show_arena"), ("Data", "show_project"),
                       ("Data", "show_references"), ("Data", "on_section"), ("Data", "gold_table"),
                       ("Data", "show_notes"), ("Data", "on_stats"), ("Data", "on_audit"),
                       ("Label", "note_fields"), ("Label", "rationale_field"), ("Label", "show_counts")}
    on_load = {fn.name for fn in blocks.fns.values() if (blocks._id, "load") in fn.targets}
    assert on_load == {"show_known_annotator", "current_settings", "project_form", "reopen_tab",
                       *(name for _, name in on_open)}


def test_the_metrics_handler(store, run):
    import gradio as gr

    from app.context import Studio
    from app.curves.curves_tab import api_metrics

    rows = api_metrics(Studio(store), run["job_id"], ["ppo/kl", " "], None)
    assert len(rows) == 60 and {r["name"] for r in rows} == {"ppo/kl"}
    with pytest.raises(gr.Error, match="does not exist"):
        api_metrics(Studio(store), run["job_id"] + 99, "", None)


@pytest.fixture
def client(store, run, serve_studio):
    from gradio_client import Client

    return Client(serve_studio(store).local_url, verbose=False)


def test_metrics_api(client, run):
    job_id = run["job_id"]
    rows = client.predict(job_id=job_id, names="ppo/kl, ppo/score", api_name="/metrics")
    assert [r["name"] for r in rows] == ["ppo/kl"] * 60 + ["ppo/score"] * 60
    assert [r["step"] for r in rows[:60]] == list(range(1, 61))
    assert rows[59] == {"job_id": job_id, "step": 60, "name": "ppo/kl", "value": pytest.approx(0.3)}
    as_list = client.predict(job_id=job_id, names=["round/oracle_score"], api_name="/metrics")
    assert [(r["step"], r["value"]) for r in as_list] == [(1, pytest.approx(0.5)), (2, pytest.approx(0.6)),
                                                         (3, pytest.approx(0.7))]
    everything = client.predict(job_id=job_id, names="", api_name="/metrics")
    assert len(everything) == 3 * (12 + 12 + 3 + 3) + 3 * 20 * 12 + 3 * 6 + 3 * 2  # 6 round summaries
    with pytest.raises(Exception, match="does not exist"):
        client.predict(job_id=job_id + 99, names="ppo/kl", api_name="/metrics")
