"""Loop settings: validated from user JSON with one-line errors; mapped onto reward-model and PPO settings."""

import dataclasses

import pytest

from storage import InvalidInput
from storage.types import Prompt
from trainers.loop.config import (
    LoopConfig,
    check_against_store,
    first_round_labels,
    job_settings,
    kl_horizon,
    labels_in_round,
    policy_settings,
    reward_settings,
)
from trainers.loop.presets import model_preset, real_model_config
from trainers.policy.config import PolicyRun


def test_defaults_and_presets_are_valid():
    assert LoopConfig.from_json("") == LoopConfig()
    for preset in (model_preset(None).config, real_model_config(135_000_000, 8192), real_model_config(None, None),
                   real_model_config(7_000_000_000, 512)):
        assert LoopConfig.from_dict(preset.to_dict()) == preset


def test_every_field_documents_itself():
    assert all(f.metadata.get("help") for f in dataclasses.fields(LoopConfig))


@pytest.mark.parametrize("text,message", [
    ('{"learning_rate": 1}', "unknown loop setting 'learning_rate'"),
    ('{"rounds": "3"}', "'rounds' must be int"),
    ('{"rounds": 2.5}', "'rounds' must be int"),
    ('{"lora": 1}', "'lora' must be bool"),
    ('{"rounds": true}', "'rounds' must be int"),
    ('{"reward_lr": -0.1}', "reward_lr must be positive"),
    ('{"policy_lr": 0}', "policy_lr must be positive"),
    ('{"response_length": 0}', "response_length must be at least 1"),
    ('{"samples_per_prompt": 1}', "samples_per_prompt must be at least 2"),
    ('{"top_p": 1.5}', "top_p must be in (0, 1]"),
    ('{"oracle_noise": 2}', "oracle_noise must be between 0 and 1"),
    ('{"target_kl": 0}', "target_kl must be positive"),
    ('{"label_decay": 0}', "label_decay must be in (0, 1]"),
    ('{"label_decay": 1.5}', "label_decay must be in (0, 1]"),
    ('{"reward_patience": -1}', "reward_patience must be 0 (off) or more"),
    ('{"annotator": "robot"}', "annotator must be one of"),
    ('{"selector": "best"}', "selector must be one of"),
    ('{"selector": "disagreement"}', "needs an ensemble of 2"),
    ('{"policy_batch_size": 30, "policy_mini_batches": 4}', "must divide policy_batch_size"),
    ('{"algorithm": "grpo", "policy_batch_size": 30, "policy_mini_batches": 4}',
     "must divide policy_batch_size (30) (prompts), so that no mini-batch splits a group"),
    ('{"algorithm": "dpo"}', "algorithm must be one of ppo, grpo"),
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
    assert config.kl_coef == 1 and config.target_kl is None


def prompts(n: int, heldout: int = 0, text: str = "the movie was") -> list[Prompt]:
    return [Prompt(i + 1, f"{text} {i}", None, i >= n) for i in range(n + heldout)]


def test_batches_cannot_exceed_the_prompt_set():
    check_against_store(LoopConfig(prompts_per_round=10, policy_batch_size=10, labels_per_round=10), prompts(10), None)
    with pytest.raises(InvalidInput, match="policy_batch_size is 32 but the store has only 20 training prompts"):
        check_against_store(LoopConfig(prompts_per_round=10, policy_batch_size=32, labels_per_round=10),
                            prompts(20, heldout=20), None)
    with pytest.raises(InvalidInput, match="no training prompts"):
        check_against_store(LoopConfig(), prompts(0, heldout=5), None)


def test_responses_must_fit_the_policy_context(tmp_path):
    (tmp_path / "config.json").write_text('{"n_positions": 64}')
    check_against_store(LoopConfig(response_length=63), prompts(100), str(tmp_path))
    with pytest.raises(InvalidInput, match="response_length is 64 but the policy's context holds 64"):
        check_against_store(LoopConfig(response_length=64), prompts(100), str(tmp_path))
    check_against_store(LoopConfig(response_length=640), prompts(100), str(tmp_path / "unknown"))  # the worker checks


def test_every_prompt_must_fit_the_context_with_the_response_named_by_its_id():
    demo = "assets/demo_policy"  # context 64
    check_against_store(LoopConfig(response_length=24), prompts(48, heldout=2), demo)
    long = prompts(48) + [Prompt(99, "the movie was " * 12, None, True)]  # a held-out prompt of ~37 tokens
    check_against_store(LoopConfig(response_length=24), long, demo)
    with pytest.raises(InvalidInput, match=r"prompt 99: the prompt has \d+ tokens, over the limit of 14 \(the "
                                           r"policy's context of 64 less 50 response tokens\)"):
        check_against_store(LoopConfig(response_length=50), long, demo)


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
    assert job_settings("ppo", config)["settings"] == policy_settings(config) and job_settings("ppo", config)["reward"] == "rm"
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
    assert kl_horizon(LoopConfig(rounds=2, policy_iterations=5, policy_batch_size=8, algorithm="grpo", group_size=4)) == 320


def test_a_noisy_oracle_tells_the_reward_model_its_noise_rate():
    from trainers.reward.config import RewardConfig

    assert RewardConfig(**reward_settings(LoopConfig(oracle_noise=0.1))).label_noise == 0.1
    assert reward_settings(LoopConfig())["label_noise"] == 0.0
    assert reward_settings(LoopConfig(oracle_noise=1.0))["label_noise"] == 0.0  # all noise: nothing to model
    assert reward_settings(LoopConfig(annotator="human", oracle_noise=0.1))["label_noise"] == 0.0


def test_settings_stored_under_their_old_names_keep_their_meaning():
    old = {"ppo_iterations": 7, "ppo_batch_size": 8, "ppo_mini_batches": 2, "ppo_epochs": 3, "ppo_lr": 3e-4}
    config = LoopConfig.from_dict(old)
    assert (config.policy_iterations, config.policy_batch_size, config.policy_mini_batches, config.policy_epochs,
            config.policy_lr) == (7, 8, 2, 3, 3e-4)
    with pytest.raises(InvalidInput, match="'ppo_lr' is the old name of 'policy_lr'"):
        LoopConfig.from_dict({"ppo_lr": 1e-4, "policy_lr": 1e-4})
    run = PolicyRun.from_dict({"iterations": 2, "ppo": {"algorithm": "grpo", "ppo_epochs": 3}})  # a job stored so
    assert run.settings == {"algorithm": "grpo", "ppo_epochs": 3} and run.config.epochs == 3
    assert run.config.algorithm == "grpo"
