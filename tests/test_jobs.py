"""Jobs: the worker records how a job ended; the launcher stops jobs and finds workers that died."""

import subprocess
import sys
import time

import pytest

from storage import Conflict, JobStatus
from storage import jobs as job_rows
from storage.metrics import read_metrics
from trainers.entry import worker
from trainers.jobs import launcher
from trainers.jobs.layer import JobKind, StoreReporter, job_reporter
from trainers.reporting import JobCancelled, Reporter


def ok(store, job):
    job_rows.add_log(store, job.id, "working")


def boom(store, job):
    raise ValueError("the reward model directory is gone")


def cancelled_midway(store, job):
    job_rows.request_cancel(store, job.id)
    if job_rows.cancel_requested(store, job.id):
        raise RuntimeError("stopped at the cancel flag")


def stopped(store, job):
    raise JobCancelled("the trainer saved its state and stopped")


@pytest.fixture
def runners(monkeypatch):
    for runner in (ok, boom, cancelled_midway, stopped):
        monkeypatch.setitem(worker.RUNNERS, runner.__name__, runner)


def claimed(store, kind):
    return job_rows.claim_job(store, job_rows.create_job(store, kind, {}), pid=1)


def test_completed(store, runners):
    job = claimed(store, "ok")
    assert worker.run_job(store, job) is JobStatus.COMPLETED
    done = job_rows.get_job(store, job.id)
    assert done.status is JobStatus.COMPLETED and done.progress == 1.0 and done.finished
    assert job_rows.tail_logs(store, job.id) == ["working"]


def test_failed_records_the_traceback_tail(store, runners):
    job = claimed(store, "boom")
    assert worker.run_job(store, job) is JobStatus.FAILED
    error = job_rows.get_job(store, job.id).error
    assert error.splitlines()[-1] == "ValueError: the reward model directory is gone"
    assert "test_jobs.py" in error


def test_cancel_flag_ends_cancelled(store, runners):
    job = claimed(store, "cancelled_midway")
    assert worker.run_job(store, job) is JobStatus.CANCELLED
    assert job_rows.get_job(store, job.id).error is None


def test_job_cancelled_ends_cancelled_without_an_error(store, runners):
    job = claimed(store, "stopped")
    assert worker.run_job(store, job) is JobStatus.CANCELLED
    assert job_rows.get_job(store, job.id).error is None


def test_every_job_kind_has_one_runner_and_keeps_its_string_in_the_store(store, monkeypatch):
    assert set(worker.RUNNERS) == set(JobKind)
    assert all(callable(runner) for runner in worker.RUNNERS.values())
    monkeypatch.setattr(launcher, "launch_worker", lambda *args: None)
    job_id = launcher.start_job(store, JobKind.REWARD, {})
    assert job_rows.get_job(store, job_id).kind == "reward" and worker.RUNNERS[job_rows.get_job(store, job_id).kind]


def test_store_reporter_logs_metrics_reports_the_phase_and_reads_the_cancel_flag(store):
    job = claimed(store, "ppo")
    heard = []

    class Listener(Reporter):
        def on_step(self, step, metrics):
            heard.append(("step", step))

        def progress(self, done, total):
            heard.append(("progress", done, total))

    reporter = StoreReporter(store, job.id, step_offset=10, phase="ppo", listener=Listener())
    reporter.on_step(1, {"ppo/kl": 0.5})
    reporter.on_step(2, {})  # nothing to log
    reporter.progress(1, 4)
    assert reporter.should_stop() is False
    assert [(r["step"], r["name"], r["value"]) for r in read_metrics(store, job.id)] == [(11, "ppo/kl", 0.5)]
    current = job_rows.get_job(store, job.id)
    assert (current.phase, current.progress) == ("ppo 1/4", 0.25)
    assert heard == [("step", 1), ("step", 2), ("progress", 1, 4)]
    job_rows.request_cancel(store, job.id)
    assert reporter.should_stop() is True


def test_only_the_main_process_reports_to_the_store(store, monkeypatch):
    job = claimed(store, "ppo")
    assert isinstance(job_reporter(store, job.id), StoreReporter)
    listener = Reporter()
    assert job_reporter(store, None, listener=listener) is listener  # no job: the listener alone
    monkeypatch.setenv("RANK", "1")
    other = job_reporter(store, job.id)
    assert type(other) is Reporter and other.should_stop() is False


def test_one_active_job_per_store(store):
    job_rows.create_job(store, "loop", {})
    with pytest.raises(Conflict, match="still running"):
        launcher.start_job(store, "ppo", {})


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


def test_a_starting_job_sweeps_what_killed_workers_left_and_keeps_every_registered_checkpoint(store, runners):
    from storage.policies import add_policy
    from storage.reward_models import add_reward_model

    def folder(relative):
        path = store.data_dir / relative
        path.mkdir(parents=True)
        (path / "config.json").write_text("{}")
        return path

    kept = [folder("policies/ppo-r1-registered"), folder("reward_models/rm-r1-registered-m0"), folder("policies/mine"),
            folder("policies/ppo-r2-registered-by-a-relative-path")]
    policy = add_policy(store, str(kept[0]), round=1)
    add_reward_model(store, str(kept[1]), 10, {}, 0.0, 1.0, policy_id=policy, round=1)
    add_policy(store, "studio-data/policies/ppo-r2-registered-by-a-relative-path", round=2)  # by an older version
    left = [folder("policies/.tmp-abc"), folder("reward_models/.staging-abc"),
            folder("policies/ppo-r2-renamed-not-registered"), folder("reward_models/rm-r2-renamed-not-registered-m0")]

    job = claimed(store, "ok")
    assert worker.run_job(store, job) is JobStatus.COMPLETED
    assert all(not path.exists() for path in left) and all(path.is_dir() for path in kept)
    assert "removed 4 partial checkpoint(s)" in " ".join(job_rows.tail_logs(store, job.id))
