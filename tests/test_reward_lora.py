"""The reward model as a LoRA adapter and a `score` head (`RewardConfig.lora`, trainers/reward/shared_base.py): saved
merged as a plain sequence classifier with its adapter beside it; on a LoRA policy's own base it scores as the merged
export does, with the policy's adapter active and trainable again afterwards."""

from pathlib import Path

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForSequenceClassification

from storage.generations import list_generations
from storage.prompts import get_prompt
from tests.reward_helpers import FAST, fill_store, label_more
from trainers.jobs.reward_job import train_reward_model
from trainers.models.loading import load_policy, load_tokenizer
from trainers.reward.config import RewardConfig
from trainers.reward.scorer import RewardScorer
from trainers.reward.shared_base import ADAPTER_FOLDER, adapter_base, attach_reward_adapters, shares_base

pytestmark = pytest.mark.usefixtures("one_thread")

LORA = {**FAST, "epochs": 2.0, "learning_rate": 1e-2, "lora": True, "lora_r": 4}


def texts(store, n=24):
    rows = list_generations(store)[:n]
    return [get_prompt(store, g.prompt_id).content for g in rows], [g.text for g in rows]


def lora_policy(base_dir):
    """A LoRA policy on `base_dir` whose adapter has moved away from zero, as a trained one has."""
    torch.manual_seed(1)
    policy = get_peft_model(load_policy(base_dir), LoraConfig(r=4, lora_alpha=8, task_type="CAUSAL_LM"))
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.normal_(std=0.05)
    return policy


def test_a_lora_reward_model_is_exported_merged_and_scores_the_same_on_the_policys_base(store, tiny_gpt2_dir,
                                                                                        corpus_sentences):
    fill_store(store, tiny_gpt2_dir, corpus_sentences, 60)
    result = train_reward_model(store, RewardConfig(**LORA, ensemble=2))
    members = [Path(p) for p in result.paths]
    assert all(adapter_base(m / ADAPTER_FOLDER) == tiny_gpt2_dir for m in members)
    merged = AutoModelForSequenceClassification.from_pretrained(members[0])  # a plain HF directory
    assert merged.score.weight.abs().sum() > 0 and not (members[0] / "adapter_config.json").exists()
    prompts, responses = texts(store)
    exported = RewardScorer.from_dirs(members).raw_scores(prompts, responses)  # (2, N)

    policy = lora_policy(tiny_gpt2_dir)
    assert shares_base(members, tiny_gpt2_dir)
    ids = torch.tensor([[5, 6, 7, 8]])
    before = policy(input_ids=ids).logits
    tokenizer = load_tokenizer(tiny_gpt2_dir)
    shared = RewardScorer(attach_reward_adapters(policy, members, tokenizer.pad_token_id),
                          RewardScorer.from_dirs(members).chat, tokenizer.pad_token_id, [(0.0, 1.0)] * 2)
    on_base = shared.raw_scores(prompts, responses)
    assert torch.allclose(on_base, exported, atol=1e-5), (on_base - exported).abs().max()
    assert not torch.allclose(on_base[0], on_base[1])  # two adapters, each its own member
    assert policy.active_adapter == "default"  # the policy's adapter is back, trainable, and unchanged in effect
    trainable = {n for n, p in policy.named_parameters() if p.requires_grad}
    assert trainable and all(".default." in n for n in trainable)
    assert torch.allclose(policy(input_ids=ids).logits, before)
    with policy.disable_adapter():  # the reference: no adapter at all, the reward's neither
        assert torch.allclose(policy(input_ids=ids).logits, load_policy(tiny_gpt2_dir)(input_ids=ids).logits,
                              atol=1e-6)


def test_an_incremental_lora_reward_model_continues_its_adapter_on_the_same_base(store, tiny_gpt2_dir,
                                                                                corpus_sentences):
    policy = fill_store(store, tiny_gpt2_dir, corpus_sentences, 40)
    config = {**LORA, "training": "incremental", "replay_labels": 10}
    first = train_reward_model(store, RewardConfig(**config))
    label_more(store, policy, 20, seed=1)
    second = train_reward_model(store, RewardConfig(**config, round=2))
    assert second.replayed == 10
    assert adapter_base(Path(second.paths[0]) / ADAPTER_FOLDER) == tiny_gpt2_dir  # still on the policy's base
    assert shares_base(second.paths, tiny_gpt2_dir) and shares_base(first.paths, tiny_gpt2_dir)


@pytest.mark.parametrize("algorithm", ["ppo", "grpo"])
def test_a_lora_policy_scores_with_the_reward_adapter_on_its_own_base_and_saves_only_its_own(store, tiny_gpt2_dir,
                                                                                            corpus_sentences,
                                                                                            algorithm):
    from storage.policies import get_policy
    from trainers.jobs.policy_job import build_trainer, plan_policy, train_policy
    from trainers.policy.config import PolicyRun
    from trainers.reward.shared_base import AdapterRewardModel

    fill_store(store, tiny_gpt2_dir, corpus_sentences, 40)
    train_reward_model(store, RewardConfig(**LORA))
    settings = {"lora": True, "batch_size": 4, "response_length": 6, "algorithm": algorithm,
                **({"group_size": 2} if algorithm == "grpo" else {})}
    run = PolicyRun(iterations=1, reward="rm", settings=settings)
    trainer = build_trainer(plan_policy(store, run)[0])
    [member] = trainer.reward.models
    assert isinstance(member, AdapterRewardModel) and member._shared[0] is trainer.policy_model.policy
    # the head on the device the trainer moved the base to (on a GPU it was once left on the CPU)
    assert member.device == trainer.reward.device == next(trainer.policy_model.parameters()).device
    outcome = train_policy(store, run, trainer=trainer)
    saved = Path(get_policy(store, outcome.policy_id).path) / "adapter"
    assert (saved / "adapter_model.safetensors").is_file() and not [p for p in saved.iterdir() if p.is_dir()]
    full = build_trainer(plan_policy(store, PolicyRun(iterations=1, reward="rm", settings={**settings, "lora": False}
                                                      ))[0])
    assert not isinstance(full.reward.models[0], AdapterRewardModel)  # a fully trained policy: the merged copy
