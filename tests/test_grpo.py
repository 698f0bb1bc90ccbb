"""GRPO (trainers/policy/grpo.py): whole groups in consecutive rows and mini-batches, no critic anywhere, its
metrics, LoRA adapters over a frozen base, and learning on the demo. The base it shares with PPO (stop, resume,
training against a reward model) is tested in test_policy_optimizer.py."""

import math

import pytest
import torch
from transformers import AutoModelForCausalLM

from storage.jobs import claim_job, create_job, get_job
from storage.metrics import read_metrics
from storage.policies import list_policies
from tests.policy_helpers import PROMPTS, count_great, grpo_config, make_policy, make_tokenizer, register
from trainers.jobs.layer import StoreReporter
from trainers.policy.checkpoint import VALUE_HEAD_FILE, load_value_head
from trainers.policy.grpo import GRPOTrainer

pytestmark = pytest.mark.usefixtures("one_thread")

GRPO_METRICS = ["grpo/score", "grpo/kl", "grpo/kl_token", "grpo/kl_coef", "grpo/entropy", "grpo/loss",
                "grpo/clipfrac", "grpo/approx_kl", "grpo/zero_variance_groups", "grpo/response_length",
                "grpo/eos_rate", "grpo/episodes_per_s"]


def grpo_trainer(config=None, reward=count_great, **kwargs) -> GRPOTrainer:
    return GRPOTrainer(config or grpo_config(), make_policy(), make_tokenizer(), PROMPTS, reward, **kwargs)


# ----- groups --------------------------------------------------------------------------------------------------

def test_each_prompt_gets_a_group_of_consecutive_rows_and_mini_batches_take_groups_whole():
    trainer = grpo_trainer(grpo_config(num_mini_batches=2, epochs=2))
    rollouts, mini_batches = [], []
    rollout, loss = trainer.rollout, trainer.loss
    trainer.rollout = lambda prompts, ids: (rollouts.append(prompts), rollout(prompts, ids))[1]
    trainer.loss = lambda r, targets, idx, *rest: (mini_batches.append(idx.tolist()), loss(r, targets, idx, *rest))[1]
    trainer.step()
    [prompts] = rollouts
    chosen = [PROMPTS[i] for i in trainer._batch_indices(0)]
    assert prompts == [p for p in chosen for _ in range(3)]  # 4 prompts x G = 3 rows, each group together
    assert len(mini_batches) == 2 * 2
    for rows in mini_batches:  # 2 whole groups per mini-batch
        assert len(rows) == 6 and sorted({r // 3 for r in rows}) == sorted(r // 3 for r in rows[::3])
        assert sorted(rows) == sorted(3 * g + k for g in {r // 3 for r in rows} for k in range(3))
    for epoch in (mini_batches[:2], mini_batches[2:]):  # an epoch sees every row once
        assert sorted(epoch[0] + epoch[1]) == list(range(12))


# ----- no critic ------------------------------------------------------------------------------------------------

def test_no_value_head_is_trained_or_saved_and_the_saved_policy_loads_as_a_plain_causal_lm(store):
    trainer = grpo_trainer()
    assert not any("value_head" in name for name, _ in trainer.policy_model.named_parameters())
    trainer.train(1)
    register(store, trainer, round=1)
    [policy] = list_policies(store)
    assert load_value_head(policy.path) is None
    assert not (type(store.path)(policy.path) / VALUE_HEAD_FILE).exists()
    loaded = AutoModelForCausalLM.from_pretrained(policy.path)
    for name, value in trainer.policy_model.policy.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[name], value)


# ----- training and store reporting -----------------------------------------------------------------------------

def test_train_reports_the_grpo_metrics_each_iteration_and_changes_the_weights(store):
    policy = make_policy()
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    job_id = create_job(store, "ppo", {})
    claim_job(store, job_id, pid=1)
    trainer = GRPOTrainer(grpo_config(), policy, make_tokenizer(), PROMPTS, count_great)
    trainer.train(2, StoreReporter(store, job_id, phase="grpo"))
    rows = read_metrics(store, job_id)
    assert {r["name"] for r in rows} == set(GRPO_METRICS)
    assert all(math.isfinite(r["value"]) for r in rows), rows
    assert {(r["name"], r["step"]) for r in rows} == {(name, step) for name in GRPO_METRICS for step in (1, 2)}
    changed = [n for n, p in policy.named_parameters() if not torch.equal(p, before[n])]
    assert "transformer.wte.weight" in changed and len(changed) == len(before)
    assert get_job(store, job_id).phase == "grpo 1/2"
    shares = [r["value"] for r in rows if r["name"] == "grpo/zero_variance_groups"]
    assert all(0.0 <= share <= 1.0 for share in shares)


def test_lora_trains_adapters_only_against_the_base_as_reference():
    policy = make_policy()
    base = {n: p.detach().clone() for n, p in policy.named_parameters()}
    trainer = GRPOTrainer(grpo_config(lora=True, learning_rate=1e-2), policy, make_tokenizer(), PROMPTS, count_great)
    trained = {n for n, p in trainer.policy_model.named_parameters() if p.requires_grad}
    assert trained and all("lora_" in n for n in trained)
    trainer.train(2)
    peft_model = trainer.policy_model.policy
    for name, param in peft_model.get_base_model().named_parameters():
        if "lora_" not in name:
            assert torch.equal(param, base[name.replace(".base_layer", "")]), name
    ids = torch.tensor([[3, 4, 7, 5]])
    with peft_model.disable_adapter():
        torch.testing.assert_close(peft_model(input_ids=ids).logits, make_policy()(input_ids=ids).logits)
    assert not torch.allclose(peft_model(input_ids=ids).logits, make_policy()(input_ids=ids).logits)


# ----- learning on the demo --------------------------------------------------------------------------------------

def test_oracle_grpo_raises_the_heldout_score_on_the_demo():
    from assets.build_demo import ensure_demo_policy
    from assets.corpus import demo_prompts
    from trainers.jobs.policy_job import oracle_reward
    from trainers.models.loading import load_policy, load_tokenizer
    from trainers.policy.config import PolicyConfig

    path = ensure_demo_policy()
    train, heldout = demo_prompts()
    config = PolicyConfig(algorithm="grpo", group_size=4, batch_size=8, num_mini_batches=2, epochs=2,
                       learning_rate=3e-4, response_length=16, init_kl_coef=0.05, seed=0)
    trainer = GRPOTrainer(config, load_policy(path), load_tokenizer(path), train, oracle_reward)
    before = trainer.evaluate(heldout * 4, oracle_reward, seed=1)
    trainer.train(12)
    after = trainer.evaluate(heldout * 4, oracle_reward, seed=1)
    assert after["score"] > before["score"] + 0.4, (before, after)
    assert after["kl"] < 8.0, after
