"""Scale out: a job's training phases under `accelerate launch` with the shipped 2-process CPU config
(accelerate/cpu-2proc.yaml: two gloo ranks), and the accelerate configs the studio refuses.

A whole 1-round loop job (a reward phase, then a PPO phase) through the launcher: both ranks end each phase with the
same weights, each metric step is stored once, one reward model and one policy version are registered, and rank 1
trains with no store at all (its sqlite3 refuses to connect). A PPO job: a SIGKILL of one rank interrupts the job,
resume continues it, a stop cancels both ranks within one iteration, and a second resume completes it. A stop
reaches both ranks of a reward phase within one logging step. `ppo --accelerate-config` goes through the launcher.
"""

import json
import os
import re
import signal
import subprocess
import sys
from functools import partial
from pathlib import Path

import psutil
import pytest

from storage import JobStatus
from storage import jobs as job_rows
from storage.errors import InvalidInput
from storage.metrics import read_metrics
from storage.policies import list_policies
from storage.reward_models import list_reward_models
from tests import helpers
from trainers.jobs.launch_config import read_launch_config
from trainers.jobs.launcher import resume_job, start_job, stop_job
from trainers.jobs.phase_launch import PHASES_FOLDER, check_machine, phase_command
from trainers.loop.config import LoopConfig

ROOT = Path(__file__).resolve().parent.parent
CPU_2PROC = ROOT / "accelerate" / "cpu-2proc.yaml"
LOOP = {"rounds": 1, "prompts_per_round": 8, "samples_per_prompt": 3, "labels_per_round": 8, "queue_reserve": 4,
        "reward_epochs": 1, "reward_batch_size": 8, "policy_iterations": 2, "policy_batch_size": 8, "policy_epochs": 1,
        "response_length": 8}
PPO = {"iterations": 6, "reward": "oracle", "settings": {"batch_size": 8, "epochs": 1, "response_length": 8}}
# sitecustomize.py for the launched processes: any rank but 0 that opens a database fails the phase.
NO_STORE_OFF_RANK_0 = """
import os, sqlite3
if os.environ.get("RANK", "0") != "0":
    def refuse(*args, **kwargs):
        raise RuntimeError(f"rank {os.environ['RANK']} opened a database; only rank 0 may touch the store")
    sqlite3.connect = refuse
"""

wait_for = partial(helpers.wait_for, timeout=600, every=0.05)


@pytest.fixture
def launched_env(tmp_path, monkeypatch):
    """Workers and phases started from here: one thread each, no GPU, and rank 1 with no way into a database."""
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(NO_STORE_OFF_RANK_0)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(hooks), str(ROOT)]))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")


def phase_folders(store, job_id: int) -> list[Path]:
    return sorted((store.data_dir / PHASES_FOLDER).glob(f"job-{job_id}-*"))


def rank_records(folder: Path) -> list[dict]:
    return [json.loads((folder / f"rank-{r}.json").read_text()) for r in (0, 1)]


def phase_processes(store, job_id: int) -> list[psutil.Process]:
    """Live processes of the job's training phases (the phase worker's ranks), found by their command line."""
    marker = str(store.data_dir / PHASES_FOLDER / f"job-{job_id}-")
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if any(marker in part for part in process.info["cmdline"] or []) and "trainers.entry.phase_worker" in \
                " ".join(process.info["cmdline"]):
            found.append(process)
    return found


def rank_process(store, job_id: int, rank: int) -> psutil.Process | None:
    for process in phase_processes(store, job_id):
        try:
            if process.environ().get("RANK") == str(rank):
                return process
        except psutil.Error:
            continue
    return None


def finished(store, job_id: int):
    job = job_rows.get_job(store, job_id)
    return not job.status.active and job


def kill_job(store, job_id: int) -> None:
    """End the job's worker and phases if a failed assertion left them running (they must not outlive the test)."""
    job = job_rows.get_job(store, job_id)
    for process in phase_processes(store, job_id) + ([psutil.Process(job.pid)] if job.status.active and job.pid
                                                     and psutil.pid_exists(job.pid) else []):
        try:
            process.kill()
        except psutil.Error:
            pass


def test_a_loop_job_on_two_processes_trains_each_phase_once_with_no_store_off_rank_0(demo_store, launched_env):
    store = demo_store
    policies_before = len(list_policies(store))
    job_id = start_job(store, "loop", LoopConfig.from_dict(LOOP).to_dict(), CPU_2PROC)
    try:
        job = wait_for(partial(finished, store, job_id))
    finally:
        kill_job(store, job_id)
    assert job.status is JobStatus.COMPLETED, job.error
    assert job.launch["processes"] == 2 and job.launch["config_file"] == str(CPU_2PROC)
    folders = phase_folders(store, job_id)
    assert [f.name.split("-", 2)[2] for f in folders] == ["ppo-round-1", "reward-r1"]
    for folder in folders:  # each phase: two ranks, the same trained weights, rank 0's result
        first, second = rank_records(folder)
        assert first["world_size"] == second["world_size"] == 2
        assert first["digest"] is not None and first["digest"] == second["digest"], folder.name
        assert json.loads((folder / "result.json").read_text())["status"] == "completed"
    assert len(list_reward_models(store)) == 1 and len(list_policies(store)) == policies_before + 1
    assert sorted(r["step"] for r in read_metrics(store, job_id, names=["ppo/kl"])) == [1, 2]  # rank 0's, once each
    assert read_metrics(store, job_id, names=["reward/loss"])


