"""`python app.py dpo`: train a policy version with DPO on the store's labels (for example an imported preference data
set) in the terminal, as a `dpo` job with a progress bar, and register the new version.

Options are generated from `DPORun` (`--source`; `--policy vK` the version to train) and `DPOConfig` (every setting:
`--dpo-beta`, `--loss-type`, `--train-ties`, `--epochs`, `--learning-rate`, `--lora`, ...), so their help and defaults
are the fields'. Settings left out take the project's loop preset where it has them (`LOOP_DEFAULTS`: β, batch size,
epochs, learning rate, LoRA, sampling), printed when the run starts. Imports nothing heavy at module level (app.py
builds its parser from here); the run itself is `trainers.jobs.dpo_job`.

    python app.py dpo --db studio.db                                      # every label that trains, newest policy
    python app.py dpo --db studio.db --source hh-rlhf --epochs 2 --dpo-beta 0.1
    python app.py dpo --db studio.db --resume 7        # continue job 7 after a stop or a crash
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict

from storage import Store
from storage.types import JobStatus
from trainers.entry.options import add_options, given_options
from trainers.entry.terminal_job import POLICY_OPTION, new_run, report_unfinished, resumed_run, run_in_terminal
from trainers.entry.terminal_progress import StepBar
from trainers.entry.version_option import add_version_option
from trainers.jobs.follow import add_accelerate_option, launch_and_follow
from trainers.jobs.layer import JobKind
from trainers.loop.config import LoopConfig
from trainers.policy.dpo_config import DPOConfig, DPORun

RUN_SKIPPED = ("round", "settings", "policy_id")  # set by the loop, not on the command line; --policy vK (below)
# the settings taken from the project's loop preset where the options leave them out (see command_defaults)
LOOP_DEFAULTS = ("dpo_beta", "loss_type", "batch_size", "epochs", "learning_rate", "lora", "response_length",
                 "temperature", "top_p", "top_k")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `DPORun` options, `--resume`, and one option per DPOConfig field (`--dpo-beta`...)."""
    add_options(parser, DPORun, skip=RUN_SKIPPED)
    add_version_option(parser, POLICY_OPTION)
    parser.add_argument("--resume", type=int, default=None, metavar="JOB", help="continue a stopped or failed DPO job")
    add_accelerate_option(parser)
    add_options(parser.add_argument_group("DPO settings (left out: the project's loop preset gives β, the batch "
                                          "size, epochs, learning rate, LoRA, response length and sampling; the "
                                          "others' defaults as shown)"), DPOConfig)


def command_defaults(given: dict, preset: LoopConfig | None = None) -> dict:
    """The settings this command takes from the project's loop preset (`preset`; the demo's when None) where its
    options are left out (`LOOP_DEFAULTS`)."""
    from trainers.loop.config import dpo_settings

    loop = dpo_settings(preset or LoopConfig())
    return {name: loop[name] for name in LOOP_DEFAULTS if name not in given}


def run_from_args(args: argparse.Namespace, preset: LoopConfig | None = None) -> DPORun:
    given = given_options(args, DPOConfig)
    return DPORun(**given_options(args, DPORun, skip=RUN_SKIPPED), settings={**command_defaults(given, preset),
                                                                               **given})


def checked_run(args: argparse.Namespace, store: Store) -> tuple[DPORun, str]:
    """The run to start (its start policy fixed now, so a resume trains the same version) or to resume, and the line
    that says where its settings come from."""
    if args.resume is not None:
        run = resumed_run(store, args.resume, JobKind.DPO, DPORun, "a DPO")
        return run, f"resuming dpo job {args.resume} with its settings"
    return new_run(args, store, run_from_args)


def run(args: argparse.Namespace, store: Store) -> int:
    """Train in this process with a progress bar, or (--accelerate-config) through the launcher, followed here;
    every check runs before the job row is written, and a refusal is its one line."""
    from trainers.jobs.dpo_job import plan_dpo

    run, settings_line = checked_run(args, store)
    plan, _ = plan_dpo(store, run)  # every check that loads no model
    print(settings_line, file=sys.stderr)
    if args.accelerate_config is None:
        return run_here(args, store, run)
    job = launch_and_follow(store, JobKind.DPO, asdict(run), args.accelerate_config, resume=args.resume)
    if job.status is JobStatus.COMPLETED:
        from labeling.versions.winrate import registered_version
        from storage.policies import latest_policy, list_policies

        print(f"dpo job {job.id}: completed on {len(plan.examples)} labels; registered policy "
              f"{registered_version(list_policies(store), latest_policy(store).id)}")
        return 0
    return report_unfinished("dpo", job)


def run_here(args: argparse.Namespace, store: Store, run: DPORun) -> int:
    """Train in this process with a progress bar."""
    from labeling.versions.winrate import registered_version
    from storage.policies import list_policies
    from trainers.jobs.dpo_job import left_out_line, run_dpo

    def done_line(job_id: int, done) -> str:
        left_out = left_out_line(done.left_out)
        return (f"dpo job {job_id}: completed, {done.steps} steps on {done.labels} labels"
                f"{'; ' + left_out if left_out else ''}; registered policy "
                f"{registered_version(list_policies(store), done.policy_id)}")

    return run_in_terminal(
        store, JobKind.DPO, run, args.resume, "dpo",
        bar=lambda job_id: StepBar(f"dpo job {job_id}", {"loss": "dpo/loss", "accuracy": "dpo/accuracy",
                                                         "kl": "dpo/kl"}),
        train=lambda job_id, bar: run_dpo(store, run, job_id, listener=bar), done_line=done_line)
