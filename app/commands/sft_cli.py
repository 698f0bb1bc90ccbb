"""`python app.py sft`: fine-tune a policy version on the store's demonstrations (supervised fine-tuning, the
pipeline's first stage) in the terminal, as an `sft` job with a progress bar, and register the new version (by
default a new root: the KL reference and the SFT side of win-rate pairs from then on).

Options are generated from `SFTRun` (`--source`, `--as-root`; `--policy vK` the version to fine-tune) and `SFTConfig`
(every setting: `--epochs`, `--learning-rate`, `--lora`, ...). Settings left out take the project's loop preset where it
has them (`preset_settings`: LoRA, the learning rate and epochs), printed when the run starts. Every check (settings,
policy, demonstrations) runs before the job row is written.

    python app.py sft --db studio.db                           # every current demonstration, newest policy
    python app.py sft --db studio.db --source writers --epochs 2 --lora
    python app.py sft --db studio.db --resume 7                # continue job 7 after a stop or a crash
"""

from __future__ import annotations

import argparse
import sys

from storage import Store
from trainers.entry.options import add_options, given_options
from trainers.entry.terminal_job import POLICY_OPTION, new_run, resumed_run, run_in_terminal
from trainers.entry.terminal_progress import StepBar
from trainers.entry.version_option import VersionOption, add_version_option
from trainers.jobs.layer import JobKind
from trainers.loop.config import LoopConfig
from trainers.policy.sft_config import SFTConfig, SFTRun

RUN_SKIPPED = ("round", "settings", "policy_id")  # set by the loop, not on the command line; --policy vK (below)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_options(parser, SFTRun, skip=RUN_SKIPPED)
    add_version_option(parser, VersionOption(POLICY_OPTION.flag, POLICY_OPTION.field,
                                             "the version to fine-tune (default: the newest)", POLICY_OPTION.old_flags))
    parser.add_argument("--resume", type=int, default=None, metavar="JOB", help="continue a stopped or failed SFT job")
    add_options(parser.add_argument_group("SFT settings (left out: the project's loop preset gives LoRA, the "
                                          "learning rate and epochs; the others' defaults as shown)"), SFTConfig)


def preset_settings(loop: LoopConfig) -> dict:
    """The SFT settings a loop preset gives (`trainers.loop.sft_steps.sft_settings`): on the demo and tiny models a
    full fine-tune at 1e-3 for 6 epochs; on a real model LoRA at the preset's policy learning rate (adapters need
    about ten times a full fine-tune's rate) for 3 epochs."""
    from trainers.loop.sft_steps import sft_settings

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
    from labeling.versions.winrate import registered_version
    from storage.policies import list_policies
    from trainers.jobs.sft_job import outcome_line, plan_examples, run_sft

    run, settings_line = checked_run(args, store)
    plan_examples(store, run)  # every check that loads no model
    print(settings_line, file=sys.stderr)
    return run_in_terminal(
        store, JobKind.SFT, run, args.resume, "sft",
        bar=lambda job_id: StepBar(f"sft job {job_id}", {"loss": "sft/loss", "accuracy": "sft/token_accuracy",
                                                         "heldout": "sft/heldout_loss"}),
        train=lambda job_id, bar: run_sft(store, run, job_id, listener=bar),
        done_line=lambda job_id, outcome: outcome_line(
            job_id, outcome, registered_version(list_policies(store), outcome.policy_id)))
