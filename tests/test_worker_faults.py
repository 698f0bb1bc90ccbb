"""A loop worker killed with SIGKILL in each kind of step: generating samples, training the reward model, writing
the reward model; then, for PPO and GRPO alike, the policy phase and writing the new policy; and a DPO job killed
mid-run, resumed from its last checkpoint. Each time the studio marks the job interrupted and nothing half-written is
registered; the resumed job completes, each PPO (GRPO, DPO) step logged once, the partial checkpoints swept away.

One tiny loop job lives through the three kills before the policy phase, and one per algorithm (and one with the
real-model preset's policy and reward adapters on one base) through the two in and after it. The kills while writing
come from inside the worker at a chosen call (deterministic); the one in the policy phase comes from outside, mid-run.
"""

import json
import os
import signal
from pathlib import Path

import pytest
from safetensors import safe_open

from storage import JobStatus
from storage import jobs as job_rows
from storage.generations import EVAL_SOURCE, list_generations
from storage.metrics import read_metrics
from storage.policies import list_policies
from storage.reward_models import list_reward_models
from storage.rounds import list_rounds, round_label_count, round_pair_count
from tests.worker_helpers import (
    assert_interrupted,
    kill_in_step_and_resume,
    logged_steps,
    run_dying_worker,
    stop_worker,
    wait_for,
)
from trainers.entry.worker import PARTIAL_CHECKPOINTS
from trainers.jobs.launcher import resume_job, start_job
from trainers.jobs.reward_job import load_examples
from trainers.loop.config import LoopConfig
from trainers.reward.shared_base import shares_base

FAULT_LOOP = {"rounds": 1, "prompts_per_round": 8, "samples_per_prompt": 3, "labels_per_round": 8, "queue_reserve": 4,
              "reward_epochs": 1, "reward_batch_size": 8, "policy_iterations": 4, "policy_batch_size": 8,
              "policy_epochs": 1, "response_length": 8}


def kill_in_policy_optimisation(store, job_id: int, algorithm: str = "ppo") -> None:
    """SIGKILL the job's worker in its PPO (or GRPO) phase once at least one iteration is logged."""
    def in_the_phase_after_a_logged_iteration():
        job = job_rows.get_job(store, job_id)
        assert job.status.active, f"the loop ended ({job.status.value}) before it could be killed in {algorithm}: " \
                                  f"{job.error}"
        phase = f"{algorithm.upper()} iteration"
        return phase in (job.phase or "") and read_metrics(store, job_id, names=[f"{algorithm}/kl"]) and job

    job = wait_for(in_the_phase_after_a_logged_iteration, timeout=600)  # the phase starts after minutes on a busy CPU
    assert job.status is JobStatus.RUNNING, job
    os.kill(job.pid, signal.SIGKILL)


def assert_complete_checkpoints(store) -> None:
    """Every registered policy and reward model is a whole directory: weights readable, tokenizer and notes there
    (a PPO policy's value head too; a GRPO policy has none)."""
    for policy in list_policies(store):
        path = Path(policy.path)
        needed = ["config.json", "tokenizer.json"]
        if policy.parent_id is not None and (path / "dpo_config.json").is_file():
            assert not (path / "value_head.safetensors").exists(), sorted(os.listdir(path))
        elif policy.parent_id is not None:
            assert (path / "ppo_config.json").is_file(), (policy, sorted(os.listdir(path)))
            with_critic = json.loads((path / "ppo_config.json").read_text())["algorithm"] == "ppo"
            needed += ["value_head.safetensors"] if with_critic else []
            assert (path / "value_head.safetensors").is_file() == with_critic, sorted(os.listdir(path))
        assert all((path / name).is_file() for name in needed), (policy, sorted(os.listdir(path)))
        with safe_open(str(path / "model.safetensors"), "pt") as weights:
            assert len(list(weights.keys())) > 0
    for model in list_reward_models(store):
        path = Path(model.path)
        assert (path / "config.json").is_file() and (path / "reward_info.json").is_file(), sorted(os.listdir(path))
        with safe_open(str(path / "model.safetensors"), "pt") as weights:
            assert len(list(weights.keys())) > 0


def partial_checkpoints(store) -> list[Path]:
    return [p for pattern in PARTIAL_CHECKPOINTS for p in store.data_dir.glob(pattern)]


