"""Before a policy optimiser starts (trainers/policy/setup.py): the tokenizers and reward models it refuses, each in
one line, and activation checkpointing, which must not change the update."""

import pytest
import torch

from tests.policy_helpers import PROMPTS, count_great, make_policy, make_reward_model, make_tokenizer, small_config
from trainers.policy.config import PolicySetupError
from trainers.policy.ppo import PPOTrainer

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("tokenizer, message", [
    (make_tokenizer(pad=None), "no pad token"),
    (make_tokenizer(pad="<eos>"), "pad token is its EOS"),
    (make_tokenizer(padding_side="right"), "pads on the right"),
])
def test_refuses_bad_tokenizers(tokenizer, message):
    with pytest.raises(PolicySetupError, match=message):
        PPOTrainer(small_config(), make_policy(), tokenizer, PROMPTS, count_great)


def test_refuses_a_reward_model_with_two_labels_or_too_few_embeddings_for_its_tokenizer():
    with pytest.raises(PolicySetupError, match="num_labels=2"):
        PPOTrainer(small_config(), make_policy(), make_tokenizer(), PROMPTS, make_reward_model(num_labels=2))
    with pytest.raises(PolicySetupError, match="reward model has 10 embeddings but its tokenizer 17 tokens"):
        PPOTrainer(small_config(), make_policy(), make_tokenizer(), PROMPTS, make_reward_model(vocab_size=10))


def test_gradient_checkpointing_gives_the_same_update():
    plain = PPOTrainer(small_config(), make_policy(), make_tokenizer(), PROMPTS, count_great)
    plain.train(1)  # (trainers seed torch's global RNG when built: build each one right before it trains)
    checkpointed = PPOTrainer(small_config(gradient_checkpointing=True), make_policy(), make_tokenizer(), PROMPTS,
                              count_great)
    checkpointed.train(1)
    assert not checkpointed.actor_critic.training
    expected = plain.actor_critic.state_dict()
    for name, value in checkpointed.actor_critic.state_dict().items():
        torch.testing.assert_close(value, expected[name], rtol=1e-4, atol=1e-5, msg=name)
