"""The loop (trainers/loop/rounds.py): a headless oracle loop improves the policy, with PPO or GRPO; through the API
it starts, stops, resumes and completes while /next_pair keeps serving pairs; a resumed round reuses what a killed
worker stored; an adaptive β goes on across rounds. Workers killed mid-loop: test_worker_faults.py."""

import dataclasses
import json
import os
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import pytest
from gradio_client import Client

from labeling.versions.winrate import winrate_report
from storage import JobStatus
from storage import jobs as job_rows
from storage.generations import eval_samples, list_generations
from storage.labels import count_labels
from storage.metrics import read_metrics
from storage.pairs import list_pairs
from storage.policies import add_policy, get_policy, latest_policy, list_policies
from storage.prompts import list_prompts
from storage.reward_models import list_reward_models
from storage.rounds import list_rounds
from storage.winrate import winrate_judgements
from tests import helpers
from trainers.loop.config import LoopConfig
from trainers.loop.evaluation import evaluate_policy
from trainers.loop.label_schedule import labels_in_round
from trainers.loop.rounds import Loop
from trainers.loop.sampling import SamplingConfig, sample_policy
from trainers.reward.scorer import INFO_FILE

ROOT = Path(__file__).resolve().parent.parent
TINY = {"rounds": 2, "prompts_per_round": 16, "labels_per_round": 30, "queue_reserve": 20, "reward_epochs": 2,
        "policy_iterations": 3, "policy_batch_size": 16, "policy_epochs": 2}
# ~2 min on 2 cores
SMALL = {"prompts_per_round": 32, "queue_reserve": 10, "policy_iterations": 8, "policy_batch_size": 16,
         "eval_samples": 8}  # 128 held-out samples a version: with the default 32 the mean's std is ~0.2
# 2 rounds of 100 labels, GRPO on 8 prompts x G 4 per iteration: ~1.5 min on one thread
GRPO_SMALL = {"algorithm": "grpo", "group_size": 4, "prompts_per_round": 32, "queue_reserve": 10,
              "policy_iterations": 8, "policy_batch_size": 8,
              "eval_samples": 8}  # 128 held-out samples: the mean's std ~0.1, not ~0.2 as with the default 32


wait_for = partial(helpers.wait_for, timeout=600, every=0.5)  # loops take minutes on a busy CPU


def test_headless_oracle_loop_beats_the_sft_policy(demo_store):
    result = subprocess.run([sys.executable, "app.py", "loop", "--db", str(demo_store.path), "--rounds", "3",
                             "--labels-per-round", "60", "--config", json.dumps(SMALL)], cwd=ROOT, capture_output=True,
                            text=True, timeout=1200)
    assert result.returncode == 0, result.stderr[-2000:]
    rounds = list_rounds(demo_store)
    assert [r["round"] for r in rounds] == [1, 2, 3]
    policies = list_policies(demo_store)
    assert len(policies) == 4
    members = list_reward_models(demo_store)
    assert len(members) == 3
    # the label budget counts the rounds' own labels; each version's 24 win-rate judgements come on top
    assert count_labels(demo_store, evaluation=False) == sum(labels_in_round(60, LoopConfig().label_decay, i)
                                                             for i in range(3))
    judged = winrate_judgements(demo_store)
    assert len(judged) == 3 * LoopConfig().winrate_pairs == count_labels(demo_store) - count_labels(demo_store,
                                                                                                    evaluation=False)
    trained = {i for m in members for i in json.loads((Path(m.path) / INFO_FILE).read_text())["label_ids"]}
    assert trained and not trained & {j.label_id for j in judged}  # none trained or validated a reward model
    [job] = job_rows.list_jobs(demo_store)
    logs = job_rows.tail_logs(demo_store, job.id, 500)
    for phase in ("round 1: evaluating policy v0", "round 1: evaluating policy v1", "round 3: evaluating policy v3",
                  "round 2: queueing win-rate pairs of policy v1", "round 3: judging policy v3 against the SFT policy"):
        assert phase in logs  # evaluation is a phase of its own in the progress
    baseline = read_metrics(demo_store, job.id, names=["round/oracle_score"])
    scores = {row["step"]: row["value"] for row in baseline}
    # the final policy beats the SFT policy on held-out prompts. One seeded run: over loop seeds 0-5 (on the AVX-512
    # machine of stop 51) these settings gained -0.03 to +0.36 in 3 rounds and won 42-58% of 24 blind judgements;
    # docs/benchmarks.md#learning measures learning over seeds, this checks one whole loop end to end
    assert scores[3] > scores[0] + 0.1, scores
    report = winrate_report(demo_store)
    final = report.latest()  # ... and the oracle, judging blind pairs, prefers it to the SFT policy
    assert final.policy_id == policies[-1].id and final.judgements == 24 and final.rate > 0.5, final
    assert f"{final.name} vs SFT {final.rate:.0%} [{final.low:.0%}, {final.high:.0%}]" in result.stdout  # result line
    board = report.leaderboard
    assert sorted(s.name for s in board) == ["v0", "v1", "v2", "v3"] and board[0].name != "v0"
    assert all(s.low is not None and s.low < s.strength < s.high for s in board if not s.anchor)


