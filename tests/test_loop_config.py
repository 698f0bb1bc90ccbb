"""Loop settings: validated from user JSON with one-line errors; mapped onto reward-model and PPO settings."""

import dataclasses
from pathlib import Path

import pytest

from storage import InvalidInput
from storage.policies import add_policy
from storage.prompts import PromptSelection, add_prompts, set_excluded
from trainers.loop.config import (
    LoopConfig,
    job_settings,
    kl_horizon,
    policy_settings,
    reward_settings,
)
from trainers.loop.label_schedule import first_round_labels, labels_in_round
from trainers.loop.presets import model_preset, real_model_config
from trainers.loop.prompt_use import check_against_store
from trainers.policy.config import PolicyRun
from trainers.settings import note_renamed


def test_defaults_and_presets_are_valid():
    assert LoopConfig.from_json("") == LoopConfig()
    for preset in (model_preset(None).config, real_model_config(135_000_000, 8192), real_model_config(None, None),
                   real_model_config(7_000_000_000, 512)):
        assert LoopConfig.from_dict(preset.to_dict()) == preset


def test_every_field_documents_itself():
    assert all(f.metadata.get("help") for f in dataclasses.fields(LoopConfig))
    assert all(f.metadata.get("help") for f in LoopConfig.settings_fields())  # each phase's settings, named flat