def test_a_dpo_job_on_two_processes_trains_once_with_the_same_weights_on_both_ranks(demo_store, launched_env):
    store = demo_store
    labelled = app("label", "--db", str(store.path), "--annotator", "oracle", "--n", "16")
    assert labelled.returncode == 0, labelled.stderr
    policies_before = len(list_policies(store))
    settings = {"batch_size": 2, "epochs": 1.0, "sample_prompts": 4, "response_length": 6}
    job_id = start_job(store, "dpo", {"settings": settings}, CPU_2PROC)
    try:
        job = wait_for(partial(finished, store, job_id))
    finally:
        kill_job(store, job_id)
    assert job.status is JobStatus.COMPLETED, job.error
    [folder] = phase_folders(store, job_id)
    assert folder.name.endswith("dpo-run")
    first, second = rank_records(folder)
    assert first["world_size"] == second["world_size"] == 2
    assert first["digest"] is not None and first["digest"] == second["digest"]
    result = json.loads((folder / "result.json").read_text())
    steps = sorted(r["step"] for r in read_metrics(store, job_id, names=["dpo/loss"]))
    assert result["status"] == "completed" and steps == list(range(1, result["steps"] + 1))  # rank 0's, once each
    assert read_metrics(store, job_id, names=["dpo/kl"]) and len(list_policies(store)) == policies_before + 1


def test_a_killed_rank_interrupts_a_stop_cancels_both_and_resume_completes(demo_store, launched_env):
    store = demo_store
    policies_before = len(list_policies(store))
    job_id = start_job(store, "ppo", PPO, CPU_2PROC)

    def kl_steps() -> list[int]:
        return sorted(r["step"] for r in read_metrics(store, job_id, names=["ppo/kl"]))

    try:
        victim = wait_for(lambda: kl_steps() and rank_process(store, job_id, 1))
        victim.send_signal(signal.SIGKILL)
        job = wait_for(partial(finished, store, job_id))
        assert job.status is JobStatus.INTERRUPTED and "resume" in job.error, job.error
        assert phase_processes(store, job_id) == []

        resume_job(store, job_id)
        done_before = len(kl_steps())
        wait_for(lambda: job_rows.get_job(store, job_id).status is JobStatus.RUNNING and len(kl_steps()) > done_before
                 or finished(store, job_id))
        at_stop = len(kl_steps())
        stop_job(store, job_id)
        job = wait_for(partial(finished, store, job_id))
        assert job.status is JobStatus.CANCELLED, job.error
        assert len(kl_steps()) <= at_stop + 1  # both ranks stopped within one iteration
        assert phase_processes(store, job_id) == []
        [folder] = phase_folders(store, job_id)
        assert all(record.get("cancelled") for record in rank_records(folder))  # each rank saw the stop
        assert len(list_policies(store)) == policies_before

        resume_job(store, job_id)
        job = wait_for(partial(finished, store, job_id))
    finally:
        kill_job(store, job_id)
    assert job.status is JobStatus.COMPLETED, job.error
    assert kl_steps() == list(range(1, PPO["iterations"] + 1))  # each iteration logged once, none missing
    assert len(list_policies(store)) == policies_before + 1


def test_a_stop_reaches_both_ranks_of_a_reward_phase_within_one_logging_step(demo_store, launched_env):
    store = demo_store
    labelled = app("label", "--db", str(store.path), "--annotator", "oracle", "--n", "40")
    assert labelled.returncode == 0, labelled.stderr
    settings = {"epochs": 200.0, "batch_size": 4, "logging_steps": 1, "norm_samples": 8}
    job_id = start_job(store, "reward", settings, CPU_2PROC)

    def logged_steps() -> int:
        return len(read_metrics(store, job_id, names=["reward/loss"]))

    try:
        wait_for(lambda: logged_steps() >= 2 or finished(store, job_id))
        at_stop = logged_steps()
        stop_job(store, job_id)
        job = wait_for(partial(finished, store, job_id))
    finally:
        kill_job(store, job_id)
    assert job.status is JobStatus.CANCELLED, job.error
    assert logged_steps() <= at_stop + 1  # stopped within one logging step
    assert phase_processes(store, job_id) == [] and list_reward_models(store) == []
    [folder] = phase_folders(store, job_id)
    assert all(record.get("cancelled") for record in rank_records(folder))  # each rank saw the stop


