"""`python app.py train-reward` (app/commands/reward_cli.py): it trains, registers and prints the validation
metrics; a bad input fails before any job or store change; stopped by SIGTERM it exits 143 with its resume line,
which `status` prints too, and `--resume` trains the job again to its end."""

import argparse
import dataclasses
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from app.commands import reward_cli
from storage import StudioError
from storage.jobs import create_job, finish_job, get_job, list_jobs
from storage.metrics import read_metrics
from storage.policies import add_policy
from storage.reward_models import list_reward_models
from storage.types import JobStatus
from tests.helpers import wait_for
from tests.reward_helpers import fill_store, snapshot
from trainers.reward.config import RewardConfig

pytestmark = pytest.mark.usefixtures("one_thread")


ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def app(*args):
    """`python app.py ARGS` in a subprocess, as a user runs it."""
    return subprocess.run([sys.executable, str(ROOT / "app.py"), *args], capture_output=True, text=True, timeout=300,
                          env=ENV)


def test_train_reward_command_trains_registers_and_prints_validation_metrics(store, tiny_gpt2_dir, corpus_sentences):
    fill_store(store, tiny_gpt2_dir, corpus_sentences, 60)
    result = app("train-reward", "--db", str(store.path), "--epochs", "1", "--lr", "1e-3", "--ensemble", "2")
    assert result.returncode == 0, result.stderr
    assert "trained on 60 labels (48 training pairs, 12 validation pairs)" in result.stdout
    assert "settings: the 'demo' preset (a tiny model" in result.stdout  # which preset gave what was left out
    assert result.stdout.count("val_accuracy") == 2 and "member 2/2" in result.stdout
    assert "reward model" in result.stderr  # the progress bar
    [job] = list_jobs(store)
    assert job.kind == "reward" and job.status is JobStatus.COMPLETED and job.config["ensemble"] == 2
    assert [m.job_id for m in list_reward_models(store)] == [job.id, job.id]


def test_train_reward_command_bad_input_fails_before_any_job_or_store_change(store, tiny_gpt2_dir):
    """(app.py turns the StudioError into exit code 2 and one line on stderr; tests/test_cli.py checks that.)"""
    parser = argparse.ArgumentParser()
    reward_cli.add_arguments(parser)
    add_policy(store, str(tiny_gpt2_dir))
    with pytest.raises(StudioError, match="no labels"):
        reward_cli.run(parser.parse_args([]), lambda args: store)
    assert list_jobs(store) == [] and snapshot(store) == ([], [], None)
    with pytest.raises(StudioError, match="epochs must be positive"):  # checked before the store is even opened
        reward_cli.run(parser.parse_args(["--epochs", "0"]), lambda args: pytest.fail("the store was opened"))


def test_a_reward_job_stopped_by_sigterm_exits_143_says_how_to_resume_and_resumes(store, tiny_gpt2_dir,
                                                                                   corpus_sentences):
    fill_store(store, tiny_gpt2_dir, corpus_sentences, 60)
    train = subprocess.Popen([sys.executable, str(ROOT / "app.py"), "train-reward", "--db", str(store.path),
                              "--epochs", "1000", "--lr", "1e-3"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=ENV)
    wait_for(lambda: train.poll() is not None or read_metrics(store, 1, names=["reward/loss"]), timeout=300)
    train.send_signal(signal.SIGTERM)
    out, err = train.communicate(timeout=120)
    assert train.returncode == 143 and get_job(store, 1).status is JobStatus.CANCELLED, err[-2000:]
    assert out.splitlines()[-1] == "reward job 1: cancelled; resume with --resume 1"
    assert f"  resume: python app.py train-reward --resume 1 --db {store.path}" in app(
        "status", "--db", str(store.path)).stdout.splitlines()
    stopped = create_job(store, "reward", dataclasses.asdict(RewardConfig(epochs=1, learning_rate=1e-3)))
    finish_job(store, stopped, JobStatus.CANCELLED)  # a short one to resume (job 1 has 1000 epochs to go)
    resumed = app("train-reward", "--db", str(store.path), "--resume", str(stopped), "--epochs", "7")
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming reward job {stopped} with its settings" in resumed.stdout
    assert get_job(store, stopped).status is JobStatus.COMPLETED and get_job(store, stopped).config["epochs"] == 1
    assert [m.job_id for m in list_reward_models(store)] == [stopped]
