"""`python app.py status`, a job's lines: a completed loop shows its result in place of its last phase (which no
longer says anything); a job stopped early keeps the phase it stopped at, with its result and how to resume it."""

import os

from app.commands.status_cli import job_lines
from storage import jobs as job_rows
from storage.rounds import add_round
from storage.types import JobStatus
from tests.winrate_helpers import versions


def loop_job(store, policy_id: int, phase: str, progress: float) -> int:
    """A loop job that made `policy_id` in its one round and last reported `phase`."""
    job_id = job_rows.create_job(store, "loop", {})
    job_rows.claim_job(store, job_id, os.getpid())
    add_round(store, job_id, 1, {}, {"labels": 10}, policy_id, None)
    job_rows.heartbeat(store, job_id, phase=phase, progress=progress)
    return job_id


def test_a_completed_loop_shows_its_result_instead_of_its_last_phase(store):
    _, v1, v2 = versions(store, 2)
    done = loop_job(store, v1, "round 1/1: judging policy v1 against the SFT policy", 0.99)
    job_rows.finish_job(store, done, JobStatus.COMPLETED)
    assert job_lines(store, job_rows.get_job(store, done)) == [
        f"job {done} loop: completed 100%", f"  result: job {done} (loop) completed: made v1 in 1 round · no warnings"]

    stopped = loop_job(store, v2, "round 1/1: PPO iteration 3/10", 0.7)
    job_rows.finish_job(store, stopped, JobStatus.CANCELLED)
    assert job_lines(store, job_rows.get_job(store, stopped)) == [
        f"job {stopped} loop: cancelled 70% · round 1/1: PPO iteration 3/10",
        f"  result: job {stopped} (loop) cancelled: made v2 in 1 round · no warnings",
        f"  resume: python app.py loop --resume {stopped} --db {store.path}"]


def test_status_into_a_pipe_its_reader_closed_ends_without_a_traceback(store):
    import subprocess
    import sys
    from pathlib import Path

    loop_job(store, versions(store, 1)[1], "round 1/1: PPO iteration 3/10", 0.7)
    app = Path(__file__).resolve().parent.parent / "app.py"
    proc = subprocess.Popen([sys.executable, str(app), "status", "--db", str(store.path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    proc.stdout.close()  # as `status | head -0` would: the reader is gone before the first line
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 141 and "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