def test_headless_grpo_loop_beats_the_sft_policy(demo_store):
    result = subprocess.run([sys.executable, "app.py", "loop", "--db", str(demo_store.path), "--rounds", "2",
                             "--labels-per-round", "100", "--config", json.dumps(GRPO_SMALL)], cwd=ROOT,
                            capture_output=True, text=True, timeout=1200, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-2000:]
    [job] = job_rows.list_jobs(demo_store)
    rounds = list_rounds(demo_store, job.id)
    assert [r["round"] for r in rounds] == [1, 2]
    assert "round 2: GRPO iteration 8/8" in job_rows.tail_logs(demo_store, job.id, 200)
    policies = list_policies(demo_store)
    assert len(policies) == 3 and all(p.note.startswith("GRPO") for p in policies[1:])
    kl = read_metrics(demo_store, job.id, names=["grpo/kl"])
    assert [row["step"] for row in kl] == list(range(1, 17)) and read_metrics(demo_store, job.id, prefix="ppo/") == []
    assert rounds[-1]["summary"]["kl"] == kl[-1]["value"]  # the round's summary reads the GRPO series
    scores = {row["step"]: row["value"] for row in read_metrics(demo_store, job.id, names=["round/oracle_score"])}
    # the final policy beats the SFT policy on held-out prompts. Not by a margin: over loop seeds 0-7 two rounds
    # gained +0.03 to +0.56 (mean +0.27), and a change of the passes' floats alone moves a seed along that range
    assert scores[2] > scores[0], scores


def test_api_start_stop_resume_while_pairs_keep_coming(demo_store, serve_studio):
    client = Client(serve_studio(demo_store).local_url, verbose=False)
    started = client.predict(json.dumps(TINY), api_name="/start_loop")
    job_id = started["job_id"]
    assert started["status"] in ("queued", "running")
    status = wait_for(lambda: (s := client.predict(job_id, api_name="/job_status"))["phase"] and s)
    assert status["status"] == "running" and status["phase"].startswith("round 1/2")

    phases = []
    while (status := client.predict(job_id, api_name="/job_status"))["status"] == "running":
        phases.append(status["phase"])
        shown = client.predict("watcher", api_name="/next_pair")
        assert shown["pair_id"] is not None  # labeling never waits for training
        if "PPO iteration" in status["phase"] or read_metrics(demo_store, job_id, names=["ppo/kl"]):
            break  # in PPO (an iteration can be shorter than this poll: a logged one counts too)
        time.sleep(0.5)
    assert any("reward model" in p for p in phases), phases  # its start, or a step of it (the poll may miss one)
    assert "PPO iteration" in phases[-1] or read_metrics(demo_store, job_id, names=["ppo/kl"]), phases

    assert client.predict(job_id, api_name="/stop_job")["job_id"] == job_id
    stopped = wait_for(lambda: (s := client.predict(job_id, api_name="/job_status"))["status"] != "running" and s)
    assert stopped["status"] == "cancelled", stopped

    assert client.predict(job_id, api_name="/resume_job")["status"] in ("queued", "running")
    done = wait_for(lambda: (s := client.predict(job_id, api_name="/job_status"))["status"] not in
                    ("queued", "running") and s)
    assert done["status"] == "completed", done
    assert [r["round"] for r in list_rounds(demo_store, job_id)] == [1, 2]


