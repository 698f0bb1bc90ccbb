"""`python app.py train-reward`: train the reward model on every label in the store, in the terminal.

The run is a `reward` job like the Train tab's (metrics, cancel, end state in the store), executed in this process with
a progress bar; bad input fails in one line before the job is created. Options are generated from `RewardConfig` (help
and defaults are the fields'; left out, the epochs, learning rate, batch size and `--lora` are the project's loop
preset's, as `loop` and `ppo` take theirs: a real chat model's, or the demo's); the README's short names are aliases:
`--lr` for `--learning-rate`, `--drop-both-bad` for `--no-both-bad-as-tie`. Versions are named as the Leaderboard names
them: `--policy vK` the version the model starts from, `--norm-policy vK` the one whose samples normalise the rewards
(`trainers.entry.version_option`; the old `--init-policy-id N` and `--policy-id N` took ids). `--accelerate-config FILE`
starts the job through the launcher (the training under `accelerate launch`) and follows it here. `--resume JOB` trains
a stopped or failed reward job again with its settings (from its start: a reward model keeps no state between steps
worth resuming, and the labels are read as they stand). Imports nothing heavy at module level (app.py builds its parser
from here).
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
from storage.types import JobStatus
from trainers.entry.options import add_options, given_options
from trainers.entry.version_option import VersionOption, add_version_option, version_id
from trainers.jobs.follow import add_accelerate_option, launch_and_follow
from trainers.jobs.launcher import open_job_here, requeue
from trainers.jobs.layer import JobKind
from trainers.jobs.stopping import stopped_exit_code
from trainers.loop.config import LoopConfig, reward_settings
from trainers.reporting import Reporter
from trainers.reward.config import RewardConfig

VERSION_OPTIONS = (
    VersionOption("--policy", "init_policy_id", "the version the model starts from (default: the project's reward "
                  "base, else the SFT policy)", ("--init-policy-id",)),
    VersionOption("--norm-policy", "policy_id", "the version whose samples normalise the rewards (default: the "
                  "newest)", ("--policy-id",)),
)
SKIPPED = ("round", *(option.field for option in VERSION_OPTIONS))  # the loop's; the versions by name (above)
PRESET_DEFAULTS = ("epochs", "learning_rate", "batch_size", "lora")  # from the project's loop preset where left out
ALIASES = {"learning_rate": ["--lr"]}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_options(parser, RewardConfig, skip=SKIPPED, aliases=ALIASES)
    for option in VERSION_OPTIONS:
        add_version_option(parser, option)
    parser.add_argument("--drop-both-bad", dest="both_bad_as_tie", action="store_false", default=None,
                        help="leave 'both bad' labels out: the same as --no-both-bad-as-tie")
    parser.add_argument("--resume", type=int, default=None, metavar="JOB",
                        help="train a stopped or failed reward job again, with its settings, from its start")
    add_accelerate_option(parser)


def config_from_args(args: argparse.Namespace, preset: LoopConfig | None = None) -> RewardConfig:
    """The options given and, where left out, `PRESET_DEFAULTS` from the loop preset `preset` (the demo's when None,
    which are `RewardConfig`'s own defaults). `--lora` or `--no-lora` against the preset's choice, without `--lr`,
    takes that kind's rate (`loop.config.REWARD_LR`): an adapter at a full fine-tune's rate stays at chance, and a full
    fine-tune at an adapter's is wrecked."""
    from trainers.loop.config import REWARD_LR

    given = given_options(args, RewardConfig, skip=SKIPPED)
    loop = reward_settings(preset or LoopConfig())
    if "lora" in given and given["lora"] != loop["lora"] and "learning_rate" not in given:
        given["learning_rate"] = REWARD_LR[given["lora"]]
    return RewardConfig(**{**{name: loop[name] for name in PRESET_DEFAULTS if name not in given}, **given})


class ProgressBar(Reporter):
    """A terminal bar over the optimiser steps of every ensemble member."""

    def __init__(self):
        from tqdm import tqdm

        self.bar = tqdm(total=1, desc="reward model", unit="step", file=sys.stderr)

    def progress(self, done: int, total: int) -> None:
        self.bar.total = total
        self.bar.update(done - self.bar.n)


def run(args: argparse.Namespace, open_store: Callable[[argparse.Namespace], Store]) -> int:
    """Check the settings, open the store (`open_store(args)`), check the labels and policy, then train as a job."""
    from trainers.entry.worker import run_job
    from trainers.jobs.reward_job import check_reward_inputs, train_reward_model
    from trainers.loop.presets import project_preset

    config_from_args(args).check()  # a bad option: one line before the store is opened
    store = open_store(args)
    if args.resume is not None:
        config = resumed_config(store, args.resume)
        settings_line = f"resuming reward job {args.resume} with its settings (it trains again from its start)"
    else:
        preset = project_preset(store)
        config, settings_line = config_from_args(args, preset.config), preset.line
        for option in VERSION_OPTIONS:
            setattr(config, option.field, version_id(store, getattr(args, option.dest), option.flag))
    config.check()
    check_reward_inputs(store, config)
    print(settings_line)  # stdout: a bad input stays one line on stderr
    if args.accelerate_config is not None:
        job = launch_and_follow(store, JobKind.REWARD, dataclasses.asdict(config), args.accelerate_config,
                                resume=args.resume)
        if job.status is not JobStatus.COMPLETED:
            return report_unfinished(store, job.id, job.status)
        from storage.reward_models import list_reward_models

        members = [m for m in list_reward_models(store) if m.job_id == job.id]
        print(f"reward job {job.id}: trained on {members[0].labels_used} labels")
        print_members([(m.id, m.path, m.metrics) for m in members])
        return 0
    if args.resume is not None:
        job = job_rows.claim_job(store, requeue(store, args.resume).id, os.getpid())
    else:
        job = open_job_here(store, JobKind.REWARD, dataclasses.asdict(config))
    job_id = job.id
    bar = ProgressBar()
    results = []
    status = run_job(store, job, runner=lambda s, j: results.append(
        train_reward_model(s, config, job_id=j.id, listener=bar)))
    bar.bar.close()
    if status is not JobStatus.COMPLETED:
        return report_unfinished(store, job_id, status)
    result = results[0]
    print(f"reward job {job_id}: trained on {result.labels_used} labels "
          f"({result.train_pairs} training pairs, {result.val_pairs} validation pairs)")
    print_members(list(zip(result.reward_model_ids, result.paths, result.metrics, strict=True)))
    return 0


def resumed_config(store: Store, job_id: int) -> RewardConfig:
    """The settings reward job `job_id` ran with, to train it again; a job of another kind is one line."""
    job = job_rows.get_job(store, job_id)
    if job.kind != JobKind.REWARD:
        raise InvalidInput(f"job {job.id} is a {job.kind} job, not a reward job; give the id of a reward job")
    return RewardConfig(**job.config)


def report_unfinished(store: Store, job_id: int, status: JobStatus) -> int:
    resume = f"; resume with --resume {job_id}" if status.resumable else ""
    print(f"reward job {job_id}: {status.value}{resume}")
    if status in (JobStatus.FAILED, JobStatus.INTERRUPTED):
        print(job_rows.get_job(store, job_id).error.splitlines()[-1], file=sys.stderr)
    return stopped_exit_code() if status is JobStatus.CANCELLED else 1


def print_members(members: list[tuple[int, str, dict]]) -> None:
    """One line per registered member: (id, path, metrics)."""
    for k, (model_id, path, metrics) in enumerate(members):
        shown = ", ".join(f"{name} {metrics[name]:.3f}" for name in ("val_accuracy", "val_loss", "val_tie_logloss")
                          if name in metrics) or "no validation pairs"
        print(f"  reward model {model_id} (member {k + 1}/{len(members)}): {shown}  [{path}]")
