"""The launcher (trainers/jobs/launcher.py): one active job per store, unknown kinds refused, a stop cancels a queued
job at once and flags a running one, workers that died or never started are found, a resumed job waits for its
worker, and the worker command has no shell."""

import subprocess
import sys
import time

import pytest

from storage import Conflict, JobStatus
from storage import jobs as job_rows
from trainers.jobs import launcher


def test_one_active_job_per_store(store):
    job_rows.create_job(store, "loop", {})
    with pytest.raises(Conflict, match="still running"):
        launcher.start_job(store, "ppo", {})


def test_the_old_kind_name_starts_a_policy_job(store, monkeypatch):
    monkeypatch.setattr(launcher, "launch_worker", lambda store, job_id: None)
    assert job_rows.get_job(store, launcher.start_job(store, "ppo", {})).kind == "policy"


def test_unknown_kind_is_refused(store):
    with pytest.raises(Exception, match="unknown job kind"):
        launcher.start_job(store, "mine-bitcoin", {})
    assert job_rows.list_jobs(store) == []


def test_stop_cancels_a_queued_job_at_once_and_flags_a_running_one(store):
    queued = job_rows.create_job(store, "ppo", {})
    assert launcher.stop_job(store, queued).status is JobStatus.CANCELLED
    running = job_rows.claim_job(store, job_rows.create_job(store, "ppo", {}), pid=1)
    stopping = launcher.stop_job(store, running.id)
    assert stopping.status is JobStatus.RUNNING and stopping.cancel_requested  # the worker ends it within a step
    assert job_rows.cancel_requested(store, running.id)


def test_dead_worker_is_marked_interrupted(store):
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    job = job_rows.claim_job(store, job_rows.create_job(store, "ppo", {}), pid=child.pid)
    assert launcher.reap_orphans(store) == [job.id]
    assert job_rows.get_job(store, job.id).status is JobStatus.INTERRUPTED
    assert job_rows.requeue_job(store, job.id).status is JobStatus.QUEUED


def test_stale_heartbeat_and_never_claimed(store):
    running = job_rows.claim_job(store, job_rows.create_job(store, "ppo", {}), pid=1)  # pid 1 is alive
    assert launcher.reap_orphans(store) == []
    assert launcher.reap_orphans(store, now=time.time() + launcher.STALE_AFTER_S + 1) == [running.id]
    queued = job_rows.create_job(store, "loop", {})
    assert launcher.reap_orphans(store) == []
    assert launcher.reap_orphans(store, now=time.time() + launcher.STALE_AFTER_S + 1) == [queued]


def test_worker_command_has_no_shell(store):
    argv = launcher.worker_command(store, 7)
    assert argv[:3] == [sys.executable, "-m", "trainers.entry.worker"] and argv[-2:] == ["--job", "7"]


def test_a_job_resumed_long_after_it_was_created_waits_for_its_worker(store):
    """A resumed job is queued anew: it is not reaped as `never started` just because it was created long ago."""
    job_id = job_rows.create_job(store, "loop", {})
    job_rows.claim_job(store, job_id, pid=1)
    job_rows.mark_interrupted(store, [job_id])
    with store.write() as db:  # the job was created an hour ago
        db.execute("UPDATE jobs SET created = created - 3600 WHERE id = ?", [job_id])
    job_rows.requeue_job(store, job_id)
    assert launcher.reap_orphans(store) == []  # its worker is starting; the Train tab's refresh must not interrupt it
    assert job_rows.claim_job(store, job_id, pid=1).status is JobStatus.RUNNING
    job_rows.finish_job(store, job_id, JobStatus.CANCELLED)
    job_rows.requeue_job(store, job_id)
    later = time.time() + launcher.STALE_AFTER_S + 1
    assert launcher.reap_orphans(store, now=later) == [job_id]  # one that never starts still is
