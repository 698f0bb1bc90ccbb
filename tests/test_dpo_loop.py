"""Iterative DPO in the loop: a round trains the newest policy on every label so far without a reward model (unless
the check pairs or the disagreement selector need one), its steps numbered on across rounds, its samples' KL in the
round summary and the per-phase warnings."""

from storage import jobs as job_rows
from storage.metrics import log_metrics, read_metrics
from storage.policies import list_policies
from storage.reward_models import list_reward_models
from storage.rounds import list_rounds
from trainers.loop.config import LoopConfig, needs_reward_model
from trainers.loop.failure_warnings import DPO_STEP_OFFSET, policy_phase_warnings
from trainers.loop.rounds import Loop

DPO_TINY = {"algorithm": "dpo", "rounds": 2, "prompts_per_round": 16, "labels_per_round": 24, "label_decay": 0.5,
            "queue_reserve": 8, "check_share": 0.0, "dpo_batch_size": 4, "policy_epochs": 1}


def test_a_dpo_round_needs_a_reward_model_only_for_check_pairs_or_the_disagreement_selector():
    assert not needs_reward_model(LoopConfig(algorithm="dpo", check_share=0.0))
    assert needs_reward_model(LoopConfig(algorithm="dpo", check_share=0.1))
    assert needs_reward_model(LoopConfig(algorithm="dpo", check_share=0.0, selector="disagreement", ensemble=2))
    assert needs_reward_model(LoopConfig(algorithm="ppo", check_share=0.0))


def test_a_two_round_dpo_loop_trains_without_a_reward_model_and_numbers_its_steps_on(demo_store):
    store = demo_store
    job_id = job_rows.create_job(store, "loop", LoopConfig.from_dict(DPO_TINY).to_dict())
    job_rows.claim_job(store, job_id, pid=1)
    Loop(store, job_rows.get_job(store, job_id), log=lambda line: None).run()
    assert list_reward_models(store) == []
    sft, first, second = list_policies(store)
    assert (first.parent_id, first.round, second.parent_id, second.round) == (sft.id, 1, first.id, 2)
    assert first.note.startswith("DPO, ") and second.note.startswith("DPO, ")
    offsets = {r["step"]: r["value"] for r in read_metrics(store, job_id, names=[DPO_STEP_OFFSET])}
    losses = sorted(r["step"] for r in read_metrics(store, job_id, names=["dpo/loss"]))
    assert offsets[1] == 0 and losses == list(range(1, len(losses) + 1))  # round 2's steps follow round 1's
    round_one_steps = int(offsets[2])
    assert round_one_steps == 5  # the 24 labels less the oracle's ties, 4 a step
    kl = read_metrics(store, job_id, names=["dpo/kl"])
    assert [r["step"] for r in kl][:2] == [3, 5]  # sampled twice a round, the last after its final step
    rounds = list_rounds(store, job_id)
    assert [r["summary"]["kl"] for r in rounds] == [kl[1]["value"], kl[-1]["value"]]
    assert all(r["summary"]["score"] is None and r["reward_model_id"] is None for r in rounds)
    assert {r["name"] for r in read_metrics(store, job_id, prefix="round/")} >= {"round/oracle_score", "round/kl"}


def test_a_dpo_phases_warnings_read_its_samples_within_its_own_steps(store):
    job = job_rows.create_job(store, "loop", {})
    config = LoopConfig(algorithm="dpo")
    log_metrics(store, job, 1, {DPO_STEP_OFFSET: 0})
    log_metrics(store, job, 2, {DPO_STEP_OFFSET: 10})
    for step in range(1, 25):  # round 1: steps 1-10, round 2: steps 11-24; a loss at every step
        log_metrics(store, job, step, {"dpo/loss": 0.6})
    for step, kl, eos in ((5, 1.0, 1.0), (10, 2.0, 1.0), (17, 11.0, 0.1), (24, 14.0, 0.05)):  # the samples
        log_metrics(store, job, step, {"dpo/kl": kl, "dpo/response_length": 10.0, "dpo/entropy": 1.5,
                                       "dpo/eos_rate": eos})
    assert policy_phase_warnings(store, job, config, round=1, first_round=1) == []
    found = policy_phase_warnings(store, job, config, round=2, first_round=1)
    assert [(w.rule, w.round, w.step) for w in found] == [("kl_per_token", 2, 24), ("never_ending", 2, 24)]
