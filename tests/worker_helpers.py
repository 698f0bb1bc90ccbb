"""Killing a job's worker from inside at a chosen call, and resuming it: the helpers of the worker-fault tests.

    run_dying_worker(store, job_id, "trainers.reward.trainer:preference_loss")  # SIGKILLed in its first step
    assert_interrupted(store, job_id)
"""

import os
import signal
import subprocess
import time
from functools import partial
from pathlib import Path

from storage import JobStatus
from storage import jobs as job_rows
from storage.policies import list_policies
from tests import helpers
from trainers.jobs.launcher import reap_orphans, resume_job, worker_command

ROOT = Path(__file__).resolve().parent.parent
# `python -c DIE_IN module:attr.path N --db ... --job ...`: the worker, SIGKILLed on the N-th call of
# `module:attr.path`, so everything done before that call is on disk and nothing after it is.
DIE_IN = """
import importlib, os, signal, sys
target, nth = sys.argv.pop(1), int(sys.argv.pop(1))
module_name, _, attribute = target.partition(":")
owner_path, _, name = attribute.rpartition(".")
owner = importlib.import_module(module_name)
for part in filter(None, owner_path.split(".")):
    owner = getattr(owner, part)
original, calls = getattr(owner, name), []

def hook(*args, **kwargs):
    calls.append(1)
    if len(calls) == nth:
        os.kill(os.getpid(), signal.SIGKILL)
    return original(*args, **kwargs)

setattr(owner, name, hook)
from trainers.entry.worker import main
sys.exit(main(sys.argv[1:]))
"""


wait_for = partial(helpers.wait_for, timeout=300, every=0.05)  # catch short phases


def run_dying_worker(store, job_id: int, target: str, nth: int = 1) -> None:
    """Run the job (requeued unless new) in a worker SIGKILLed on the `nth` call of `target` (module:attr.path)."""
    if job_rows.get_job(store, job_id).status is not JobStatus.QUEUED:
        job_rows.requeue_job(store, job_id)
    argv = worker_command(store, job_id)
    done = subprocess.run([argv[0], "-c", DIE_IN, target, str(nth), *argv[3:]], cwd=ROOT, capture_output=True,
                          timeout=600)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()[-2000:]


def stop_worker(store, job_id: int) -> None:
    """Kill the job's worker if a failed assertion left it running (it must not outlive the test)."""
    job = job_rows.get_job(store, job_id)
    if job.status.active and job.pid:
        try:
            os.kill(job.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def assert_interrupted(store, job_id: int) -> None:
    wait_for(lambda: reap_orphans(store) == [job_id], timeout=30)
    job = job_rows.get_job(store, job_id)
    assert job.status is JobStatus.INTERRUPTED and "resume" in job.error


def kill_in_step_and_resume(store, job_id: int, target: str, step: int) -> float:
    """Run the job in a worker SIGKILLed in training step `step` (the `step`-th call of `target`, module:attr.path),
    check it is marked interrupted with no version registered, resume it in a new worker and wait until it completes;
    the time of the kill. No worker outlives the call."""
    policies = len(list_policies(store))
    try:
        run_dying_worker(store, job_id, target, nth=step)
        killed = time.time()
        assert_interrupted(store, job_id)
        assert len(list_policies(store)) == policies
        resume_job(store, job_id)
        wait_for(lambda: not job_rows.get_job(store, job_id).status.active, timeout=600)
    finally:
        stop_worker(store, job_id)
    job = job_rows.get_job(store, job_id)
    assert job.status is JobStatus.COMPLETED, job.error
    return killed


def logged_steps(store, job_id: int, metric: str) -> list[tuple[int, float]]:
    """(step, time written) of each value of `metric` the job logged, by step."""
    return store.db().execute("SELECT step, created FROM metrics WHERE job_id = ? AND name = ? ORDER BY step",
                              [job_id, metric]).fetchall()
