"""The job worker: `python -m trainers.entry.worker --db PATH --job ID` claims a job and runs it to an end state.

It heartbeats from a background thread, and records `completed`, `cancelled` (the runner raised JobCancelled, or
the cancel flag was set, or Ctrl-C / SIGTERM reached it: `trainers.jobs.stopping`), `interrupted` (a process of a
launched training phase was killed: resume continues) or `failed` with the tail of the traceback. `RUNNERS` is the
one table of what each job kind runs. The worker is one process; a job with an accelerate config runs its training
phases under `accelerate launch` (`trainers.jobs.phase_launch`), and a config asking for more GPUs than this machine
has fails the job at once.
Before running, it removes the partial checkpoints a killed worker left behind (never registered, only disk).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import threading
from pathlib import Path
from typing import Callable

from storage import Store
from storage import jobs as job_rows
from storage.policies import list_policies
from storage.reward_models import list_reward_models
from storage.types import Job, JobStatus

from ..export import job as export_job
from ..jobs import arena_job, dpo_job, policy_job, reward_job, sft_job
from ..jobs.layer import POLICIES_FOLDER, POLICY_PREFIXES, STAGING_PREFIX, JobKind, error_tail
from ..jobs.phase_launch import PhaseFailed, PhaseInterrupted, check_machine
from ..jobs.stopping import stop_on_signals
from ..loop import rounds
from ..reporting import JobCancelled, JobPaused

Runner = Callable[[Store, Job], None]
RUNNERS: dict[JobKind, Runner] = {  # what a worker runs for each kind of job
    JobKind.REWARD: reward_job.run_job,
    JobKind.POLICY: policy_job.run_job,
    JobKind.DPO: dpo_job.run_job,
    JobKind.SFT: sft_job.run_job,
    JobKind.LOOP: rounds.run_job,
    JobKind.EXPORT: export_job.run_job,
    JobKind.ARENA: arena_job.run_job,
}
HEARTBEAT_S = 2.0
# What a worker killed mid-write leaves in the data folder: a policy saved under a temporary name before its rename
# (trainers.jobs.policy_job), reward-model members staged before registration (trainers.jobs.reward_job), PPO or GRPO
# state being written.
# One job runs per store at a time, so when a job starts none of these belongs to a live writer.
PARTIAL_CHECKPOINTS = (f"{POLICIES_FOLDER}/{STAGING_PREFIX}*",
                       f"{reward_job.REWARD_MODELS_FOLDER}/{reward_job.STAGING_PREFIX}*", "ppo/*/.state-*.tmp")
# Checkpoints a worker renamed to their final name but was killed before registering in the store.
FINAL_CHECKPOINTS = (*(f"{POLICIES_FOLDER}/{prefix}*" for prefix in POLICY_PREFIXES),
                     f"{reward_job.REWARD_MODELS_FOLDER}/{reward_job.MODEL_PREFIX}*")


class Heartbeat(threading.Thread):
    """Writes the job's heartbeat every few seconds until stopped."""

    def __init__(self, store: Store, job_id: int):
        super().__init__(daemon=True)
        self.store, self.job_id = store, job_id
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(HEARTBEAT_S):
            try:
                job_rows.heartbeat(self.store, self.job_id)
            except Exception:  # a locked store for a moment must not kill the job; the next beat retries
                pass


def sweep_partial_checkpoints(store: Store) -> list[Path]:
    """Delete what killed workers left under the store's data folder (partial checkpoints, and complete ones never
    registered); returns what was removed."""
    registered = {Path(p.path).name for p in list_policies(store)}
    registered |= {Path(m.path).name for m in list_reward_models(store)}
    leftovers = [path for pattern in PARTIAL_CHECKPOINTS for path in sorted(store.data_dir.glob(pattern))]
    leftovers += [path for pattern in FINAL_CHECKPOINTS for path in sorted(store.data_dir.glob(pattern))
                  if path.name not in registered]  # names are unique (a random suffix); paths may be relative
    for path in leftovers:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    return leftovers


def run_job(store: Store, job: Job, runner: Runner | None = None) -> JobStatus:
    """Run a claimed job (with its kind's runner, or `runner(store, job)`) and record how it ended."""
    removed = sweep_partial_checkpoints(store) if job.kind != JobKind.ARENA else []  # it runs beside training
    if removed:
        job_rows.add_log(store, job.id, f"removed {len(removed)} partial checkpoint(s) left by a stopped worker")
    heartbeat = Heartbeat(store, job.id)
    heartbeat.start()
    try:
        if job.launch is not None:
            check_machine(job.launch)
        with stop_on_signals(store, job.id):
            (runner or RUNNERS[job.kind])(store, job)
    except (JobCancelled, KeyboardInterrupt):  # Stop, or Ctrl-C / SIGTERM (twice: at once)
        job_rows.finish_job(store, job.id, JobStatus.CANCELLED)
        return JobStatus.CANCELLED
    except PhaseInterrupted as exc:
        job_rows.finish_job(store, job.id, JobStatus.INTERRUPTED, str(exc))
        return JobStatus.INTERRUPTED
    except JobPaused as paused:
        job_rows.pause_job(store, job.id, str(paused))
        return JobStatus.PAUSED
    except BaseException as exc:
        status = JobStatus.CANCELLED if job_rows.cancel_requested(store, job.id) else JobStatus.FAILED
        tail = exc.tail if isinstance(exc, PhaseFailed) else error_tail(exc)  # its last line names the error
        job_rows.finish_job(store, job.id, status, None if status is JobStatus.CANCELLED else tail)
        if not isinstance(exc, Exception):
            raise
        return status
    finally:
        heartbeat.stopped.set()
    status = JobStatus.CANCELLED if job_rows.cancel_requested(store, job.id) else JobStatus.COMPLETED
    job_rows.finish_job(store, job.id, status)
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run one studio job (started by the UI or the CLI).")
    parser.add_argument("--db", required=True)
    parser.add_argument("--job", type=int, required=True)
    args = parser.parse_args(argv)
    store = Store(args.db)
    status = run_job(store, job_rows.claim_job(store, args.job, os.getpid()))
    print(f"job {args.job}: {status.value}", file=sys.stderr)
    return 0 if status in (JobStatus.COMPLETED, JobStatus.CANCELLED, JobStatus.PAUSED) else 1


if __name__ == "__main__":
    sys.exit(main())