def vote_ids_unique(store) -> bool:
    rows = store.db().execute("SELECT vote_id, count(*) FROM labels WHERE vote_id IS NOT NULL GROUP BY vote_id"
                              " HAVING count(*) > 1").fetchall()
    return rows == []


def labels_count(store) -> int:
    """Every stored label row but the win-rate judgements (the loop adds the final version's when it ends)."""
    return store.db().execute("SELECT count(*) FROM labels WHERE pair_id NOT IN (SELECT pair_id FROM winrate_pairs)"
                              ).fetchone()[0]


def winrate_judgements_per_pair(store) -> list[int]:
    return [n for (n,) in store.db().execute("SELECT count(*) FROM labels WHERE pair_id IN (SELECT pair_id FROM "
                                             "winrate_pairs) GROUP BY pair_id")]


def assert_whole_loop(store, job_id: int, algorithm: str, labels_before: int) -> None:
    """The resumed job completed its one round: two policy versions and one reward model, whole; nothing partial
    left; each of the algorithm's steps logged once, none missing, none of the other's; the round's summary reads
    the algorithm's series; no label lost or added, none stored twice; the store intact."""
    job = job_rows.get_job(store, job_id)
    assert job.status is JobStatus.COMPLETED, job.error
    assert [r["round"] for r in list_rounds(store, job_id)] == [1]
    assert len(list_policies(store)) == 2 and len(list_reward_models(store)) == 1
    assert_complete_checkpoints(store)
    assert partial_checkpoints(store) == []
    kl = read_metrics(store, job_id, names=[f"{algorithm}/kl"])
    assert sorted(r["step"] for r in kl) == list(range(1, FAULT_LOOP["policy_iterations"] + 1))
    other = "grpo" if algorithm == "ppo" else "ppo"
    assert read_metrics(store, job_id, prefix=f"{other}/") == []
    [summary] = [r["summary"] for r in list_rounds(store, job_id)]
    assert summary["kl"] == kl[-1]["value"]
    assert labels_count(store) == labels_before
    assert winrate_judgements_per_pair(store) == [1] * LoopConfig().winrate_pairs  # the final version's, each once
    assert vote_ids_unique(store)
    assert store.db().execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_worker_killed_in_every_step_before_the_policy_phase_resumes_to_a_whole_loop(demo_store):
    store = demo_store
    job_id = job_rows.create_job(store, "loop", LoopConfig.from_dict(FAULT_LOOP).to_dict())
    try:
        # the 1st call is the baseline eval
        run_dying_worker(store, job_id, "trainers.models.generation:HFGenerator.generate", nth=2)
        assert_interrupted(store, job_id)
        assert list_generations(store, policy_id=list_policies(store)[0].id, source=EVAL_SOURCE)
        assert round_pair_count(store, 1) == 0

        run_dying_worker(store, job_id, "trainers.reward.trainer:preference_loss")  # the first training step
        assert_interrupted(store, job_id)
        assert round_label_count(store, 1) >= FAULT_LOOP["labels_per_round"] and list_reward_models(store) == []
        labels_before = labels_count(store)

        # weights saved, reward_info.json not yet
        run_dying_worker(store, job_id, "trainers.jobs.reward_job:_finish_member")
        assert_interrupted(store, job_id)
        assert list_reward_models(store) == []
        assert [p.parent.name for p in partial_checkpoints(store)] == ["reward_models"]  # the staged member

        resume_job(store, job_id)  # sweeps the staged member away
        wait_for(lambda: not job_rows.get_job(store, job_id).status.active, timeout=600)
    finally:
        stop_worker(store, job_id)
    assert_whole_loop(store, job_id, "ppo", labels_before)


def test_worker_killed_writing_an_incremental_reward_model_resumes_it_on_the_same_share(demo_store):
    store = demo_store
    config = {**FAULT_LOOP, "rounds": 2, "label_decay": 1.0, "reward_training": "incremental", "reward_replay": 3}
    job_id = job_rows.create_job(store, "loop", LoopConfig.from_dict(config).to_dict())
    try:
        # round 2's member: weights saved, reward_info.json not yet
        run_dying_worker(store, job_id, "trainers.jobs.reward_job:_finish_member", nth=2)
        assert_interrupted(store, job_id)
        assert [m.round for m in list_reward_models(store)] == [1]
        resume_job(store, job_id)
        wait_for(lambda: not job_rows.get_job(store, job_id).status.active, timeout=600)
    finally:
        stop_worker(store, job_id)
    assert job_rows.get_job(store, job_id).status is JobStatus.COMPLETED
    first, second = (json.loads((Path(m.path) / "reward_info.json").read_text()) for m in list_reward_models(store))
    seen = set(first["seen_label_ids"])
    new = set(second["seen_label_ids"]) - seen
    assert new and set(second["label_ids"]) - seen == new  # round 2 read its new labels ...
    trained = set(second["member_label_ids"])
    assert len(trained & seen) == second["replayed"] == 3  # ... trained on 3 of round 1's, no more ...
    held_out = {e.label_id for e in load_examples(store)[0] if e.pair_id in set(first["val_pair_ids"])}
    assert set(second["label_ids"]) & seen == held_out | (trained & seen)  # ... and validated on its held-out ones
    assert partial_checkpoints(store) == []


