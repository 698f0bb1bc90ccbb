"""Policy-optimiser settings (trainers/policy/config.py): an inconsistent PPO or GRPO setting, or one the model or
the machine cannot run, is one line naming it."""

import pytest

from tests.policy_helpers import PROMPTS, count_great, grpo_config, make_policy, make_tokenizer, small_config
from trainers.policy.config import PolicySetupError
from trainers.policy.ppo import PPOTrainer

pytestmark = pytest.mark.usefixtures("one_thread")


def test_refuses_inconsistent_settings():
    with pytest.raises(PolicySetupError, match="must divide"):
        small_config(num_mini_batches=3).check()
    with pytest.raises(PolicySetupError, match="k1, k2, k3"):
        small_config(kl_estimator="k9").check()
    with pytest.raises(PolicySetupError, match="context of 32"):
        PPOTrainer(small_config(response_length=30), make_policy(), make_tokenizer(), PROMPTS, count_great)


def test_refuses_bf16_on_a_cpu():
    with pytest.raises(PolicySetupError, match="bf16 was requested but there is no GPU"):
        PPOTrainer(small_config(bf16=True), make_policy(), make_tokenizer(), PROMPTS, count_great)


@pytest.mark.parametrize("overrides, message", [
    ({"group_size": 1}, "group_size must be at least 2"),
    ({"num_mini_batches": 3}, "must divide the batch size (4 prompts), so that no mini-batch splits a group of 3"),
    ({"init_kl_coef": -0.1}, "the KL coefficient β (init_kl_coef) must be 0 or more"),
    ({"loss_norm": "mean"}, "unknown loss_norm 'mean'; use sequence or token"),
    ({"algorithm": "dpo"}, "DPO trains on the labelled pairs without a rollout, so it is its own command"),
    ({"algorithm": "kto"}, "unknown algorithm 'kto'; use ppo or grpo"),
])
def test_bad_settings_are_one_line_errors_naming_the_setting(overrides, message):
    with pytest.raises(PolicySetupError) as error:
        grpo_config(**overrides).check()
    assert message in str(error.value) and "\n" not in str(error.value)
