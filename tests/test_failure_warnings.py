"""The broken-run suite's fast subset (bench/failure_warnings.py holds every arm): a loop without a KL anchor and one
whose labels are stored the wrong way round fire in their first round, a healthy one fires nothing; a loop set to
pause on a warning stops before PPO with the warning printed, `status` shows it, and `--resume` continues past it."""

import json
import subprocess
import sys
from pathlib import Path

from bench.failure_warnings import run_arm
from labeling.synthetic import OracleAnnotator
from storage import JobStatus
from storage import jobs as job_rows
from storage.policies import list_policies

ROOT = Path(__file__).resolve().parent.parent
FAST = {"prompts_per_round": 17, "queue_reserve": 0, "policy_iterations": 4, "policy_batch_size": 16}  # one round


def test_a_loop_without_a_kl_anchor_warns_in_its_first_round(demo_template, tmp_path):
    result = run_arm("no_kl", 0, tmp_path / "no_kl", extra=FAST, template=demo_template)
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
    config = {"prompts_per_round": 4, "queue_reserve": 0, "reward_epochs": 1, "policy_iterations": 1, "policy_batch_size": 4,
              "policy_epochs": 1, "response_length": 8, "on_warning": "pause"}
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
