"""`python app.py train-reward`: train the reward model on every label in the store, in the terminal.

The run is a `reward` job like the Train tab's (metrics, cancel, end state in the store), executed in this process
with a progress bar; bad input fails in one line before the job is created. `run_reward_job` is the worker's entry
for `reward` jobs started from the UI. Imports nothing heavy at module level (app.py builds its parser from here).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import Callable

from storage import Store
from storage import jobs as job_rows
from storage.errors import InvalidInput
from storage.types import Job, JobStatus

# option -> (RewardConfig field, type, help); an option left out keeps the config's default
OPTIONS = {
    "--epochs": ("epochs", float, "passes over the training labels (default 12, for the demo; 1-2 for real models)"),
    "--lr": ("learning_rate", float, "peak learning rate (default 2e-3, for the demo; ~1e-5 for real models)"),
    "--batch-size": ("batch_size", int, "labelled pairs per optimiser step (default 16)"),
    "--ensemble": ("ensemble", int, "K members on bootstrap resamples; 2+ enables the disagreement selector (default 1)"),
    "--val-fraction": ("val_fraction", float, "fraction of labelled pairs held out for validation (default 0.2)"),
    "--margin": ("margin", float, "the preferred response must lead by this margin (default 0)"),
    "--label-noise": ("label_noise", float, "label-noise rate eps in P = (1-eps)*sigmoid(d) + eps/2 (default 0)"),
    "--max-length": ("max_length", int, "tokens of prompt + response kept (default 512, capped by the model)"),
    "--policy": ("policy_id", int, "policy version to start from (default: the newest)"),
    "--seed": ("seed", int, "seed of the split, bootstrap, head and batches (default 0)"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for option, (_, kind, help) in OPTIONS.items():
        parser.add_argument(option, type=kind, default=None, help=help)
    parser.add_argument("--drop-both-bad", action="store_true", help="leave 'both bad' labels out (default: ties)")


def config_from_args(args: argparse.Namespace):
    from .reward import RewardConfig

    given = {name: getattr(args, option[2:].replace("-", "_")) for option, (name, _, _) in OPTIONS.items()}
    config = RewardConfig(**{name: value for name, value in given.items() if value is not None})
    config.both_bad_as_tie = not args.drop_both_bad
    return config


def run(args: argparse.Namespace, open_store: Callable[[argparse.Namespace], Store]) -> int:
    """Check the settings, open the store (`open_store(args)`), check the labels and policy, then train as a job."""
    from tqdm import tqdm

    from .reward import check_reward_inputs, train_reward_model
    from .worker import run_job

    config = config_from_args(args)
    config.check()
    store = open_store(args)
    check_reward_inputs(store, config)
    job_id = job_rows.create_job(store, "reward", dataclasses.asdict(config))
    job = job_rows.claim_job(store, job_id, os.getpid())
    bar = tqdm(total=1, desc="reward model", unit="step", file=sys.stderr)
    results = []

    def progress(done: int, total: int) -> None:
        bar.total = total
        bar.update(done - bar.n)

    status = run_job(store, job, runner=lambda s, j: results.append(
        train_reward_model(s, config, job_id=j.id, progress=progress)))
    bar.close()
    if status is not JobStatus.COMPLETED:
        print(f"reward job {job_id}: {status.value}")
        if status is JobStatus.FAILED:
            print(job_rows.get_job(store, job_id).error.splitlines()[-1], file=sys.stderr)
        return 0 if status is JobStatus.CANCELLED else 1
    result = results[0]
    print(f"reward job {job_id}: trained on {result.labels_used} labels "
          f"({result.train_pairs} training pairs, {result.val_pairs} validation pairs)")
    for k, (model_id, path, metrics) in enumerate(zip(result.reward_model_ids, result.paths, result.metrics)):
        shown = ", ".join(f"{name} {metrics[name]:.3f}" for name in ("val_accuracy", "val_loss", "val_tie_logloss")
                          if name in metrics) or "no validation pairs"
        print(f"  reward model {model_id} (member {k + 1}/{len(result.paths)}): {shown}  [{path}]")
    return 0


def run_reward_job(store: Store, job: Job) -> None:
    """The worker's runner for `reward` jobs: the job's config is a RewardConfig as a dict."""
    from .reward import RewardConfig, train_reward_model

    known = {f.name for f in dataclasses.fields(RewardConfig)}
    unknown = sorted(set(job.config) - known)
    if unknown:
        raise InvalidInput(f"unknown reward-model setting {unknown[0]!r}; known: {', '.join(sorted(known))}")
    train_reward_model(store, RewardConfig(**job.config), job_id=job.id)