@pytest.mark.parametrize("text,message", [
    ('{"learning_rate": 1}', "unknown loop setting 'learning_rate'"),
    ('{"rounds": "3"}', "'rounds' must be int"),
    ('{"rounds": 2.5}', "'rounds' must be int"),
    ('{"lora": 1}', "'lora' must be bool"),
    ('{"rounds": true}', "'rounds' must be int"),
    ('{"reward_lr": -0.1}', "reward_lr must be positive"),
    ('{"reward_continue_lr_scale": 0}', "reward_continue_lr_scale must be positive"),
    ('{"policy_lr": 0}', "policy_lr must be positive"),
    ('{"response_length": 0}', "response_length must be at least 1"),
    ('{"samples_per_prompt": 1}', "samples_per_prompt must be at least 2"),
    ('{"top_p": 1.5}', "top_p must be in (0, 1]"),
    ('{"oracle_noise": 2}', "oracle_noise must be between 0 and 1"),
    ('{"target_kl": 0}', "target_kl must be positive"),
    ('{"label_decay": 0}', "label_decay must be in (0, 1]"),
    ('{"label_decay": 1.5}', "label_decay must be in (0, 1]"),
    ('{"reward_patience": -1}', "reward_patience must be 0 (off) or more"),
    ('{"reward_training": "partial"}', "reward_training must be one of full, incremental"),
    ('{"reward_replay": -1}', "reward_replay 0 or more"),
    ('{"annotator": "robot"}', "annotator must be one of"),
    ('{"selector": "best"}', "selector must be one of"),
    ('{"selector": "disagreement"}', "needs an ensemble of 2"),
    ('{"policy_batch_size": 30, "policy_mini_batches": 4}', "must divide policy_batch_size"),
    ('{"algorithm": "grpo", "policy_batch_size": 30, "policy_mini_batches": 4}',
     "must divide policy_batch_size (30) (prompts), so that no mini-batch splits a group"),
    ('{"algorithm": "rloo"}', "algorithm must be one of ppo, grpo, dpo"),
    ('{"algorithm": "dpo", "dpo_beta": 0}', "dpo_beta (DPO's β) must be a positive number, got 0"),
    ('{"dpo_beta": -1}', "dpo_beta (DPO's β) must be a positive number"),
    ('{"algorithm": "dpo", "dpo_loss_type": "kto"}', "unknown DPO loss type 'kto'; use one of sigmoid, hinge"),
    ('{"algorithm": "dpo", "dpo_train_ties": true, "dpo_loss_type": "hinge"}', "train_ties needs a loss in which"),
    ('{"algorithm": "dpo", "dpo_batch_size": 0}', "dpo_batch_size must be at least 1"),
    ('{"algorithm": "grpo", "group_size": 1}', "group_size must be at least 2"),
    ('{"kl_coef": -0.1}', "queue_reserve and kl_coef must be 0 or more"),
    ('{"oracle": "no_colon"}', "module:function"),
    ('{"policy_lr": Infinity}', "policy_lr must be a finite number"),
    ('{"kl_coef": NaN}', "kl_coef must be a finite number"),
    ('{"prompts_per_round": 2, "samples_per_prompt": 2, "labels_per_round": 3}', "a round queues at most 2 pairs"),
    ('[1, 2]', "must be a JSON object"),
    ('{"rounds": ', "not valid JSON"),
])
def test_bad_settings_are_one_line_errors(text, message):
    with pytest.raises(InvalidInput, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")) as err:
        LoopConfig.from_json(text)
    assert "\n" not in str(err.value)


def test_numbers_and_null_where_allowed():
    config = LoopConfig.from_json('{"kl_coef": 1, "target_kl": null, "reward_lr": 0.001}')
    assert config.policy.init_kl_coef == 1 and config.policy.target_kl is None


DEMO = str(Path("assets/demo_policy").resolve())  # context 64


def project(store, n: int, heldout: int = 0, policy: str | None = DEMO, text: str = "the movie was"):
    """`store` with a policy (None: none) and n training and `heldout` held-out prompts."""
    if policy is not None:
        add_policy(store, policy)
    add_prompts(store, [f"{text} {i}" for i in range(n)])
    add_prompts(store, [f"{text} held {i}" for i in range(heldout)], heldout=True)
    return store


def test_batches_cannot_exceed_the_prompts_the_loop_can_use(store, tmp_path):
    with pytest.raises(InvalidInput, match="the store has no training prompts and no policy; seed the demo with "
                                           f"python app.py init --demo --db {store.path}, or start a project"):
        check_against_store(LoopConfig(), store)
    project(store, 0, heldout=5)
    with pytest.raises(InvalidInput, match="no training prompts; import some with python app.py import-prompts"):
        check_against_store(LoopConfig(), store)
    project(store, 20, policy=None)
    check_against_store(LoopConfig(prompts_per_round=10, policy_batch_size=20, labels_per_round=10), store)
    with pytest.raises(InvalidInput, match="policy_batch_size is 32 but only 20 training prompts can be used; lower"):
        check_against_store(LoopConfig(prompts_per_round=10, policy_batch_size=32, labels_per_round=10), store)


def test_responses_must_fit_the_policy_context(store, tmp_path):
    (tmp_path / "config.json").write_text('{"n_positions": 64}')
    project(store, 100, policy=str(tmp_path))
    check_against_store(LoopConfig(response_length=63), store)
    with pytest.raises(InvalidInput, match="response_length is 64 but the policy's context holds 64"):
        check_against_store(LoopConfig(response_length=64), store)
    add_policy(store, str(tmp_path / "unknown"))
    check_against_store(LoopConfig(response_length=640), store)  # the context is unknown here: the worker checks


def test_prompts_too_long_or_excluded_are_left_out_counted_and_named_never_refusing_the_loop(store):
    project(store, 48, heldout=1)
    add_prompts(store, ["the movie was " * 12])  # ~37 tokens: id 50
    prompts = check_against_store(LoopConfig(response_length=24), store)  # the long one fits 40 tokens
    assert len(prompts.training.used) == 49 and prompts.training.too_long == 0
    prompts = check_against_store(LoopConfig(response_length=50), store)  # 14 tokens: every short prompt fits
    assert [p.id for p in prompts.training.used] == list(range(1, 49)) and len(prompts.heldout.used) == 1
    assert prompts.lines() == ["policy context 64 tokens: responses up to 50, prompts up to 14",
                               "training prompts: 48 of 49 used; 1 too long for 14 tokens (prompts 50)",
                               "held-out prompts: 1 of 1 used"]
    set_excluded(store, PromptSelection(ids=(3, 49)))
    prompts = check_against_store(LoopConfig(response_length=50, prompts_per_round=47), store)
    assert 3 not in [p.id for p in prompts.training.used] and prompts.heldout.used == []
    assert prompts.lines()[1:] == ["training prompts: 47 of 49 used; 1 too long for 14 tokens (prompts 50); "
                                   "1 excluded", "held-out prompts: 0 of 1 used; 1 excluded"]
    with pytest.raises(InvalidInput, match=r"prompts_per_round is 48 but only 47 training prompts can be used; 2 "
                                           r"training prompts and 1 held-out prompt left out \(python app.py prompts"):
        check_against_store(LoopConfig(response_length=50), store)
    with pytest.raises(InvalidInput, match=r"none of the store's training prompts can be used \(training prompts: "
                                           r"0 of 49 used; 48 too long for 4 tokens \(prompts 1, 2, 4, 5, 6 and 43 "
                                           r"more\); 1 excluded\); include some again"):
        check_against_store(LoopConfig(response_length=60, prompts_per_round=1, policy_batch_size=1,
                                       policy_mini_batches=1, labels_per_round=1), store)


def test_settings_map_onto_the_trainers_configs():
    from trainers.policy.config import PolicyConfig
    from trainers.reward.config import RewardConfig

    config = LoopConfig(reward_lr=0.01, policy_lr=0.02, kl_coef=0.3, ensemble=2, lora=True, seed=4)
    reward = RewardConfig(**reward_settings(config, round=2))
    assert (reward.learning_rate, reward.ensemble, reward.round, reward.seed) == (0.01, 2, 2, 4002)
    ppo = PolicyConfig(**policy_settings(config, round=2))
    assert (ppo.learning_rate, ppo.init_kl_coef, ppo.lora, ppo.seed) == (0.02, 0.3, True, 4002)
    assert job_settings("loop", config) == config.to_dict()
    assert job_settings("reward", config) == reward_settings(config)
    policy_job = job_settings("ppo", config)
    assert policy_job["settings"] == policy_settings(config) and policy_job["reward"] == "rm"
    assert (ppo.algorithm, ppo.episodes_per_prompt) == ("ppo", 1)


def test_grpo_settings_map_onto_the_grpo_config():
    from trainers.policy.config import PolicyConfig

    config = LoopConfig.from_json('{"algorithm": "grpo", "group_size": 8, "kl_coef": 0.02, "target_kl": 3.0, '
                                  '"policy_batch_size": 4, "policy_mini_batches": 2}')
    grpo = PolicyConfig(**policy_settings(config, round=1))
    grpo.check()
    assert (grpo.algorithm, grpo.group_size, grpo.loss_norm, grpo.episodes_per_prompt) == ("grpo", 8, "sequence", 8)
    assert (grpo.init_kl_coef, grpo.target_kl, grpo.batch_size, grpo.num_mini_batches) == (0.02, 3.0, 4, 2)
    assert job_settings("ppo", config)["settings"]["algorithm"] == "grpo"


def test_the_label_schedule_decays_from_the_first_rounds_labels():
    assert [labels_in_round(100, 1.0, i) for i in range(3)] == [100, 100, 100]
    assert [labels_in_round(100, 0.5, i) for i in range(3)] == [100, 50, 25]
    assert [labels_in_round(3, 0.1, i) for i in range(3)] == [3, 1, 1]  # every round labels something
    assert first_round_labels(300, 1.0, 3) == 100
    assert first_round_labels(300, 0.5, 3) == 171  # 171 + 86 + 43 = 300
    assert first_round_labels(300, 0.3, 3) == 216  # 216 + 65 + 19 = 300
    assert first_round_labels(0, 0.5, 3) == 1
    assert first_round_labels(10**12, 1.0, 4) == 250_000_000_000  # by bisection: a huge budget answers at once


def test_a_label_budget_is_split_over_the_rounds_by_the_schedule():
    config = LoopConfig(label_budget=150)
    assert config.labels_per_round == 108 and config.schedule == "108 + 32 + 10 = 150 labels over 3 rounds"
    assert LoopConfig().schedule == "100 + 30 + 9 = 139 labels over 3 rounds"
    assert LoopConfig(rounds=1, label_budget=7).schedule == "7 = 7 labels over 1 round"
    assert config.updated({"labels_per_round": 20}).label_budget is None  # N given: it replaces the budget
    assert config.updated({"rounds": 2}).schedule == "115 + 34 = 149 labels over 2 rounds"  # closest (116: 151)
    with pytest.raises(InvalidInput, match="not both"):
        config.updated({"labels_per_round": 20, "label_budget": 100})


def test_the_reward_model_keeps_one_validation_split_warm_starts_and_stops_early_when_asked():
    from trainers.reward.config import RewardConfig

    config = LoopConfig(seed=7, reward_warm_start=True, reward_patience=2)
    first, second = (RewardConfig(**reward_settings(config, round=g)) for g in (1, 2))
    assert (first.seed, second.seed) == (7001, 7002) and first.split_seed == second.split_seed == 7
    assert second.warm_start and second.early_stopping_patience == 2
    assert not RewardConfig(**reward_settings(LoopConfig())).warm_start


def test_the_kl_controllers_horizon_is_the_loops_episodes_so_beta_can_move_within_a_loop():
    from trainers.policy.config import PolicyConfig

    config = LoopConfig(rounds=3, policy_iterations=10, policy_batch_size=32, target_kl=3.0)
    assert kl_horizon(config) == 960 == PolicyConfig(**policy_settings(config, round=1)).kl_horizon
    grpo = LoopConfig(rounds=2, policy_iterations=5, policy_batch_size=8, algorithm="grpo", group_size=4)
    assert kl_horizon(grpo) == 320


def test_a_noisy_oracle_tells_the_reward_model_its_noise_rate():
    from trainers.reward.config import RewardConfig

    assert RewardConfig(**reward_settings(LoopConfig(oracle_noise=0.1))).label_noise == 0.1
    assert reward_settings(LoopConfig())["label_noise"] == 0.0
    assert reward_settings(LoopConfig(oracle_noise=1.0))["label_noise"] == 0.0  # all noise: nothing to model
    assert reward_settings(LoopConfig(annotator="human", oracle_noise=0.1))["label_noise"] == 0.0


def test_settings_stored_under_their_old_names_keep_their_meaning():
    old = {"ppo_iterations": 7, "ppo_batch_size": 8, "ppo_mini_batches": 2, "ppo_epochs": 3, "ppo_lr": 3e-4}
    config = LoopConfig.from_dict(old)
    assert (config.policy.iterations, config.policy.batch_size, config.policy.num_mini_batches, config.policy.epochs,
            config.policy.learning_rate) == (7, 8, 2, 3, 3e-4)
    with pytest.raises(InvalidInput, match="'ppo_lr' is the old name of 'policy_lr'"):
        LoopConfig.from_dict({"ppo_lr": 1e-4, "policy_lr": 1e-4})
    run = PolicyRun.from_dict({"iterations": 2, "ppo": {"algorithm": "grpo", "ppo_epochs": 3}})  # a job stored so
    assert run.settings == {"algorithm": "grpo", "ppo_epochs": 3} and run.config.epochs == 3
    assert run.config.algorithm == "grpo"


def test_the_check_pairs_old_setting_names_work_with_a_note_printed_once(capsys):
    note_renamed.cache_clear()  # the note is once per process: start this test's process afresh
    config = LoopConfig.from_dict({"audit_share": 0.2, "audit_min_agreement": 0.7})
    assert (config.check_share, config.check_min_agreement) == (0.2, 0.7)
    assert LoopConfig().updated({"audit_share": 0.3}).check_share == 0.3
    assert capsys.readouterr().err.splitlines() == [
        "note: loop setting 'audit_share' is now called 'check_share'; the old name still works",
        "note: loop setting 'audit_min_agreement' is now called 'check_min_agreement'; the old name still works"]
    with pytest.raises(InvalidInput, match="'audit_share' is the old name of 'check_share'"):
        LoopConfig.from_dict({"audit_share": 0.1, "check_share": 0.1})


def test_the_loops_reward_model_trains_incrementally_on_each_rounds_new_labels_and_a_replay():
    from trainers.reward.config import RewardConfig

    incremental = RewardConfig(**reward_settings(LoopConfig(reward_training="incremental", reward_replay=40), round=2))
    assert (incremental.training, incremental.replay_labels) == ("incremental", 40)
    assert RewardConfig(**reward_settings(LoopConfig())).training == "full"  # the default (see LoopConfig)
