"""Jobs: long work done by a worker process, which reports status, heartbeat, progress and logs here."""

from __future__ import annotations

import json
import time

from .db import Store
from .errors import Conflict, NotFound
from .job_warnings import acknowledge_warnings
from .types import Job, JobStatus

ACTIVE = (JobStatus.QUEUED.value, JobStatus.RUNNING.value)
BESIDE_TRAINING = "arena"  # the job kind that runs beside a training job (`storage.arena`: an arena's answers)
RENAMED_KINDS = {"ppo": "policy"}  # old stored kind -> its name now (m021_policy_job_kind renames the rows)


def _row(row: dict) -> Job:
    launch = json.loads(row["launch"]) if row["launch"] else None
    kind = RENAMED_KINDS.get(row["kind"], row["kind"])
    return Job(row["id"], kind, json.loads(row["config"]), JobStatus(row["status"]), row["pid"],
               row["heartbeat"], bool(row["cancel_requested"]), row["error"], row["phase"], row["progress"],
               row["created"], row["started"], row["finished"], launch)


def create_job(store: Store, kind: str, config: dict, launch: dict | None = None) -> int:
    """Queue a job; refused while another job of this store is queued or running (one training job at a time; an
    arena's answers run beside it, `storage.arena`).
    `launch`: how its training phases run (an accelerate config, described); None: in its worker process."""
    with store.write() as db:
        busy = db.execute("SELECT id, kind, pid FROM jobs WHERE status IN (?, ?) AND kind != ? LIMIT 1",
                          [*ACTIVE, BESIDE_TRAINING]).fetchone()
        if busy:
            process = f" in process {busy[2]}" if busy[2] else ""
            raise Conflict(f"job {busy[0]} ({busy[1]}) is still running{process}; stop it (Ctrl-C in its terminal, "
                           "or Stop in the Train tab) or wait for it to end before starting another")
        cursor = db.execute("INSERT INTO jobs (kind, config, status, created, launch) VALUES (?, ?, ?, ?, ?)",
                            [kind, json.dumps(config), JobStatus.QUEUED.value, time.time(),
                             json.dumps(launch) if launch is not None else None])
        return cursor.lastrowid


def get_job(store: Store, job_id: int) -> Job:
    rows = list(store.db().query("SELECT * FROM jobs WHERE id = ?", [job_id]))
    if not rows:
        raise NotFound(f"job {job_id} does not exist; see the list of jobs")
    return _row(rows[0])


def list_jobs(store: Store, limit: int = 100, with_arena: bool = False) -> list[Job]:
    """The newest jobs first; the arena's (`storage.arena`, answers to people's prompts) only when asked: the Train
    and Curves tabs follow training jobs."""
    kinds = "" if with_arena else f"WHERE kind != '{BESIDE_TRAINING}' "
    return [_row(r) for r in store.db().query(f"SELECT * FROM jobs {kinds}ORDER BY id DESC LIMIT ?", [limit])]


def claim_job(store: Store, job_id: int, pid: int) -> Job:
    """Mark a queued (or resumed) job running under `pid`."""
    now = time.time()
    with store.write() as db:
        cursor = db.execute(
            "UPDATE jobs SET status = ?, pid = ?, heartbeat = ?, started = coalesce(started, ?), finished = NULL,"
            " error = NULL WHERE id = ? AND status = ?",
            [JobStatus.RUNNING.value, pid, now, now, job_id, JobStatus.QUEUED.value],
        )
        if cursor.rowcount == 0:
            raise Conflict(f"job {job_id} is not waiting to start; it may already be running or finished")
    return get_job(store, job_id)


def heartbeat(store: Store, job_id: int, phase: str | None = None, progress: float | None = None) -> bool:
    """Record that the worker is alive (and where it is); returns True when a cancel was requested."""
    with store.write() as db:
        db.execute(
            "UPDATE jobs SET heartbeat = ?, phase = coalesce(?, phase), progress = coalesce(?, progress) WHERE id = ?",
            [time.time(), phase, progress, job_id],
        )
        return bool(db.execute("SELECT cancel_requested FROM jobs WHERE id = ?", [job_id]).fetchone()[0])


