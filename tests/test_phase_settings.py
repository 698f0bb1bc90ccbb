"""A loop config grouped by phase (`trainers.loop.phase_settings`): each phase's settings in its own part, named as its
trainer names them, while every flat setting (`policy_lr`, `reward_lora`...) keeps working: constructor, `from_dict`,
`to_dict` (the shape jobs store), `setting`, the `loop` options, and the configs stored by earlier versions."""

import json

import pytest

from app.commands import loop_cli
from storage import InvalidInput
from trainers.loop.config import LoopConfig, dpo_settings, policy_settings, reward_settings
from trainers.loop.phase_settings import FLAT, DPOPhase, PolicyPhase, RewardPhase, SFTPhase

# a loop job's config as the studio stored it before the phases (jobs.config of a store written on 2026-12-05's main)
STORED = json.loads(
    '{"rounds": 2, "start_version": null, "prompts_per_round": 48, "samples_per_prompt": 4, "labels_per_round": 92, '
    '"label_budget": 120, "label_decay": 0.3, "queue_reserve": 50, "annotator": "oracle", "oracle": '
    '"assets.lexicon:sentiment_score", "oracle_noise": 0.0, "judge": null, "judge_model": null, "judge_key_env": null, '
    '"judge_template": null, "judge_timeout": null, "judge_max_mb": null, "judge_threshold": 0.0, "judge_people": '
    '"human", "judge_min_agreement": 0.6, "selector": "random", "rank_k": 2, "pair_with_previous": false, "ensemble": '
    '2, "reward_epochs": 12, "reward_lr": 0.0003, "reward_continue_lr_scale": 1.0, "reward_batch_size": 16, '
    '"reward_warm_start": false, "reward_patience": 3, "reward_training": "full", "reward_replay": 100, "reward_lora": '
    'true, "algorithm": "ppo", "group_size": 8, "policy_iterations": 10, "policy_batch_size": 32, '
    '"policy_mini_batches": 4, "policy_epochs": 2, "policy_lr": 5e-05, "kl_coef": 0.2, "dpo_beta": 0.3, '
    '"dpo_loss_type": "sigmoid", "dpo_label_smoothing": 0.0, "dpo_train_ties": false, "dpo_batch_size": 4, '
    '"target_kl": 6.0, "response_length": 24, "temperature": 1.0, "top_p": 1.0, "top_k": 0, "lora": false, "bf16": '
    'false, "seed": 0, "audit_share": 0.1, "audit_min_agreement": 0.6, "on_warning": "continue", "eval_prompts": 16, '
    '"eval_samples": 2, "winrate_pairs": 24, "winrate_previous": 0, "sft_first": true, "sft_each_round": false, '
    '"sft_epochs": 6.0, "sft_lr": null, "reward": "rm", "reward_functions": [], "rm_weight": 1.0}')


def test_a_config_stored_before_the_phases_loads_into_them_and_stores_the_same_shape():
    config = LoopConfig.from_dict(STORED)
    assert config.reward_model == RewardPhase(ensemble=2, learning_rate=3e-4, early_stopping_patience=3, lora=True)
    assert config.policy == PolicyPhase(num_mini_batches=4, learning_rate=5e-5, group_size=8, init_kl_coef=0.2,
                                        target_kl=6.0)
    assert config.dpo == DPOPhase(dpo_beta=0.3, batch_size=4)
    assert config.sft == SFTPhase(first=True, learning_rate=None)
    renamed = {"audit_share": "check_share", "audit_min_agreement": "check_min_agreement"}  # since the store's day
    assert config.to_dict() == {renamed.get(k, k): v for k, v in STORED.items()}  # the same flat shape, stored again
    assert LoopConfig.from_dict(config.to_dict()) == config  # and read back by a resumed job
    assert LoopConfig.from_dict({**STORED, "policy_lr": 1e-4}).policy.learning_rate == 1e-4
    old = {("ppo" + k.removeprefix("policy") if k.startswith("policy_") else k): v for k, v in STORED.items()}
    assert "ppo_lr" in old and LoopConfig.from_dict(old) == config  # the names before GRPO joined PPO


def test_every_flat_setting_reads_and_writes_its_phase():
    config = LoopConfig(policy_lr=3e-4, reward_lora=True, dpo_beta=0.2, sft_first=True, group_size=6, ensemble=3)
    assert (config.policy.learning_rate, config.reward_model.lora, config.dpo.dpo_beta) == (3e-4, True, 0.2)
    assert (config.sft.first, config.policy.group_size, config.reward_model.ensemble) == (True, 6, 3)
    assert {name: config.setting(name) for name in FLAT} == {name: config.to_dict()[name] for name in FLAT}
    assert config == LoopConfig(policy=PolicyPhase(learning_rate=3e-4, group_size=6), dpo=DPOPhase(dpo_beta=0.2),
                                reward_model=RewardPhase(lora=True, ensemble=3), sft=SFTPhase(first=True))
    assert LoopConfig(policy=PolicyPhase(epochs=5), policy_lr=1e-3).policy == PolicyPhase(epochs=5, learning_rate=1e-3)
    with pytest.raises(TypeError, match="LoopConfig has no setting 'policy_learning_rate'"):
        LoopConfig(policy_learning_rate=1e-3)
    with pytest.raises(InvalidInput, match="unknown loop setting 'policy'"):
        LoopConfig.from_dict({"policy": {"learning_rate": 1e-3}})  # users name the settings flat


def test_each_phase_goes_to_its_trainer_by_the_trainers_names():
    config = LoopConfig.from_dict(STORED)
    reward = reward_settings(config, 1)
    assert {k: reward[k] for k in ("ensemble", "learning_rate", "early_stopping_patience", "lora", "epochs")} == \
        {"ensemble": 2, "learning_rate": 3e-4, "early_stopping_patience": 3, "lora": True, "epochs": 12.0}
    policy = policy_settings(config, 1)
    assert {k: policy[k] for k in ("num_mini_batches", "learning_rate", "group_size", "init_kl_coef", "target_kl")} == \
        {"num_mini_batches": 4, "learning_rate": 5e-5, "group_size": 8, "init_kl_coef": 0.2, "target_kl": 6.0}
    assert "iterations" not in policy  # PolicyRun's, not PolicyConfig's
    dpo = dpo_settings(config, 1)
    assert (dpo["dpo_beta"], dpo["batch_size"], dpo["learning_rate"], dpo["epochs"]) == (0.3, 4, 5e-5, 2.0)


@pytest.mark.parametrize("settings, message", [
    ({"reward_lr": 0}, "reward_lr must be positive, got 0"),
    ({"policy_mini_batches": 3}, "policy_mini_batches (3) must divide policy_batch_size (32)"),
    ({"dpo_batch_size": 0}, "dpo_batch_size must be at least 1, got 0"),
    ({"sft_epochs": 0}, "sft_epochs must be positive, got 0"),
])
def test_a_phase_names_the_flat_setting_it_refuses(settings, message):
    with pytest.raises(InvalidInput) as raised:
        LoopConfig.from_dict(settings)
    assert str(raised.value) == message


def test_the_loop_command_takes_every_flat_setting():
    parser = loop_cli.argparse.ArgumentParser()
    loop_cli.add_arguments(parser)
    args = parser.parse_args(["--policy-lr", "3e-4", "--reward-lora", "--dpo-beta", "0.2", "--sft-first",
                              "--ppo-epochs", "3"])
    config = loop_cli.config_from_args(args)
    assert (config.policy.learning_rate, config.reward_model.lora, config.dpo.dpo_beta, config.sft.first,
            config.policy.epochs) == (3e-4, True, 0.2, True, 3)