def app(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "app.py"), *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)


def test_ppo_with_a_config_goes_through_the_launcher_and_says_how_many_processes(demo_store, launched_env):
    done = app("ppo", "--db", str(demo_store.path), "--iterations", "1", "--reward", "oracle", "--batch-size", "4",
               "--response-length", "4", "--accelerate-config", str(CPU_2PROC))
    assert done.returncode == 0, done.stderr[-2000:]
    [job] = job_rows.list_jobs(demo_store)
    assert f"policy job {job.id} trains on 2 processes on 1 machine (CPU)" in done.stderr
    assert done.stdout.strip().endswith(f"ppo job {job.id}: completed; registered policy v1")
    assert job.launch["processes"] == 2 and len(phase_folders(demo_store, job.id)) == 1  # trained in a launched phase


@pytest.mark.parametrize("command", [["ppo", "--iterations", "1", "--reward", "oracle"], ["train-reward"],
                                     ["loop", "--rounds", "1"]])
def test_a_missing_config_is_refused_in_one_line_before_any_store_exists(tmp_path, command):
    done = app(*command, "--db", str(tmp_path / "studio.db"), "--accelerate-config", str(tmp_path / "none.yaml"))
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [f"error: accelerate config {tmp_path / 'none.yaml'} does not exist; "
                                                "write one with `accelerate config`, or start from "
                                                "accelerate/cpu-2proc.yaml"]
    assert not (tmp_path / "studio.db").exists()


def write(tmp_path, text: str) -> Path:
    path = tmp_path / "accelerate.yaml"
    path.write_text(text)
    return path


def test_unreadable_yaml_and_zero_3_are_refused_in_one_line_saying_why(tmp_path, demo_store):
    for text, expected in [("num_processes: [2\n", "is not valid YAML at line 2"),
                           ("- just a list\n", "holds no settings"),
                           ("distributed_type: DEEPSPEED\nnum_processes: 2\ndeepspeed_config:\n  zero_stage: 3\n",
                            "ZeRO-3, which PPO as written cannot run: its reference is a deep copy of the policy "
                            "and generation needs whole parameters"),
                           ("distributed_type: MULTI_CPU\nnum_processes: 2\n", "starts one process"),
                           ("distributed_type: MULTI_GPU\nnum_processes: 4\nnum_machines: 3\n",
                            "a multiple of num_machines"),
                           ("distributed_type: MULTI_GPU\nnum_processes: 2\nmixed_precision: fp8\n", "fp8")]:
        with pytest.raises(InvalidInput, match=re.escape(expected)) as refused:
            read_launch_config(write(tmp_path, text))
        assert "\n" not in str(refused.value)
    zero3 = write(tmp_path, "distributed_type: DEEPSPEED\nnum_processes: 2\ndeepspeed_config:\n  zero_stage: 3\n")
    done = app("ppo", "--db", str(demo_store.path), "--iterations", "1", "--reward", "oracle",
               "--accelerate-config", str(zero3))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and "ZeRO-3" in done.stderr
    assert job_rows.list_jobs(demo_store) == []  # nothing stored


def test_more_gpus_than_the_machine_has_fails_in_one_line(tmp_path, demo_store, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    two_gpus = write(tmp_path, "distributed_type: MULTI_GPU\nnum_processes: 2\n")
    with pytest.raises(InvalidInput, match="asks for 2 GPUs on this machine but it has none"):
        check_machine(read_launch_config(two_gpus).to_dict())
    done = app("ppo", "--db", str(demo_store.path), "--iterations", "1", "--reward", "oracle",
               "--accelerate-config", str(two_gpus))
    assert done.returncode == 2 and "asks for 2 GPUs" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert job_rows.list_jobs(demo_store) == []


def test_a_phase_is_an_accelerate_launch_of_the_phase_worker_and_a_bad_config_starts_no_job(store, tmp_path):
    spec = tmp_path / "spec.json"
    argv = phase_command(read_launch_config(CPU_2PROC).to_dict(), spec)  # no shell: an argv
    assert argv[:5] == [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(CPU_2PROC)]
    assert argv[-4:] == ["-m", "trainers.entry.phase_worker", "--spec", str(spec)]
    assert argv[argv.index("--main_process_port") + 1].isdigit()  # one machine: a free port of its own
    with pytest.raises(InvalidInput, match="accelerate config .*missing.yaml does not exist"):
        start_job(store, "ppo", {}, tmp_path / "missing.yaml")
    assert job_rows.list_jobs(store) == []


def test_the_shipped_configs_describe_how_a_job_runs():
    assert read_launch_config(CPU_2PROC).describe() == \
        "2 processes on 1 machine (CPU), mixed precision no, DeepSpeed off"
    assert read_launch_config(ROOT / "accelerate" / "gpu-1.yaml").describe() == \
        "1 process on 1 machine (1 GPU), mixed precision no, DeepSpeed off"
