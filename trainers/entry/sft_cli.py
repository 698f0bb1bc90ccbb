"""`python app.py sft`: fine-tune a policy version on the store's demonstrations (supervised fine-tuning, the
pipeline's first stage) in the terminal, as an `sft` job with a progress bar, and register the new version (by
default a new root: the KL reference and the SFT side of win-rate pairs from then on).

Options are generated from `SFTRun` (`--policy`, `--source`, `--as-root`) and `SFTConfig` (every setting: `--epochs`,
`--learning-rate`, `--lora`, ...). Settings left out take the project's loop preset where it has them
(`preset_settings`: LoRA, the learning rate and epochs), printed when the run starts. Every check (settings, policy,
demonstrations) runs before the job row is written.

    python app.py sft --db studio.db                           # every current demonstration, newest policy
    python app.py sft --db studio.db --source writers --epochs 2 --lora
    python app.py sft --db studio.db --resume 7                # continue job 7 after a stop or a crash
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import asdict

from storage import Store
from storage import jobs as job_rows
from storage.types import JobStatus

from ..jobs.launcher import requeue
from ..jobs.layer import JobKind
from ..loop.config import LoopConfig
from ..policy.sft_config import SFTConfig, SFTRun
from .options import add_options, given_options
from .ppo_cli import new_run, report_unfinished, resumed_run
from .terminal_progress import StepBar

RUN_SKIPPED = ("round", "settings")
RUN_ALIASES = {"policy_id": ["--policy"]}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_options(parser, SFTRun, skip=RUN_SKIPPED, aliases=RUN_ALIASES)
    parser.add_argument("--resume", type=int, default=None, metavar="JOB", help="continue a stopped or failed SFT job")
    add_options(parser.add_argument_group("SFT settings (left out: the project's loop preset gives LoRA, the "
                                          "learning rate and epochs; the others' defaults as shown)"), SFTConfig)


def preset_settings(loop: LoopConfig) -> dict:
    """The SFT settings a loop preset gives (`trainers.loop.sft_steps.sft_settings`): on the demo and tiny models a
    full fine-tune at 1e-3 for 6 epochs; on a real model LoRA at the preset's policy learning rate (adapters need
    about ten times a full fine-tune's rate) for 3 epochs."""
    from ..loop.sft_steps import sft_settings

    settings = sft_settings(loop, 0)
    return {name: settings[name] for name in ("lora", "learning_rate", "epochs")}


def run_from_args(args: argparse.Namespace, preset: LoopConfig | None = None) -> SFTRun:
    given = given_options(args, SFTConfig)
    defaults = {k: v for k, v in preset_settings(preset or LoopConfig()).items() if k not in given}
    return SFTRun(**given_options(args, SFTRun, skip=RUN_SKIPPED), settings={**defaults, **given})


def checked_run(args: argparse.Namespace, store: Store) -> tuple[SFTRun, str]:
    """The run to start (its start policy fixed now, so a resume trains the same version) or to resume, and the line
    that says where its settings come from."""
    if args.resume is not None:
        run = resumed_run(store, args.resume, JobKind.SFT, SFTRun, "an SFT")
        return run, f"resuming sft job {args.resume} with its settings"
    return new_run(args, store, run_from_args)


def run(args: argparse.Namespace, store: Store) -> int:
    """Train in this process with a progress bar; a refusal is its one line, before any job row."""
    from ..jobs.sft_job import outcome_line, plan_examples, run_sft
    from .worker import run_job as run_claimed_job

    run, settings_line = checked_run(args, store)
    plan_examples(store, run)  # every check that loads no model
    print(settings_line, file=sys.stderr)
    if args.resume is not None:
        job_id = requeue(store, args.resume).id
    else:
        job_id = job_rows.create_job(store, JobKind.SFT.value, asdict(run))
    job = job_rows.claim_job(store, job_id, os.getpid())
    bar = StepBar(f"sft job {job_id}",
                  {"loss": "sft/loss", "accuracy": "sft/token_accuracy", "heldout": "sft/heldout_loss"})
    outcome = []
    status = run_claimed_job(store, job, runner=lambda s, j: outcome.append(run_sft(s, run, j.id, listener=bar)))
    bar.bar.close()
    if status is JobStatus.COMPLETED:
        from labeling.winrate import registered_version
        from storage.policies import list_policies

        print(outcome_line(job_id, outcome[0], registered_version(list_policies(store), outcome[0].policy_id)))
        return 0
    return report_unfinished("sft", job_rows.get_job(store, job_id))
