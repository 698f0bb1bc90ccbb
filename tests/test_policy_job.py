"""A policy job on a store (trainers/jobs/policy_job.py), as the `ppo` command runs it: plan, build, train, register
a new version; the version it starts from; a cancelled job resumed from its saved state; the models it loads for a
second LoRA run and for PPO after GRPO (a value head only where one was trained)."""

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from storage.jobs import claim_job, create_job, get_job, list_jobs
from storage.metrics import read_metrics
from storage.policies import list_policies
from tests.policy_helpers import ALGORITHMS, CLI_SETTINGS, GROUP_SIZE, GRPO_CLI, CancelAt, cli, make_policy, ppo_command
from trainers.policy.checkpoint import STATE_FILE, load_value_head
from trainers.reporting import JobCancelled

pytestmark = pytest.mark.usefixtures("one_thread")


def test_cli_trains_and_registers_a_new_policy_version(seeded_store, capsys):
    from storage.jobs import list_jobs

    code = cli("ppo", "--db", str(seeded_store.path), "--iterations", "2", "--reward", "oracle",
               *CLI_SETTINGS)
    assert code == 0, capsys.readouterr().err
    [job] = list_jobs(seeded_store)
    assert job.status.value == "completed" and job.config["settings"]["batch_size"] == 4
    first, second = list_policies(seeded_store)
    assert (second.parent_id, second.round) == (first.id, 1)
    assert {r["step"] for r in read_metrics(seeded_store, job.id, names=["ppo/score"])} == {1, 2}
    assert not (seeded_store.data_dir / "ppo" / f"job-{job.id}").exists()  # the resumable state is dropped
    assert "registered policy v1\n" in capsys.readouterr().out  # the version as --policy takes it, no id


def test_cli_policy_option_trains_that_version(seeded_store, capsys):
    """`--policy v0` is the version PPO starts from (its help says so): the new version's parent, not the newest; the
    old spelling, a bare policy id, still trains that version and says how to write it now; the job is a `policy`
    job."""
    arguments = ["ppo", "--db", str(seeded_store.path), "--iterations", "1", "--reward", "oracle",
                 *CLI_SETTINGS]
    assert cli(*arguments) == 0
    assert cli(*arguments, "--policy", "v0") == 0
    capsys.readouterr()
    assert cli(*arguments, "--policy", "1") == 0
    assert "--policy 1 is read as policy id 1, which is v0; write --policy v0" in capsys.readouterr().err
    sft, first, second, third = list_policies(seeded_store)
    assert (first.parent_id, second.parent_id, third.parent_id) == (sft.id,) * 3
    assert {job.kind for job in list_jobs(seeded_store)} == {"policy"}
    assert Path(second.path).name.startswith("ppo-r1-")
    assert cli(*arguments, "--policy", "v9") == 2
    assert capsys.readouterr().err.strip().endswith("--policy v9: no such version (versions: v0 to v3); name one as "
                                                    "vK, e.g. --policy v3")


@pytest.mark.parametrize("algorithm, ending", [(algorithm, "cancelled") for algorithm in ALGORITHMS] +
                         [("ppo", "killed")])
def test_cli_resumes_a_cancelled_or_killed_job_to_the_end(seeded_store, algorithm, ending):
    """Killed: the worker died (out of memory, say) and the row still says running; the resume finds it dead."""
    import subprocess
    import sys
    from dataclasses import asdict

    from storage.jobs import finish_job
    from storage.types import JobStatus
    from trainers.jobs.policy_job import state_dir, train_policy
    from trainers.policy.config import PolicyRun

    settings = {"batch_size": 4, "response_length": 6, "algorithm": algorithm}
    settings.update({"group_size": GROUP_SIZE} if algorithm == "grpo" else {})
    run = PolicyRun(iterations=3, reward="oracle", policy_id=1, settings=settings)
    job_id = create_job(seeded_store, "ppo", asdict(run))
    pid = 1  # alive
    if ending == "killed":  # the pid of a process that has exited
        pid = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                                 text=True).stdout)
    claim_job(seeded_store, job_id, pid=pid)
    with pytest.raises(JobCancelled):
        train_policy(seeded_store, run, job_id, listener=CancelAt(seeded_store, job_id, 1))
    assert torch.load(state_dir(seeded_store, job_id) / STATE_FILE, weights_only=True)["iteration"] == 1
    assert len(list_policies(seeded_store)) == 1  # nothing registered
    if ending == "cancelled":
        finish_job(seeded_store, job_id, JobStatus.CANCELLED)
    assert get_job(seeded_store, job_id).status.value == ("running" if ending == "killed" else "cancelled")

    assert cli("ppo", "--db", str(seeded_store.path), "--resume", str(job_id)) == 0
    assert get_job(seeded_store, job_id).status.value == "completed"
    assert sorted(r["step"] for r in read_metrics(seeded_store, job_id, names=[f"{algorithm}/kl"])) == [1, 2, 3]
    assert len(list_policies(seeded_store)) == 2


def test_a_second_lora_run_continues_the_adapter_with_the_sft_policy_as_reference(seeded_store):
    from trainers.jobs.policy_job import load_models, start_policy

    assert cli("ppo", "--db", str(seeded_store.path), "--iterations", "1", "--reward", "oracle",
               "--lora", "--learning-rate", "1e-2", *CLI_SETTINGS[:-2]) == 0
    trained = start_policy(seeded_store, None)
    policy, reference, _, value_head = load_models(seeded_store, trained, lora=True)
    assert reference is None and value_head is not None
    ids = torch.tensor([[3, 4, 7, 5]])
    merged = AutoModelForCausalLM.from_pretrained(trained.path)
    torch.testing.assert_close(policy(input_ids=ids).logits, merged(input_ids=ids).logits)  # the adapter goes on
    with policy.disable_adapter():  # ...and the reference is still the SFT policy
        torch.testing.assert_close(policy(input_ids=ids).logits, make_policy()(input_ids=ids).logits)


def test_cli_trains_grpo_and_a_later_ppo_run_starts_a_fresh_value_head(seeded_store, capsys):
    from storage.jobs import list_jobs
    from trainers.jobs.policy_job import load_models, start_policy

    arguments = ["--iterations", "2", "--reward", "oracle", *CLI_SETTINGS]
    assert ppo_command(seeded_store, *arguments, *GRPO_CLI) == 0, capsys.readouterr().err
    [job] = list_jobs(seeded_store)
    assert job.status.value == "completed" and job.config["settings"]["algorithm"] == "grpo"
    assert {r["step"] for r in read_metrics(seeded_store, job.id, names=["grpo/score"])} == {1, 2}
    assert read_metrics(seeded_store, job.id, prefix="ppo/") == []
    grpo_policy = start_policy(seeded_store, None)
    assert grpo_policy.note == "GRPO, 2 iterations" and load_value_head(grpo_policy.path) is None
    assert "grpo job" in capsys.readouterr().out

    assert load_models(seeded_store, grpo_policy, lora=False)[3] is None  # PPO from it: no head to warm
    assert ppo_command(seeded_store, *arguments) == 0
    ppo_policy = start_policy(seeded_store, None)
    assert ppo_policy.parent_id == grpo_policy.id and load_value_head(ppo_policy.path)["weight"].shape == (1, 32)
