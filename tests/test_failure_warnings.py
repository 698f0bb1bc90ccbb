"""The loop's failure warnings (trainers/loop/failure_warnings.py): a round's stored metrics run through the
per-phase rules once; the worker pauses a loop on a warning, and a resume acknowledges it.

Then the broken-run suite's fast subset (bench/failure_warnings.py holds every arm): a loop without a KL anchor and
one whose labels are stored the wrong way round fire in their first round, a healthy one fires nothing; a loop set
to pause on a warning stops before PPO with the warning printed, `status` shows it, and `--resume` continues past
it."""

import json
import subprocess
import sys
from pathlib import Path

from bench.failure_warnings import run_arm
from labeling.queue.synthetic import OracleAnnotator
from storage import JobStatus
from storage import jobs as job_rows
from storage.job_warnings import list_warnings
from storage.metrics import log_metrics
from storage.policies import get_policy, list_policies
from tests.winrate_helpers import versions
from trainers.entry import worker
from trainers.loop.config import LoopConfig
from trainers.loop.failure_warnings import (
    VAL_PAIRS_METRIC,
    pause_reason,
    policy_phase_warnings,
    reward_phase_warnings,
    warning_line,
    winrate_findings,
    winrate_warnings,
)
from trainers.loop.winrate_pairs import queue_version_pairs
from trainers.reporting import JobPaused

ROOT = Path(__file__).resolve().parent.parent
FAST = {"prompts_per_round": 17, "queue_reserve": 0, "policy_iterations": 4, "policy_batch_size": 16}  # one round
CONFIG = LoopConfig(policy_iterations=3)


# ---- the rules on a round's stored metrics, and the pause -----------------------------------------------------

def log_phase(store, job, first_step, kl, length=8.0):
    for i, value in enumerate(kl):
        log_metrics(store, job, first_step + i, {"ppo/kl": value, "ppo/response_length": length, "ppo/score": 0.5,
                                                 "ppo/entropy": 1.5, "ppo/eos_rate": 1.0})


def test_a_rounds_ppo_phase_is_read_from_its_own_steps_and_recorded_once(store):
    job = job_rows.create_job(store, "loop", {})
    log_phase(store, job, 1, [0.0, 0.4, 0.8])        # round 1 (steps 1-3): healthy
    log_phase(store, job, 4, [2.0, 10.0, 12.0])      # round 2 (steps 4-6): 1.25 and 1.5 nats per token
    assert policy_phase_warnings(store, job, CONFIG, round=1, first_round=1) == []
    [kl] = policy_phase_warnings(store, job, CONFIG, round=2, first_round=1)
    assert (kl.rule, kl.round, kl.step) == ("kl_per_token", 2, 6)
    assert policy_phase_warnings(store, job, CONFIG, round=2, first_round=1) == []  # already recorded
    assert warning_line(kl).startswith("warning: kl_per_token: KL per token beyond healthy runs (round 2, step 6)")


def test_a_held_out_oracle_falling_across_rounds_fires(store):
    job = job_rows.create_job(store, "loop", {})
    log_phase(store, job, 1, [0.0, 0.4, 0.8])
    log_metrics(store, job, 3, {"ppo/score": 1.5})  # the score rose over the phase
    log_metrics(store, job, 0, {"round/oracle_score": 0.2})
    log_metrics(store, job, 1, {"round/oracle_score": -0.5})
    [falls] = policy_phase_warnings(store, job, CONFIG, round=1, first_round=1)
    assert (falls.rule, falls.round, falls.step) == ("oracle_falls", 1, 3)


def test_a_grpo_phases_oracle_correlation_is_read_from_its_steps(store):
    job = job_rows.create_job(store, "loop", {})
    two_rounds_of_5_steps = [0.5, 0.6, 0.4, 0.5, 0.5, -0.5, -0.6, -0.4, -0.5, -0.5]
    for step, value in enumerate(two_rounds_of_5_steps, start=1):
        log_metrics(store, job, step, {"grpo/oracle_correlation": value})
    config = LoopConfig.from_dict({"policy_iterations": 5, "algorithm": "grpo"})
    assert policy_phase_warnings(store, job, config, round=1, first_round=1) == []
    [found] = policy_phase_warnings(store, job, config, round=2, first_round=1)
    assert (found.rule, found.round, found.step) == ("oracle_uncorrelated", 2, 10) and "-0.50" in found.detail


def test_a_reward_model_on_few_validation_pairs_warns_with_the_count(store):
    job = job_rows.create_job(store, "loop", {})
    log_metrics(store, job, 12, {"reward/val_accuracy": 1.0})
    log_metrics(store, job, 1, {VAL_PAIRS_METRIC: 3})
    [few] = reward_phase_warnings(store, job, CONFIG, round=1)
    assert (few.rule, few.round, few.step) == ("validation_too_small", 1, 12) and "3 held-out" in few.detail
    assert pause_reason(store, job) == "paused: validation_too_small: Reward model validated on too few pairs"


