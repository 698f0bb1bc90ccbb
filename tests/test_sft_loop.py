"""SFT in the loop on the demo (a tiny base model: no chat template): `sft_first` fine-tunes the policy on the
demonstrations before the first round and registers it as the new root, so the rounds start from it and it is their
reference and the SFT side of win-rate pairs; `sft_each_round` fine-tunes on the demonstrations stored since the job's
previous SFT step, skipping a round with none; `sft_first` without demonstrations is refused before any job."""

import pytest

from storage import jobs as job_rows
from storage.demonstrations import ImportedDemonstration, import_demonstrations
from storage.errors import InvalidInput
from storage.metrics import read_metrics
from storage.policies import list_policies, root_policy, trained_from
from storage.prompts import list_prompts
from storage.winrate import list_winrate_pairs
from trainers.loop.config import LoopConfig
from trainers.loop.prompt_use import check_against_store
from trainers.loop.rounds import Loop
from trainers.loop.sft_steps import SFT_ORACLE, SFT_POLICY, sft_settings

DPO_TINY = {"algorithm": "dpo", "rounds": 2, "prompts_per_round": 16, "labels_per_round": 24, "label_decay": 0.5,
            "queue_reserve": 8, "check_share": 0.0, "dpo_batch_size": 4, "policy_epochs": 1, "eval_prompts": 4,
            "winrate_pairs": 4, "sft_epochs": 1.0, "sft_lr": 1e-3}


def add_demonstrations(store, count: int, source: str = "writers") -> None:
    prompts = list_prompts(store, heldout=False)[:count]
    import_demonstrations(store, [ImportedDemonstration(p.text, " was a wonderful , moving film .") for p in prompts],
                          source)


def run_loop(store, settings: dict, before_run=lambda: None) -> int:
    job_id = job_rows.create_job(store, "loop", LoopConfig.from_dict(settings).to_dict())
    job_rows.claim_job(store, job_id, pid=1)
    before_run()
    Loop(store, job_rows.get_job(store, job_id), log=lambda line: None).run()
    return job_id


def test_sft_first_makes_the_sft_version_the_root_the_rounds_train_against(demo_store):
    store = demo_store
    add_demonstrations(store, 16)
    job_id = run_loop(store, {**DPO_TINY, "sft_first": True})
    base, sft, first, second = list_policies(store)
    assert sft.parent_id is None and trained_from(store, sft.id) == base.id and sft.note.startswith("SFT of v0")
    assert (first.parent_id, second.parent_id) == (sft.id, first.id)
    assert root_policy(store, second).id == sft.id  # the reference of DPO and of the KL from here on
    assert {p.opponent_id for p in list_winrate_pairs(store)} == {sft.id}
    assert {(r["step"], r["value"]) for r in read_metrics(store, job_id, names=[SFT_POLICY])} == {(0, sft.id)}
    assert read_metrics(store, job_id, names=[SFT_ORACLE]) and read_metrics(store, job_id, names=["sft/loss"])


def test_sft_each_round_trains_on_the_demonstrations_stored_since_the_last_step(demo_store):
    store = demo_store
    add_demonstrations(store, 4, "before")  # stored before the job: not a round's
    job_id = run_loop(store, {**DPO_TINY, "sft_each_round": True}, before_run=lambda: add_demonstrations(store, 8))
    base, sft, first, second = list_policies(store)
    assert sft.parent_id == base.id and root_policy(store, sft).id == base.id  # the root stays the reference
    assert sft.note == "SFT of v0, 1 steps on 8 demonstrations"  # one epoch of one batch of 8
    assert (first.parent_id, second.parent_id) == (sft.id, first.id)
    assert [r["step"] for r in read_metrics(store, job_id, names=[SFT_POLICY])] == [1]  # round 2 had none


def test_sft_first_without_demonstrations_is_refused_before_any_job(demo_store):
    with pytest.raises(InvalidInput, match="sft_first needs demonstrations, and the store has none"):
        check_against_store(LoopConfig.from_dict({**DPO_TINY, "sft_first": True}), demo_store)
    add_demonstrations(demo_store, 3)  # a full fine-tune as a new root needs 4
    with pytest.raises(InvalidInput, match="needs at least 4 demonstrations, and the store has 3"):
        check_against_store(LoopConfig.from_dict({**DPO_TINY, "sft_first": True}), demo_store)


def test_the_sft_learning_rate_is_the_demos_or_follows_lora():
    assert sft_settings(LoopConfig(), 1)["learning_rate"] == 1e-3  # the demo's, measured (docs/benchmarks.md)
    assert sft_settings(LoopConfig(lora=True, policy_lr=1e-4, sft_lr=None), 1)["learning_rate"] == 1e-4
    assert sft_settings(LoopConfig(sft_lr=None), 1)["learning_rate"] == 2e-5
    from trainers.loop.presets import real_model_config

    real = sft_settings(real_model_config(135_000_000, 8192), 1)
    assert (real["lora"], real["learning_rate"], real["epochs"]) == (True, 1e-4, 3.0)
    with pytest.raises(InvalidInput, match="sft_lr must be positive"):
        LoopConfig(sft_lr=0.0)


def test_a_base_model_with_demonstrations_is_offered_sft_first(demo_store):
    from trainers.loop.sft_steps import sft_offer

    assert sft_offer(LoopConfig(), demo_store) is None  # no demonstrations yet
    add_demonstrations(demo_store, 3)
    assert sft_offer(LoopConfig(), demo_store) is None  # fewer than a full fine-tune as a new root needs
    import_demonstrations(demo_store, [ImportedDemonstration(list_prompts(demo_store, heldout=False)[3].text,
                                                             " a fine film .")], "writers")
    assert "the policy has no chat template (a base model) and the store holds 4 demonstrations: sft_first " \
           "(--sft-first)" in sft_offer(LoopConfig(), demo_store)
    assert sft_offer(LoopConfig(sft_first=True), demo_store) is None
