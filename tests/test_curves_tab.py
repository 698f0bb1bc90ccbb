"""Curves and Samples tabs: round tagging of metric series, warnings, exports, the handlers that fill the tabs
(called directly, and on every opening of the tab), and the /metrics API via gradio_client.

`fill_synthetic_run` writes what a finished loop leaves in a store (metrics, reward models, policies, rounds,
held-out samples) through storage functions only; the browser test uses it too.
"""

import csv
import math
import os

import pytest

from labeling.annotation import update_queue_settings
from storage import jobs as job_rows
from storage.curves import metric_series
from storage.generations import EVAL_SOURCE, NewGeneration, add_generations
from storage.metrics import log_metrics
from storage.pairs import NewPair, add_pairs
from storage.policies import add_policy
from storage.prompts import add_prompts, list_prompts
from storage.reward_models import add_reward_model
from storage.rounds import add_round
from storage.types import JobStatus, Outcome
from tests.helpers import label_pairs

HELDOUT = ["Describe the sea.", "Name a fruit.", "Say something <b>kind</b> & true."]


def fill_synthetic_run(store, rounds=3, reward_steps=12, policy_iterations=20, in_progress=False, algorithm="ppo") -> dict:
    """A loop job's traces: per round, reward metrics (steps continue), a reward model, PPO metrics (iterations
    continue; GRPO's with `algorithm="grpo"`), a new policy with held-out samples (reward and oracle scores) and a
    round row with its summary. `in_progress` adds a running round's first reward steps and leaves the job running."""
    job_id = job_rows.create_job(store, "loop", {"rounds": rounds, "algorithm": algorithm})
    job_rows.claim_job(store, job_id, os.getpid())
    add_prompts(store, ["Tell a story.", "Write a poem."])
    add_prompts(store, HELDOUT, heldout=True)
    heldout = list_prompts(store, heldout=True)
    policies = [add_policy(store, "/synthetic/sft", round=0, note="SFT policy")]
    add_eval_samples(store, policies[0], heldout, 0)
    reward_step = ppo_step = 0
    for g in range(1, rounds + 1):
        add_labels(store, policies[-1], g)
        for i in range(1, reward_steps + 1):
            reward_step += 1
            values = {"reward/loss": 0.7 * math.exp(-i / 6), "reward/accuracy": 0.5 + 0.4 * i / reward_steps}
            if i % 4 == 0:
                values.update({"reward/val_loss": 0.7 - 0.02 * i, "reward/val_accuracy": 0.55 + 0.05 * g + 0.01 * i})
            log_metrics(store, job_id, reward_step, values)
        rm = add_reward_model(store, f"/synthetic/rm-{g}", labels_used=50 * g, metrics={"val_accuracy": 0.7},
                              norm_mean=0.0, norm_std=1.0, policy_id=policies[-1], round=g, job_id=job_id)
        for i in range(policy_iterations):
            ppo_step += 1
            t = ppo_step / (rounds * policy_iterations)
            own = ({"policy_loss": -0.01, "value_loss": 0.3 * (1 - t), "explained_variance": t} if algorithm == "ppo"
                   else {"loss": -0.01, "kl_token": 0.01 * t, "zero_variance_groups": 0.25})
            log_metrics(store, job_id, ppo_step, {f"{algorithm}/{name}": value for name, value in {
                "score": 0.2 + t + 0.05 * math.sin(i), "kl": 0.3 * t, "kl_coef": 0.05, "entropy": 2.0 - 0.4 * t,
                "clipfrac": 0.1, "approx_kl": 0.01, "response_length": 20 + 5 * t, "eos_rate": 0.8 + 0.1 * t,
                "episodes_per_s": 30.0, **own}.items()})
        policies.append(add_policy(store, f"/synthetic/policy-{g}", parent_id=policies[-1], round=g))
        add_eval_samples(store, policies[-1], heldout, g)
        summary = {"labels": 50 * g, "reward_val_accuracy": 0.6 + 0.05 * g, "score": 0.3 * g, "kl": 0.1 * g,
                   "oracle_score": 0.4 + 0.1 * g, "audit_agreement": 0.95 - 0.05 * g}
        add_round(store, job_id, g, {}, summary, policies[-1], rm)
        log_metrics(store, job_id, g, {f"round/{k}": v for k, v in summary.items()})
        log_metrics(store, job_id, g, {"annotator/alice/rm_agreement": 0.75, "annotator/bob/rm_agreement": 0.5 + 0.1 * g})
    if in_progress:
        for i in range(1, 5):
            log_metrics(store, job_id, reward_step + i, {"reward/loss": 0.6, "reward/accuracy": 0.5})
    else:
        job_rows.finish_job(store, job_id, JobStatus.COMPLETED)
    return {"job_id": job_id, "policy_ids": policies, "reward_steps": reward_steps, "policy_iterations": policy_iterations}