@pytest.mark.parametrize("algorithm, writing, adapters", [
    ("ppo", "trainers.policy.checkpoint:save_file", False),  # policy weights saved, value head not yet
    ("grpo", "trainers.jobs.policy_job:register_policy", False),  # the policy saved, not yet registered
    ("ppo", "trainers.policy.checkpoint:save_file", True),  # the real-model preset's: policy and reward adapters,
])                                                          # the reward model scoring on the policy's own base
def test_worker_killed_in_the_policy_phase_and_while_writing_the_policy_resumes_to_a_whole_loop(demo_store, algorithm,
                                                                                                  writing, adapters):
    store = demo_store
    config = {**FAULT_LOOP, "algorithm": algorithm, "lora": adapters, "reward_lora": adapters}
    config.update({"group_size": 4, "policy_batch_size": 2} if algorithm == "grpo" else {})
    job_id = start_job(store, "loop", LoopConfig.from_dict(config).to_dict())
    try:
        kill_in_policy_optimisation(store, job_id, algorithm)  # after a logged iteration
        assert_interrupted(store, job_id)
        assert len(list_reward_models(store)) == 1 and len(list_policies(store)) == 1
        assert {p.parent.parent.name for p in partial_checkpoints(store)} <= {"ppo"}  # the kill may catch a state write
        labels_before = labels_count(store)

        run_dying_worker(store, job_id, writing)
        assert_interrupted(store, job_id)
        assert len(list_policies(store)) == 1
        assert [p.parent.name for p in partial_checkpoints(store)] == ["policies"]
        assert_complete_checkpoints(store)

        resume_job(store, job_id)
        wait_for(lambda: not job_rows.get_job(store, job_id).status.active, timeout=600)
    finally:
        stop_worker(store, job_id)
    assert_whole_loop(store, job_id, algorithm, labels_before)
    [reward] = list_reward_models(store)
    assert shares_base([reward.path], list_policies(store)[0].path) == adapters  # an adapter on the policy's base


def test_a_dpo_worker_killed_mid_run_resumes_from_its_last_complete_checkpoint(seeded_store):
    """Killed during step 11 of 24 (checkpoints every 4 steps): the resumed worker starts from checkpoint 8, so the
    first 8 steps' metrics are the first worker's and steps 9 on are logged again, each once; the new version is
    whole."""
    from dataclasses import asdict

    from storage.preferences import Preference, import_preferences
    from tests.policy_helpers import PROMPTS
    from trainers.policy.dpo_config import DPORun

    store = seeded_store
    import_preferences(store, [Preference(p, " great and good .", " bad and awful .") for p in PROMPTS], "prefs", 0.0)
    run = DPORun(settings={"batch_size": 1, "epochs": 3, "save_every": 4, "sample_evals": 1, "sample_prompts": 2,
                           "response_length": 6, "learning_rate": 1e-3})
    job_id = job_rows.create_job(store, "dpo", asdict(run))
    killed = kill_in_step_and_resume(store, job_id, "trainers.policy.dpo:StudioDPOTrainer._compute_loss", step=11)
    assert len(list_policies(store)) == 2 and partial_checkpoints(store) == []
    assert_complete_checkpoints(store)
    logged = logged_steps(store, job_id, "dpo/loss")
    assert [step for step, _ in logged] == list(range(1, 25))  # each step once, none missing
    assert all(created < killed for step, created in logged if step <= 8)  # kept from before the kill
    assert all(created > killed for step, created in logged if step > 8)  # trained again after checkpoint 8
    assert not (store.data_dir / "dpo" / f"job-{job_id}").exists()
