"""What `ppo`, `dpo` and `sft` share when they train in the terminal: the run to start (`new_run`, its start version
fixed from `--policy vK`) or to resume (`resumed_run`), the job opened here or requeued and claimed, run under the
worker's bookkeeping with a progress bar, and its last line (`run_in_terminal`, `report_unfinished`).

    run, settings_line = new_run(args, store, run_from_args)
    return run_in_terminal(store, JobKind.DPO, run, args.resume, "dpo",
                           bar=lambda job_id: StepBar(f"dpo job {job_id}", {"loss": "dpo/loss"}),
                           train=lambda job_id, bar: run_dpo(store, run, job_id, listener=bar),
                           done_line=lambda job_id, outcome: f"dpo job {job_id}: completed")
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import asdict
from typing import Any, Callable, TypeVar

from storage import Store
from storage import jobs as job_rows
from storage.errors import InvalidInput
from storage.types import Job, JobStatus

from ..jobs.launcher import open_job_here, requeue
from ..jobs.layer import JobKind
from ..jobs.stopping import stopped_exit_code
from ..loop.config import LoopConfig
from .version_option import VersionOption, version_id

Run = TypeVar("Run")  # a job's run dataclass: PolicyRun, DPORun, SFTRun
POLICY_OPTION = VersionOption("--policy", "policy_id", "the version to train (default: the newest)", ("--policy-id",))


def resumed_run(store: Store, job_id: int, kind: JobKind, run_type: type[Run], name: str) -> Run:
    """The run job `job_id` saved, to resume it; a job of another kind is refused in one line (`name`: "a PPO",
    "an SFT"...)."""
    job = job_rows.get_job(store, job_id)
    if job.kind != kind:
        raise InvalidInput(f"job {job.id} is a {job.kind} job, not {name} job; give the id of {name} job")
    return run_type.from_dict(job.config)


def new_run(args: argparse.Namespace, store: Store,
            from_args: Callable[[argparse.Namespace, LoopConfig], Run]) -> tuple[Run, str]:
    """The run the command line asks for (`from_args(args, preset)`: the project's loop preset gives the settings
    left out), its start version (`--policy vK`, else the newest) fixed now so a resume trains the same version, and
    the line that says where its settings come from. A store without a policy: one line, nothing else said."""
    from ..jobs.policy_job import start_policy
    from ..loop.presets import project_preset

    preset = project_preset(store)
    run = from_args(args, preset.config)
    chosen = version_id(store, getattr(args, POLICY_OPTION.dest, None), POLICY_OPTION.flag)
    run.policy_id = start_policy(store, chosen).id
    return run, preset.line


def run_in_terminal(store: Store, kind: JobKind, run: Any, resume: int | None, name: str,
                    bar: Callable[[int], Any], train: Callable[[int, Any], Any],
                    done_line: Callable[[int, Any], str]) -> int:
    """Run `run` as a `kind` job in this process: job `resume` requeued and claimed, or a new job opened here; then
    `train(job_id, bar)` under the worker's bookkeeping (heartbeat, cancel, how it ended) with `bar(job_id)`, a
    terminal bar with a `.bar` to close; prints `done_line(job_id, outcome)` when it completed, else
    `report_unfinished`."""
    from .worker import run_job as run_claimed_job

    if resume is not None:
        job = job_rows.claim_job(store, requeue(store, resume).id, os.getpid())
    else:
        job = open_job_here(store, kind, asdict(run))
    progress = bar(job.id)
    outcome = []
    status = run_claimed_job(store, job, runner=lambda s, j: outcome.append(train(j.id, progress)))
    progress.bar.close()
    if status is JobStatus.COMPLETED:
        print(done_line(job.id, outcome[0]))
        return 0
    return report_unfinished(name, job_rows.get_job(store, job.id))


def report_unfinished(name: str, job: Job) -> int:
    """The last line of a job that did not complete: where it stopped and how to resume, or its error."""
    if job.status is JobStatus.CANCELLED:
        print(f"{name} job {job.id}: cancelled at {job.phase or 'its start'}; resume with --resume {job.id}")
        return stopped_exit_code()  # 130 after Ctrl-C, 143 after SIGTERM; 0 after the Train tab's Stop
    print(f"{name} job {job.id}: {job.status.value}: {job.error.splitlines()[-1]}", file=sys.stderr)
    return 1
