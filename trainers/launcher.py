"""Starting and watching worker processes. Import-light (no torch), so the UI process can use it.

A job is a row in the store; `start_job` writes it and launches `python -m trainers.worker` (no shell), or the
same module under `accelerate launch --config_file FILE` for multi-GPU; `stop_job` asks its worker to stop and
`resume_job` offers it to a new one. Jobs whose worker died are found by
`reap_orphans` (dead pid, or no heartbeat for `STALE_AFTER_S`) and marked interrupted, ready to resume.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from storage import Store
from storage import jobs as job_rows
from storage.errors import InvalidInput
from storage.types import Job, JobStatus

from .job_layer import JobKind

STALE_AFTER_S = 120.0
ROOT = Path(__file__).resolve().parent.parent


def worker_command(store: Store, job_id: int, accelerate_config: str | None = None) -> list[str]:
    """The argv of a worker for `job_id` (no shell involved)."""
    module = ["-m", "trainers.worker", "--db", str(store.path.resolve()), "--job", str(job_id)]
    if accelerate_config is None:
        return [sys.executable, *module]
    if not Path(accelerate_config).is_file():
        raise InvalidInput(f"accelerate config {accelerate_config} does not exist; give a file made by `accelerate config`")
    return [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(accelerate_config), *module]


def launch_worker(store: Store, job_id: int, accelerate_config: str | None = None) -> subprocess.Popen:
    """Start the worker in its own session (it survives the UI's restarts); its output goes to the job's log file."""
    log_dir = store.data_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    with open(log_dir / f"job-{job_id}.log", "ab") as log:
        return subprocess.Popen(worker_command(store, job_id, accelerate_config), cwd=ROOT, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)


def start_job(store: Store, kind: JobKind | str, config: dict, accelerate_config: str | None = None) -> int:
    """Queue a job and launch its worker; refused while another job is active."""
    if kind not in {k.value for k in JobKind}:
        raise InvalidInput(f"unknown job kind {kind!r}; choose one of {', '.join(JobKind)}")
    job_id = job_rows.create_job(store, JobKind(kind).value, config)
    launch_worker(store, job_id, accelerate_config)
    return job_id


def resume_job(store: Store, job_id: int, accelerate_config: str | None = None) -> Job:
    """Offer a cancelled, failed, interrupted or paused job to a new worker; it continues from its last completed
    step."""
    reap_orphans(store)
    job = job_rows.requeue_job(store, job_id)
    launch_worker(store, job_id, accelerate_config)
    return job


def stop_job(store: Store, job_id: int) -> Job:
    """Ask a job to stop: its worker ends it `cancelled` within one step; a job no worker has claimed yet is
    cancelled at once. Returns the job as it stands."""
    return job_rows.request_cancel(store, job_id)


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (exited, not yet reaped by its parent) is dead for our purposes
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def reap_orphans(store: Store, now: float | None = None) -> list[int]:
    """Mark jobs whose worker is gone (dead pid, stale heartbeat, never claimed) interrupted; returns their ids."""
    now = time.time() if now is None else now
    orphans = []
    for job in job_rows.list_jobs(store):
        if job.status is JobStatus.RUNNING:
            stale = job.heartbeat is None or now - job.heartbeat > STALE_AFTER_S
            if stale or not pid_alive(job.pid):
                orphans.append(job.id)
        elif job.status is JobStatus.QUEUED:  # its worker never claimed it (a resumed job counts from the resume)
            if now - (job.heartbeat or job.created) > STALE_AFTER_S:
                orphans.append(job.id)
    if orphans:
        job_rows.mark_interrupted(store, orphans)
    return orphans