def cancel_requested(store: Store, job_id: int) -> bool:
    row = store.db().execute("SELECT cancel_requested FROM jobs WHERE id = ?", [job_id]).fetchone()
    return bool(row and row[0])


def request_cancel(store: Store, job_id: int) -> Job:
    job = get_job(store, job_id)
    with store.write() as db:
        if job.status is JobStatus.QUEUED:
            db.execute("UPDATE jobs SET status = ?, finished = ?, cancel_requested = 1 WHERE id = ?",
                       [JobStatus.CANCELLED.value, time.time(), job_id])
        elif job.status is JobStatus.RUNNING:
            db.execute("UPDATE jobs SET cancel_requested = 1 WHERE id = ?", [job_id])
    return get_job(store, job_id)


def finish_job(store: Store, job_id: int, status: JobStatus, error: str | None = None) -> None:
    with store.write() as db:
        db.execute("UPDATE jobs SET status = ?, error = ?, finished = ?, progress = CASE WHEN ? = 'completed'"
                   " THEN 1.0 ELSE progress END WHERE id = ?",
                   [status.value, error, time.time(), status.value, job_id])


def pause_job(store: Store, job_id: int, reason: str) -> None:
    """A loop stopped itself on a failure warning: status `paused`, the reason (`paused: <rule>: <title>`) as its
    phase; resume continues it."""
    with store.write() as db:
        db.execute("UPDATE jobs SET status = ?, phase = ?, error = NULL, finished = ? WHERE id = ?",
                   [JobStatus.PAUSED.value, reason, time.time(), job_id])


def requeue_job(store: Store, job_id: int) -> Job:
    """Offer a stopped, failed, interrupted or paused job to a worker again (resume), if no other job is active.
    Resuming a paused job acknowledges its warnings: it does not pause again for them.

    Its heartbeat is set to now: a queued job's worker is given from then on (not from `created`) to claim it. Its
    `started` moves on by the time it stood stopped, so the time since `started` is the time it has run.
    """
    job = get_job(store, job_id)
    if job.status.active or job.status is JobStatus.COMPLETED:
        raise Conflict(f"job {job_id} is {job.status.value}; only a cancelled, failed, interrupted or paused job can "
                       "resume")
    with store.write() as db:
        busy = db.execute("SELECT id FROM jobs WHERE status IN (?, ?) AND id != ? AND kind != ?",
                          [*ACTIVE, job_id, BESIDE_TRAINING]).fetchone()
        if busy:
            raise Conflict(f"job {busy[0]} is still running; stop it or wait for it before resuming job {job_id}")
        now = time.time()
        if job.status is JobStatus.PAUSED:
            acknowledge_warnings(db, job_id, now)
        db.execute("UPDATE jobs SET status = ?, cancel_requested = 0, pid = NULL, heartbeat = ?,"
                   " started = started + (? - coalesce(finished, ?)), finished = NULL WHERE id = ?",
                   [JobStatus.QUEUED.value, now, now, now, job_id])
    return get_job(store, job_id)


def set_launch(store: Store, job_id: int, launch: dict | None) -> None:
    """Change how a stopped job's training phases run (a resume under another accelerate config)."""
    with store.write() as db:
        db.execute("UPDATE jobs SET launch = ? WHERE id = ?",
                   [json.dumps(launch) if launch is not None else None, job_id])


def mark_interrupted(store: Store, job_ids: list[int]) -> None:
    with store.write() as db:
        for job_id in job_ids:
            db.execute("UPDATE jobs SET status = ?, finished = ?, error = coalesce(error, ?) "
                       "WHERE id = ? AND status IN (?, ?)",
                       [JobStatus.INTERRUPTED.value, time.time(),
                        "the worker process stopped unexpectedly; resume to continue", job_id, *ACTIVE])


def add_log(store: Store, job_id: int, line: str) -> None:
    with store.write() as db:
        db.execute("INSERT INTO job_logs (job_id, created, line) VALUES (?, ?, ?)", [job_id, time.time(), line])


def tail_logs(store: Store, job_id: int, n: int = 20) -> list[str]:
    rows = store.db().execute("SELECT line FROM job_logs WHERE job_id = ? ORDER BY id DESC LIMIT ?", [job_id, n])
    return [r[0] for r in rows.fetchall()][::-1]