def test_a_resumed_round_reuses_the_samples_and_evaluations_a_killed_worker_stored(demo_store):
    """A kill after sampling (before pairs were queued) or after an evaluation (before it was logged) leaves rows
    behind; the resumed step uses them instead of drawing a second set."""
    config = LoopConfig.from_dict({**TINY, "samples_per_prompt": 3, "response_length": 8})
    job_id = job_rows.create_job(demo_store, "loop", config.to_dict())
    job_rows.claim_job(demo_store, job_id, os.getpid())
    loop = Loop(demo_store, job_rows.get_job(demo_store, job_id), log=lambda line: None)
    sft, seed = latest_policy(demo_store), config.seed * 1000 + 1
    chosen = list_prompts(demo_store, heldout=False)[:config.prompts_per_round]
    drawn = sample_policy(demo_store, sft, chosen, SamplingConfig(3, 8), seed)  # what the killed worker stored
    generations_before = len(list_generations(demo_store))

    loop.queue_pairs(sft, 1, seed, config.labels_per_round)
    assert len(list_generations(demo_store)) == generations_before
    queued = [p for p in list_pairs(demo_store) if p.round == 1]
    assert queued and {g for p in queued for g in (p.first_id, p.second_id)} <= set(drawn)

    first = evaluate_policy(demo_store, sft, config, with_oracle=True)
    evaluated = eval_samples(demo_store, sft.id)
    assert len(evaluated) == config.eval_samples * min(config.eval_prompts, len(list_prompts(demo_store, heldout=True)))
    assert all("oracle" in s for s in evaluated)
    assert evaluate_policy(demo_store, sft, config, with_oracle=True) == first
    assert eval_samples(demo_store, sft.id) == evaluated
    assert first == pytest.approx(sum(s["oracle"] for s in evaluated) / len(evaluated))


def test_with_pair_with_previous_a_round_pairs_its_samples_with_the_previous_versions_too(demo_store):
    """A version with a parent pairs its new samples with the parent's samples of the same prompts (the demo seed's,
    here) as well when `pair_with_previous` is on, and only among themselves when it is off."""
    sft = latest_policy(demo_store)
    child = get_policy(demo_store, add_policy(demo_store, sft.path, parent_id=sft.id, round=1, note="a copy"))
    for pair_with_previous, g in ((False, 2), (True, 3)):
        config = LoopConfig.from_dict({**TINY, "samples_per_prompt": 2, "response_length": 8, "labels_per_round": 12,
                                       "queue_reserve": 0, "check_share": 0.0,
                                       "pair_with_previous": pair_with_previous})
        job_id = job_rows.create_job(demo_store, "loop", config.to_dict())
        loop = Loop(demo_store, job_rows.get_job(demo_store, job_id), log=lambda line: None)
        loop.queue_pairs(child, g, config.seed * 1000 + g, config.labels_per_round)
        job_rows.finish_job(demo_store, job_id, JobStatus.COMPLETED)
        versions = {gen.id: gen.policy_id for gen in list_generations(demo_store)}
        queued = [{versions[p.first_id], versions[p.second_id]} for p in list_pairs(demo_store) if p.round == g]
        across = sum(pair == {sft.id, child.id} for pair in queued)
        assert len(queued) == config.labels_per_round
        if pair_with_previous:  # 16 prompts: 16 pairs of the new samples, 2 x 4 x 16 = 128 across
            assert across > len(queued) / 2 and all(child.id in pair for pair in queued)  # never two of the parent's
        else:
            assert across == 0 and all(pair == {child.id} for pair in queued)


def test_an_adaptive_beta_goes_on_from_where_the_previous_round_left_it(demo_store):
    from storage.metrics import log_metrics

    job_id = job_rows.create_job(demo_store, "loop", LoopConfig(target_kl=3.0, policy_iterations=2).to_dict())
    loop = Loop(demo_store, job_rows.get_job(demo_store, job_id), log=lambda line: None)
    assert loop.carried_kl_coef(0) is None  # the first round starts at kl_coef
    for step, beta in [(1, 0.1), (2, 0.13), (3, 0.2), (4, 0.25)]:
        log_metrics(demo_store, job_id, step, {"ppo/kl_coef": beta})
    assert loop.carried_kl_coef(2) == 0.13 and loop.carried_kl_coef(4) == 0.25
    fixed = dataclasses.replace(job_rows.get_job(demo_store, job_id), config=LoopConfig(policy_iterations=2).to_dict())
    assert Loop(demo_store, fixed, log=lambda line: None).carried_kl_coef(4) is None  # a fixed β stays kl_coef
