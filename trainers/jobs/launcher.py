"""Starting and watching worker processes. Import-light (no torch), so the UI process can use it.

A job is a row in the store; `start_job` writes it and launches `python -m trainers.entry.worker` (no shell), one
process that runs the job (the loop samples and waits for labels there). With an accelerate config (checked here, in one
line, before anything starts; recorded with the job) each training phase runs as its own `accelerate launch` on several
processes (`trainers.jobs.phase_launch`). `stop_job` asks the worker to stop and `resume_job` offers the job to a new
one. Jobs whose worker died are found by `reap_orphans` (dead pid, or no heartbeat for `STALE_AFTER_S`) and marked
interrupted, ready to resume.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from storage import Store
from storage import jobs as job_rows
from storage.arena import arena_prompt, create_arena_job
from storage.errors import InvalidInput
from storage.jobs import RENAMED_KINDS
from storage.types import Job, JobStatus

from .launch_config import read_launch_config
from .layer import JobKind

STALE_AFTER_S = 120.0
ROOT = Path(__file__).resolve().parents[2]  # the repository: workers run from there


def worker_command(store: Store, job_id: int) -> list[str]:
    """The argv of a worker for `job_id` (no shell involved)."""
    return [sys.executable, "-m", "trainers.entry.worker", "--db", str(store.path.resolve()), "--job", str(job_id)]


def job_log_path(store: Store, job_id: int) -> Path:
    """The file a job's worker (and its training phases' processes) write their output to."""
    return store.data_dir / "logs" / f"job-{job_id}.log"


def launch_worker(store: Store, job_id: int) -> subprocess.Popen:
    """Start the worker in its own session (it survives the UI's restarts); its output goes to the job's log file."""
    log_path = job_log_path(store, job_id)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(worker_command(store, job_id), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)


def start_job(store: Store, kind: JobKind | str, config: dict, accelerate_config: str | Path | None = None) -> int:
    """Queue a job and launch its worker; refused while another job is active. With `accelerate_config` (checked
    first) each of its training phases runs under `accelerate launch --config_file accelerate_config`."""
    if kind not in {k.value for k in JobKind} | set(RENAMED_KINDS):
        raise InvalidInput(f"unknown job kind {kind!r}; choose one of {', '.join(JobKind)}")
    launch = read_launch_config(accelerate_config).to_dict() if accelerate_config is not None else None
    job_id = job_rows.create_job(store, JobKind(RENAMED_KINDS.get(kind, kind)).value, config, launch)
    launch_worker(store, job_id)
    return job_id


def start_arena_job(store: Store, user: str, prompt_text: str, config: dict) -> int:
    """Store an arena prompt (`storage.arena`) and queue its answers for `user` in one transaction (refused while
    `user` has answers on the way), then launch the worker; it runs beside any training job."""
    with store.write():
        config = {**config, "prompt_id": arena_prompt(store, prompt_text)}
        job_id = create_arena_job(store, user, config)
    launch_worker(store, job_id)
    return job_id


def open_job_here(store: Store, kind: JobKind, config: dict) -> Job:
    """A job run by this process (a headless command): its row written and claimed under this process's id; a job
    whose process is gone is found first (`reap_orphans`), so it no longer blocks the new one."""
    reap_orphans(store)
    return job_rows.claim_job(store, job_rows.create_job(store, kind.value, config), os.getpid())


def resume_job(store: Store, job_id: int, accelerate_config: str | Path | None = None) -> Job:
    """Offer a cancelled, failed, interrupted or paused job to a new worker; it continues from its last completed step,
    under `accelerate_config` when given, else under the config it ran with (read again: it may have changed)."""
    recorded = job_rows.get_job(store, job_id).launch
    path = accelerate_config if accelerate_config is not None else (recorded or {}).get("config_file")
    launch = read_launch_config(path).to_dict() if path is not None else None
    requeue(store, job_id)
    if launch != recorded:
        job_rows.set_launch(store, job_id, launch)
    launch_worker(store, job_id)
    return job_rows.get_job(store, job_id)


def requeue(store: Store, job_id: int) -> Job:
    """Queue a cancelled, failed, interrupted or paused job again, for a worker here or a launched one; a job whose
    worker died (killed, out of memory) while its row still says running is found first and counts as interrupted."""
    reap_orphans(store)
    return job_rows.requeue_job(store, job_id)


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
    for job in job_rows.list_jobs(store, with_arena=True):
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