def test_the_worker_pauses_a_job_and_a_resume_acknowledges_its_warnings(store):
    job_id = job_rows.create_job(store, "loop", {})
    log_metrics(store, job_id, 1, {VAL_PAIRS_METRIC: 3})
    reward_phase_warnings(store, job_id, CONFIG, round=1)
    job = job_rows.claim_job(store, job_id, pid=1)

    def pausing(store, job):
        raise JobPaused(pause_reason(store, job.id))

    assert worker.run_job(store, job, runner=pausing) is JobStatus.PAUSED
    paused = job_rows.get_job(store, job_id)
    assert paused.status is JobStatus.PAUSED and paused.phase.startswith("paused: validation_too_small")
    job_rows.requeue_job(store, job_id)
    assert pause_reason(store, job_id) is None and len(list_warnings(store, job_id)) == 1

def test_people_preferring_the_sft_policy_warn_under_the_versions_round_and_pause_the_loop(store):
    """A version whose PPO phase raised the score loses its blind win-rate pairs to the SFT policy: the next round's
    reward phase (and the loop's end) records `winrate_below_sft` under the version's round, and it pauses."""
    sft, v1 = versions(store, count=1)
    job = job_rows.create_job(store, "loop", {})
    log_phase(store, job, 1, [0.0, 0.4, 0.8])  # round 1's PPO phase (steps 1-3), its score rising to 1.5
    log_metrics(store, job, 3, {"ppo/score": 1.5})
    log_metrics(store, job, 2, {VAL_PAIRS_METRIC: 40, "reward/val_accuracy": 0.8})  # round 2's reward model, fine
    queue_version_pairs(store, get_policy(store, v1), CONFIG, within=0, with_oracle=False)
    OracleAnnotator(lambda text: -1.0 if "-v1-" in text else 0.0).label(store, 24)  # people prefer the SFT policy
    [below] = reward_phase_warnings(store, job, CONFIG, round=2, first_round=1)
    assert (below.rule, below.round) == ("winrate_below_sft", 1) and "0% of the time" in below.detail
    assert pause_reason(store, job) == "paused: winrate_below_sft: People prefer the SFT policy"
    assert winrate_warnings(store, job, CONFIG, first_round=1) == []  # recorded once
    assert winrate_findings(store, job, CONFIG, first_round=2) == []  # a job that began after v1 does not judge it


# ---- the broken-run suite's fast subset -------------------------------------------------------------------------

def test_a_loop_without_a_kl_anchor_warns_in_its_first_round(demo_template, tmp_path):
    # 8 iterations: at 4, whether the policy has drifted far enough by the round's end depends on the seed
    result = run_arm("no_kl", 0, tmp_path / "no_kl", extra={**FAST, "policy_iterations": 8}, template=demo_template)
    assert result["status"] == "completed"
    assert any(f["round"] == 1 for f in result["fired"]), result["fired"]  # KL per token or the oracle, by seed


def test_labels_stored_the_wrong_way_round_warn_in_the_first_round(demo_template, tmp_path, monkeypatch):
    monkeypatch.setattr(OracleAnnotator, "choose", OracleAnnotator.choose)  # the arm flips it; undone after the test
    result = run_arm("flipped", 0, tmp_path / "flipped", extra={**FAST, "policy_iterations": 5}, template=demo_template)
    assert result["status"] == "completed"
    assert [(f["rule"], f["round"]) for f in result["fired"] if f["rule"] == "oracle_uncorrelated"] == \
        [("oracle_uncorrelated", 1)], result["fired"]
    assert "the wrong way round" in next(f["detail"] for f in result["fired"] if f["rule"] == "oracle_uncorrelated")


def test_a_healthy_loop_fires_nothing(demo_template, tmp_path):
    result = run_arm("defaults", 0, tmp_path / "defaults", extra={**FAST, "rounds": 1}, template=demo_template)
    assert result["status"] == "completed" and result["fired"] == []


def app(*args):
    return subprocess.run([sys.executable, "app.py", *args], cwd=ROOT, capture_output=True, text=True, timeout=900)


def test_a_loop_pauses_on_a_warning_and_resumes_past_it(demo_store):
    db = str(demo_store.path)
    config = {"prompts_per_round": 4, "queue_reserve": 0, "reward_epochs": 1, "policy_iterations": 1,
              "policy_batch_size": 4, "policy_epochs": 1, "response_length": 8, "on_warning": "pause"}
    paused = app("loop", "--db", db, "--rounds", "1", "--labels-per-round", "8", "--config", json.dumps(config))
    assert paused.returncode == 0, paused.stderr[-2000:]
    assert "warning: validation_too_small: Reward model validated on too few pairs" in paused.stderr + paused.stdout
    [job] = job_rows.list_jobs(demo_store)
    assert job.status is JobStatus.PAUSED and job.phase.startswith("paused: validation_too_small")
    assert len(list_policies(demo_store)) == 1  # it stopped before PPO
    status = app("status", "--db", db, "--job", str(job.id))
    assert status.returncode == 0 and f"job {job.id} loop: paused" in status.stdout
    assert "warning: validation_too_small" in status.stdout and "2 held-out pair(s)" in status.stdout

    resumed = app("loop", "--db", db, "--resume", str(job.id))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert job_rows.get_job(demo_store, job.id).status is JobStatus.COMPLETED
    assert len(list_policies(demo_store)) == 2
    assert "(acknowledged)" in app("status", "--db", db).stdout
