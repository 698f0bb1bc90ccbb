"""PPO (trainers/policy/ppo.py): its metrics each iteration, the value head (trained, saved beside the policy, at its
own learning rate), LoRA adapters and head trained over a frozen base, and learning on the demo. The base it shares
with GRPO is tested in test_policy_optimizer.py."""

import math

import pytest
import torch
from transformers import AutoModelForCausalLM

from storage.jobs import claim_job, create_job, get_job
from storage.metrics import read_metrics
from storage.policies import list_policies
from tests.policy_helpers import PROMPTS, count_great, make_policy, make_tokenizer, register, small_config
from trainers.jobs.layer import StoreReporter
from trainers.policy.checkpoint import load_value_head
from trainers.policy.config import PolicyConfig
from trainers.policy.ppo import PPOTrainer

pytestmark = pytest.mark.usefixtures("one_thread")

METRICS = ["ppo/score", "ppo/kl", "ppo/kl_coef", "ppo/entropy", "ppo/policy_loss", "ppo/value_loss", "ppo/clipfrac",
           "ppo/approx_kl", "ppo/explained_variance", "ppo/response_length", "ppo/eos_rate", "ppo/episodes_per_s"]


def test_train_reports_every_metric_each_iteration_and_changes_the_weights(store):
    policy = make_policy()
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    job_id = create_job(store, "ppo", {})
    claim_job(store, job_id, pid=1)
    trainer = PPOTrainer(small_config(), policy, make_tokenizer(), PROMPTS, count_great)
    result = trainer.train(2, StoreReporter(store, job_id, phase="ppo"))  # not stopped: no JobCancelled
    assert result.iterations == 2
    rows = read_metrics(store, job_id)
    assert {(r["name"], r["step"]) for r in rows} >= {(name, step) for name in METRICS for step in (1, 2)}
    assert all(math.isfinite(r["value"]) for r in rows), rows
    changed = [n for n, p in policy.named_parameters() if not torch.equal(p, before[n])]
    assert "transformer.wte.weight" in changed and len(changed) == len(before)
    assert get_job(store, job_id).phase == "ppo 1/2"


def test_registered_policy_loads_as_a_plain_causal_lm(store):
    trainer = PPOTrainer(small_config(), make_policy(), make_tokenizer(), PROMPTS, count_great)
    trainer.train(1)
    policy_id = register(store, trainer, round=1)
    [policy] = list_policies(store)
    assert policy.id == policy_id and policy.round == 1
    loaded = AutoModelForCausalLM.from_pretrained(policy.path)
    for name, value in trainer.actor_critic.policy.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[name], value)
    assert load_value_head(policy.path)["weight"].shape == (1, 32)
    registered = type(store.path)(policy.path)
    assert [p.name for p in (store.data_dir / "policies").iterdir()] == [registered.name]


def test_lora_trains_adapters_and_head_but_leaves_the_base_unchanged(store):
    policy = make_policy()
    base = {n: p.detach().clone() for n, p in policy.named_parameters()}
    trainer = PPOTrainer(small_config(lora=True, learning_rate=1e-2), policy, make_tokenizer(), PROMPTS, count_great)
    lora_before = {n: p.detach().clone() for n, p in trainer.actor_critic.named_parameters() if p.requires_grad}
    trainer.train(2)
    peft_model = trainer.actor_critic.policy
    for name, param in peft_model.get_base_model().named_parameters():
        original = name.replace(".base_layer", "")
        if "lora_" not in name:
            assert torch.equal(param, base[original]), name
    trained = dict(trainer.actor_critic.named_parameters())
    assert all(not torch.equal(trained[n], v) for n, v in lora_before.items() if "lora_B" in n or "value_head" in n)
    # the reference is the base with adapters disabled: it still gives the original model's logits
    ids = torch.tensor([[3, 4, 7, 5]])
    with peft_model.disable_adapter():
        reference_logits = peft_model(input_ids=ids).logits
    torch.testing.assert_close(reference_logits, make_policy()(input_ids=ids).logits)
    # the saved policy is the merged model
    policy_id = register(store, trainer)
    path = list_policies(store)[0].path
    merged = AutoModelForCausalLM.from_pretrained(path)
    torch.testing.assert_close(merged(input_ids=ids).logits, peft_model(input_ids=ids).logits)
    assert policy_id == 1 and (type(store.path)(path) / "adapter" / "adapter_config.json").is_file()


def test_the_value_head_learns_at_its_own_rate_when_given_one():
    from trainers.policy.modules import PolicyWithValueHead
    from trainers.policy.ppo import parameter_groups

    model = PolicyWithValueHead(make_policy())
    policy, head = parameter_groups(model, small_config(learning_rate=1e-5, value_lr=1e-3))
    assert head["lr"] == 1e-3 and "lr" not in policy  # the policy takes the optimiser's learning_rate
    assert {id(p) for p in head["params"]} == {id(p) for p in model.value_head.parameters()}
    assert len(policy["params"]) + len(head["params"]) == len(list(model.parameters()))
    assert parameter_groups(model, small_config(learning_rate=1e-5))[1]["lr"] == 1e-5


# ----- learning on the demo --------------------------------------------------------------------------------------

def test_oracle_ppo_raises_the_heldout_score_on_the_demo():
    from assets.build_demo import ensure_demo_policy
    from assets.corpus import demo_prompts
    from trainers.jobs.policy_job import oracle_reward
    from trainers.models.loading import load_policy, load_tokenizer

    path = ensure_demo_policy()
    train, heldout = demo_prompts()
    config = PolicyConfig(batch_size=32, num_mini_batches=2, epochs=2, learning_rate=3e-4, response_length=16,
                       init_kl_coef=0.05, seed=0)
    trainer = PPOTrainer(config, load_policy(path), load_tokenizer(path), train, oracle_reward)
    before = trainer.evaluate(heldout * 4, oracle_reward, seed=1)
    trainer.train(12)
    after = trainer.evaluate(heldout * 4, oracle_reward, seed=1)
    assert after["score"] > before["score"] + 0.5, (before, after)
    assert after["kl"] < 8.0, after
