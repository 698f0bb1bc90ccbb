"""The worker (trainers/entry/worker.py) records how a job ended (completed, failed with its traceback's tail,
cancelled), runs every job kind, and sweeps what killed workers left before a job starts. How a worker killed
mid-job resumes is tested in test_worker_faults.py."""

import pytest

from storage import JobStatus
from storage import jobs as job_rows
from trainers.entry import worker
from trainers.jobs import launcher
from trainers.jobs.layer import JobKind
from trainers.reporting import JobCancelled


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
    assert "test_worker.py" in error


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
            folder("policies/ppo-r2-renamed-not-registered"), folder("reward_models/rm-r2-renamed-not-registered-m0"),
            folder("policies/grpo-r2-renamed-not-registered")]

    job = claimed(store, "ok")
    assert worker.run_job(store, job) is JobStatus.COMPLETED
    assert all(not path.exists() for path in left) and all(path.is_dir() for path in kept)
    assert "removed 5 partial checkpoint(s)" in " ".join(job_rows.tail_logs(store, job.id))
