"""`python app.py train-reward` (trainers/entry/reward_cli.py): it trains, registers and prints the validation
metrics; a bad input fails before any job or store change."""

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from storage import StudioError
from storage.jobs import list_jobs
from storage.policies import add_policy
from storage.reward_models import list_reward_models
from storage.types import JobStatus
from tests.reward_helpers import fill_store, snapshot
from trainers.entry import reward_cli

pytestmark = pytest.mark.usefixtures("one_thread")


def app(*args):
    """`python app.py ARGS` in a subprocess, as a user runs it."""
    root = Path(__file__).resolve().parent.parent
    return subprocess.run([sys.executable, str(root / "app.py"), *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"})


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