def add_labels(store, policy_id, g) -> None:
    """Four pairs of the policy's samples labeled by alice and bob, who disagree on the last one."""
    prompt = list_prompts(store, heldout=False)[0]
    texts = [f"round {g} sample {k}" for k in range(8)]
    ids = add_generations(store, [NewGeneration(prompt.id, t, policy_id=policy_id, source="policy") for t in texts])
    pairs = add_pairs(store, [NewPair(prompt.id, ids[k], ids[k + 4], "random", round=g) for k in range(4)])
    update_queue_settings(store, overlap=2)
    for k, pair in enumerate(pairs):
        label_pairs(store, "alice", {pair: Outcome.FIRST}, first_on_left=True, decision_ms=2000)
        label_pairs(store, "bob", {pair: Outcome.SECOND if k == 3 else Outcome.FIRST}, first_on_left=False,
                    decision_ms=4000)


def add_eval_samples(store, policy_id, prompts, g) -> None:
    texts = [(p, f"{p.text} answer {k} of version {g} <i>as written</i>") for p in prompts for k in range(2)]
    scores = {"oracle": 0.4 + 0.1 * g} if g == 0 else {"oracle": 0.4 + 0.1 * g, "reward": 0.2 * g}
    add_generations(store, [NewGeneration(p.id, text, policy_id=policy_id, source=EVAL_SOURCE) for p, text in texts],
                    scores=[scores] * len(texts))


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
        "round/audit_agreement"}
    assert metric_series(store, run["job_id"] + 1, prefix="ppo/") == {}


def test_prefix_is_a_prefix_not_a_pattern(store):
    job_id = job_rows.create_job(store, "ppo", {})
    log_metrics(store, job_id, 1, {"ppo/kl": 1.0, "ppo_x": 2.0, "ppo0": 3.0, "pp": 4.0, "ppo/z/y": 5.0})
    assert sorted(metric_series(store, job_id, prefix="ppo/")) == ["ppo/kl", "ppo/z/y"]


def test_points_in_no_finished_round_are_named_by_the_job_state(store):
    from app.context import Studio
    from app.curves_tab import IN_PROGRESS, load_curves

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
    from app.charts import align_rounds, segments
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
    assert [s.offset for s in aligned["reward/loss"]] == [12] and [s.offset for s in aligned["reward/val_loss"]] == [0, 12]


def test_curves_selection_and_exports(store, run):
    from app.context import Studio
    from app.curves_tab import ALL, findings, load_curves, warnings_html, write_exports

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

    from app.charts import GRPO_PANELS
    from app.context import Studio
    from app.curves_tab import ALL, findings, load_curves, show_charts, write_exports

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

    from app.charts import DPO_PANELS
    from app.context import Studio
    from app.curves_tab import ALL, findings, load_curves, show_charts

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


def test_warning_shows_in_plain_words_and_escaped(store):
    from app.context import Studio
    from app.curves_tab import ALL, findings, load_curves, warnings_html

    job_id = job_rows.create_job(store, "ppo", {})
    for step in range(1, 41):
        log_metrics(store, job_id, step, {"ppo/kl": 0.2 * 1.12 ** step, "ppo/score": 0.0, "ppo/entropy": 2.0})
    found = findings(load_curves(Studio(store), job_id), ALL)
    assert [f.rule for f in found] == ["kl_runaway"]
    text = warnings_html(found, True)
    assert "KL is rising without bound" in text and "<script" not in warnings_html(
        [found[0].__class__("x", "<script>", "d", "a")], True)


def test_recorded_warnings_show_with_their_round_and_step(store, run):
    from app.context import Studio
    from app.curves_tab import ALL, findings, load_curves, warnings_html
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


def test_samples_side_by_side_shown_literally(store, run):
    from app.samples_tab import samples_html
    from storage.generations import eval_samples
    from storage.policies import list_policies

    page = samples_html(eval_samples(store), list_policies(store))
    assert page.count("<th data-policy=") == 4 and "Policy 1 · SFT policy" in page and "after round 3" in page
    assert page.count('<td class="prompt">') == 3
    assert "<b>kind</b>" not in page and "&lt;b&gt;kind&lt;/b&gt; &amp; true." in page
    assert "mean reward +0.60 · mean oracle 0.70" in page  # policy 4: every sample reward 0.6, oracle 0.7
    one = samples_html(eval_samples(store), list_policies(store), prompt="Name a fruit.")
    assert one.count('<td class="prompt">') == 1 and one.count('<div class="sample">') == 4 * 2


