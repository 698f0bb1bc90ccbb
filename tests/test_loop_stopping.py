"""A headless `loop` stopped by Ctrl-C (SIGINT), SIGTERM or SIGKILL: no job is left reading as running (in the store,
in `status`), the first two end the job `cancelled` within a step and say how to continue it, and the next `loop`
says how to resume the stopped one instead of being refused. The loops wait for people's labels (the human
annotator), a step that checks the stop flag every 2 s, so each signal lands in a known place. A loop stopped by
SIGINT exits 130, by SIGTERM 143, as shells report, so a script tells it from a completed one."""

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from storage import JobStatus
from storage import jobs as job_rows
from tests import helpers

ROOT = Path(__file__).resolve().parent.parent
WAITING_LOOP = ["--rounds", "1", "--labels-per-round", "5", "--annotator", "human", "--config",
                '{"prompts_per_round": 4, "queue_reserve": 0}']


def start_loop(store, *extra: str) -> subprocess.Popen:
    """`python app.py loop` on the store as a terminal runs it (Ctrl-C not ignored, whatever the test runner does)."""
    return subprocess.Popen([sys.executable, "app.py", "loop", "--db", str(store.path), *WAITING_LOOP, *extra],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def waiting_job(store, job_id: int, loop: subprocess.Popen) -> job_rows.Job:
    """The job once its loop waits for people's labels."""
    def waiting() -> job_rows.Job | None:
        assert loop.poll() is None, loop.communicate()[1][-2000:]
        job = ([job for job in job_rows.list_jobs(store) if job.id == job_id] or [None])[0]
        return job if job is not None and "waiting for labels" in (job.phase or "") else None

    return helpers.wait_for(waiting, timeout=300, every=0.5)


def status_lines(store) -> list[str]:
    result = subprocess.run([sys.executable, "app.py", "status", "--db", str(store.path)], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_a_stopped_loop_leaves_no_running_job_and_the_next_loop_says_how_to_resume_it(demo_store, sig):
    loop = start_loop(demo_store)
    job = waiting_job(demo_store, 1, loop)
    assert job.status is JobStatus.RUNNING and job.pid == loop.pid
    loop.send_signal(sig)
    out, err = loop.communicate(timeout=60)  # within a step: the wait for labels looks every 2 s

    ended = job_rows.get_job(demo_store, 1)
    if sig is signal.SIGKILL:  # nothing ran on the way out: whoever reads the job next finds its process gone
        assert ended.status is JobStatus.RUNNING
        assert status_lines(demo_store)[:2] == [
            f"job 1 loop: interrupted {ended.progress:.0%} · {ended.phase}",
            f"  resume: python app.py loop --resume 1 --db {demo_store.path}"]
    else:
        assert ended.status is JobStatus.CANCELLED, err[-2000:]
        assert loop.returncode == {signal.SIGINT: 130, signal.SIGTERM: 143}[sig]  # as shells report, not 0
        assert f"{sig.name}: stopping job 1 at the end of this step" in err and "Traceback" not in err
        assert out.splitlines()[-1] == (f"loop job 1 stopped at {ended.phase}; continue it with python app.py loop "
                                        f"--resume 1 --db {demo_store.path}")
        assert status_lines(demo_store)[0] == f"job 1 loop: cancelled {ended.progress:.0%} · {ended.phase}"
    assert job_rows.get_job(demo_store, 1).status is not JobStatus.RUNNING

    again = start_loop(demo_store)  # not refused: it starts job 2, and says how to continue job 1 instead
    waiting_job(demo_store, 2, again)
    again.send_signal(signal.SIGINT)
    out, err = again.communicate(timeout=60)
    status = job_rows.get_job(demo_store, 1).status.value
    assert (f"job 1 (loop) is {status} at {ended.phase}; this starts a new loop job (to continue job 1 instead: "
            f"python app.py loop --resume 1 --db {demo_store.path})") in out.splitlines()
    assert job_rows.get_job(demo_store, 2).status is JobStatus.CANCELLED


def test_a_loop_that_is_really_running_refuses_the_next_one_by_name(demo_store):
    loop = start_loop(demo_store)
    waiting_job(demo_store, 1, loop)
    refused = subprocess.run([sys.executable, "app.py", "loop", "--db", str(demo_store.path), *WAITING_LOOP],
                             cwd=ROOT, capture_output=True, text=True, timeout=120)
    loop.send_signal(signal.SIGTERM)
    loop.communicate(timeout=60)
    assert refused.returncode == 2
    assert refused.stderr.splitlines()[-1] == (
        f"error: job 1 (loop) is still running in process {loop.pid}; stop it (Ctrl-C in its terminal, or Stop in "
        "the Train tab) or wait for it to end before starting another")
    assert [job.id for job in job_rows.list_jobs(demo_store)] == [1]
