"""`python app.py loop`: the same rounds as the Train tab's Start loop, in the terminal, with a progress bar.

Every `LoopConfig` field is an option (`--rounds`, `--labels-per-round` or `--label-budget`, `--annotator`,
`--selector`, `--ensemble`, `--policy-iterations`, `--seed`, ...), its help the field's; `--config JSON` sets any of
them on top. What is left out comes from the project's preset (`trainers.loop.presets`: the demo's defaults, as the
help shows them, or the real-model settings chosen from the project's model), printed when the loop starts with the
labels each round collects.
The loop starts from the store's newest policy version, or from the one `--from vK` names (`start_version`; not with
`--resume`), and says which when it starts. `--selector disagreement` without `--ensemble` trains an ensemble of 3.
`--accelerate-config FILE` starts the job through the launcher (each training phase under `accelerate launch`) and
follows it here. Imports nothing heavy at module level (app.py builds its parser from here)."""

from __future__ import annotations

import argparse
import os
import sys

from labeling.versions.winrate import winrate_report
from storage import Store
from storage import jobs as job_rows
from storage.errors import InvalidInput
from storage.types import JobStatus, Selector
from trainers.entry.options import add_options, given_options
from trainers.entry.terminal_progress import TerminalProgress
from trainers.jobs.follow import add_accelerate_option, launch_and_follow
from trainers.jobs.launcher import open_job_here, reap_orphans, requeue
from trainers.jobs.layer import JobKind
from trainers.jobs.stopping import stopped_exit_code
from trainers.loop.config import LoopConfig, collects_labels, settings_from_json
from trainers.loop.job_summary import job_summary
from trainers.loop.loop_rewards import rlvr_line

DISAGREEMENT_ENSEMBLE = 3  # the ensemble `--selector disagreement` trains when `--ensemble` is not given


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_options(parser, LoopConfig, aliases={"start_version": ["--from"]})
    parser.add_argument("--config", default="{}", metavar="JSON",
                        help='LoopConfig settings as a JSON object, applied on top of the options, e.g. '
                             '\'{"kl_coef": 0.2, "lora": true}\'')
    parser.add_argument("--resume", type=int, default=None, metavar="JOB", help="continue a stopped or killed loop job")
    add_accelerate_option(parser)


def config_from_args(args: argparse.Namespace, preset: LoopConfig | None = None) -> LoopConfig:
    """The options given, then the JSON settings on top; the rest keeps the project's preset (`preset`; the demo's
    LoopConfig defaults when None), or its RLVR settings when the reward is the functions alone."""
    from trainers.loop.presets import loop_config

    given = given_options(args, LoopConfig)
    if given.get("selector") == Selector.DISAGREEMENT and "ensemble" not in given:
        given["ensemble"] = DISAGREEMENT_ENSEMBLE
    return loop_config(preset or LoopConfig(), {**given, **settings_from_json(args.config)})


def project_config(args: argparse.Namespace, store: Store) -> LoopConfig:
    """The loop's settings on this store: the project's preset (said in one line), the options on top; checked
    against the store (prompts, policy, context) before any job row is written; the labels each round collects said
    in one line too."""
    from trainers.loop.presets import project_preset
    from trainers.loop.prompt_use import check_against_store
    from trainers.loop.sft_steps import sft_offer
    from trainers.loop.start_version import start_line

    preset = project_preset(store)
    config = config_from_args(args, preset.config)
    check_against_store(config, store)
    print(preset.line)  # stdout: a bad input stays one line on stderr
    if collects_labels(config):  # a loop on the reward functions alone collects none
        print(f"labels: {config.schedule} (check pairs included)")
    else:
        print(rlvr_line(config))
    print(start_line(store, config))
    if (offer := sft_offer(config, store)) is not None:
        print(offer)
    return config


def run(args: argparse.Namespace, store: Store) -> int:
    if args.resume is not None and (args.start_version or settings_from_json(args.config).get("start_version")):
        raise InvalidInput(f"--from and --resume do not go together: job {args.resume} goes on from where it stopped; "
                           "drop --from, or start a new loop from that version without --resume")
    if args.accelerate_config is not None:
        settings = None if args.resume is not None else project_config(args, store).to_dict()
        job = launch_and_follow(store, JobKind.LOOP, settings, args.accelerate_config, resume=args.resume)
        return report_end(store, job.id, job.status)
    return run_here(args, store)


def run_here(args: argparse.Namespace, store: Store) -> int:
    """The loop in this process, with a progress bar (plain lines when the output is not a terminal)."""
    from trainers.entry.worker import run_job
    from trainers.loop.rounds import Loop

    if args.resume is not None:
        job = job_rows.claim_job(store, requeue(store, args.resume).id, os.getpid())
    else:
        settings = project_config(args, store).to_dict()
        reap_orphans(store)
        unfinished = unfinished_loop_line(store)
        if unfinished:
            print(unfinished)
        job = open_job_here(store, JobKind.LOOP, settings)
    job_id = job.id
    shown = TerminalProgress("loop")
    status = run_job(store, job, runner=lambda s, j: Loop(s, j, log=shown.log, progress=shown.progress).run())
    shown.close()
    return report_end(store, job_id, status)


def resume_command(store: Store, job_id: int) -> str:
    return f"python app.py loop --resume {job_id} --db {store.path}"


def unfinished_loop_line(store: Store) -> str | None:
    """When the store's newest loop job stopped before its end (Ctrl-C, Stop, a crash): that a new job starts, and
    how to continue that one instead."""
    loops = [job for job in job_rows.list_jobs(store, limit=20) if job.kind == JobKind.LOOP]
    if not loops or not loops[0].status.resumable:
        return None
    job = loops[0]
    return (f"job {job.id} (loop) is {job.status.value} at {job.phase or 'its start'}; this starts a new loop job "
            f"(to continue job {job.id} instead: {resume_command(store, job.id)})")


def report_end(store: Store, job_id: int, status: JobStatus) -> int:
    """The job's end: what it achieved (`job_summary`), or its status and the newest version's win rate against the
    SFT policy as the labels stand; how to continue a job that stopped early."""
    summary = job_summary(store, job_rows.get_job(store, job_id))  # "job 3 (loop) completed: made v1–v3 ..."
    print(summary or f"loop job {job_id}: {status.value}")
    latest = winrate_report(store, rounds=0).latest()
    if summary is None and latest is not None:
        print(latest.line())
    if status in (JobStatus.FAILED, JobStatus.INTERRUPTED):
        print(job_rows.get_job(store, job_id).error.splitlines()[-1], file=sys.stderr)
    if status is JobStatus.PAUSED:
        print(f"{job_rows.get_job(store, job_id).phase}; resume with --resume {job_id}")
    elif status.resumable:
        print(f"loop job {job_id} stopped at {job_rows.get_job(store, job_id).phase or 'its start'}; continue it with "
              f"{resume_command(store, job_id)}")
    if status is JobStatus.CANCELLED:
        return stopped_exit_code()  # 130 after Ctrl-C, 143 after SIGTERM; 0 after the Train tab's Stop
    return 0 if status in (JobStatus.COMPLETED, JobStatus.PAUSED) else 1