def test_samples_show_a_conversation_prompt_as_turns(store, run):
    from app.context import Studio
    from app.render import text_html
    from app.samples_tab import ALL_PROMPTS, show_samples
    from labeling.conversations import conversation_text
    from storage.prompts import NewPrompt

    turns = [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Say <b>hi</b>."}]
    add_prompts(store, [NewPrompt(conversation_text(turns), turns)], heldout=True)
    conversation = list_prompts(store, heldout=True)[-1]
    add_eval_samples(store, run["policy_ids"][-1], [conversation], 3)
    page = show_samples(Studio(store), ALL_PROMPTS).table
    assert f'<td class="prompt">{text_html(turns)}</td>' in page
    assert '<td class="prompt">' + text_html(HELDOUT[0]) + "</td>" in page  # a text prompt stays text
    assert page.count('<div class="turn ') == 2 and "<b>" not in page


def test_annotator_view(store, run):
    from app.context import Studio
    from app.samples_tab import annotators_html, rm_agreement_by_annotator

    studio = Studio(store)
    assert rm_agreement_by_annotator(studio) == {"alice": 0.75, "bob": pytest.approx(0.8)}  # the newest round's
    page = annotators_html(studio)
    # alice: 12 x first; bob: 9 x first, 3 x second -> agreement 9/12; chance agreement (12*9)/144 = 0.75 -> kappa 0
    assert "2 annotators · 24 labels · agreement 75% over 12 rating pairs on 12 shared pairs · Light&#x27;s κ 0.00" in page
    assert "<td>alice</td><td>12</td><td>0</td><td>0%</td><td>0%</td>" in page and "<td>80%</td>" in page


def test_annotator_view_with_one_annotator(store, queue_pairs):
    from app.context import Studio
    from app.samples_tab import annotators_html

    assert "No labels yet" in annotators_html(Studio(store))
    label_pairs(store, "oracle", {queue_pairs([("p", "a", "b")])[0]: Outcome.FIRST})
    assert "1 annotator · 1 label · no pair labeled by two annotators yet" in annotators_html(Studio(store))


def test_opening_the_curves_tab_shows_the_jobs_of_now(store):
    """What the tab shows when it opens (page load or the tab selected later): the newest job unless one was picked
    by hand, so a job that started after the page loaded shows without a reload."""
    from app.context import Studio
    from app.curves_tab import ALL, DEFAULT_SMOOTHING, pick_job, show_jobs

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


def test_opening_the_samples_tab_shows_the_samples_of_now(store):
    from app.context import Studio
    from app.samples_tab import ALL_PROMPTS, show_samples

    studio = Studio(store)
    empty = show_samples(studio, "Name a fruit.")
    assert empty.prompt.value == ALL_PROMPTS and "No policy version yet" in empty.table
    assert "No labels" in empty.annotators
    fill_synthetic_run(store, rounds=1, reward_steps=4, policy_iterations=2)
    shown = show_samples(studio, "Name a fruit.")
    assert shown.prompt.value == "Name a fruit." and shown.table.count('<td class="prompt">') == 1
    assert "<td>alice</td>" in shown.annotators


def test_tabs_that_list_jobs_or_samples_refresh_each_time_they_are_opened(store):
    import gradio as gr

    from app.ui import build_app

    blocks = build_app(store)
    tabs = {block_id: block.label for block_id, block in blocks.blocks.items() if isinstance(block, gr.Tab)}
    on_open = {(tabs[target], fn.name) for fn in blocks.fns.values() for target, event in fn.targets
               if event == "select" and target in tabs}
    assert on_open == {("Train", "newest_job"), ("Train", "show_limits"), ("Curves", "show_jobs"),
                       ("Samples", "show_samples"), ("Data", "show_project"), ("Data", "on_stats"), ("Data", "on_audit")}
    on_load = {fn.name for fn in blocks.fns.values() if (blocks._id, "load") in fn.targets}
    assert on_load == {"show_signed_in", "current_settings", *(name for _, name in on_open)}


def test_the_metrics_handler(store, run):
    import gradio as gr

    from app.context import Studio
    from app.curves_tab import api_metrics

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
