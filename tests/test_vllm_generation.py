"""The vLLM generation backend (trainers/models/vllm_generation.py; GPU machines only): samples cut at EOS, weights
synced from the trained policy, and PPO run with it, full and LoRA."""

import math

import pytest
import torch

from tests.policy_helpers import PROMPTS, changed, count_great, make_policy, make_tokenizer, parameters, small_config
from trainers.models.generation import left_pad
from trainers.policy.ppo import PPOTrainer
from trainers.policy.rollout import cut_at_end

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="vLLM needs a CUDA GPU"),
              pytest.mark.usefixtures("one_thread")]


@pytest.fixture
def policy_dir(tmp_path):
    path = tmp_path / "policy"
    make_policy(width=64).save_pretrained(path)  # heads of 32: a size every vLLM attention backend supports
    make_tokenizer().save_pretrained(path)
    return path


def test_vllm_samples_cut_at_eos_and_follow_synced_weights(policy_dir):
    from trainers.models.loading import load_policy, load_tokenizer
    from trainers.models.vllm_generation import VLLMGenerator

    tokenizer = load_tokenizer(policy_dir)
    generator = VLLMGenerator(policy_dir, tokenizer, [tokenizer.eos_token_id], gpu_memory_utilization=0.2,
                              max_model_len=32)
    [[first, second]] = generator.generate(["the movie was"], num_samples=2, max_new_tokens=6, temperature=1.0,
                                          top_p=1.0, seed=0)
    for sample in (first, second):
        assert 1 <= sample.num_tokens <= 6 and tokenizer.pad_token_id not in sample.token_ids
        assert sample.ended_with_eos == (sample.token_ids[-1] == tokenizer.eos_token_id)
    # after a weight sync, greedy vLLM decoding matches greedy HF decoding of the changed policy
    policy = load_policy(policy_dir).cuda()
    with torch.no_grad():
        policy.transformer.wte.weight.mul_(3.0)
    generator.sync_weights(policy)
    query, mask = left_pad([tokenizer("the plot was")["input_ids"]], tokenizer.pad_token_id)
    vllm_ids = generator.generate_ids(query.cuda(), mask.cuda(), 6, temperature=1e-6, top_p=1.0)
    hf_ids = policy.generate(input_ids=query.cuda(), attention_mask=mask.cuda(), max_new_tokens=6, do_sample=False,
                             suppress_tokens=[tokenizer.pad_token_id])[:, query.shape[1]:]
    kept, _, _ = cut_at_end(hf_ids, [tokenizer.eos_token_id], tokenizer.pad_token_id)
    assert vllm_ids[0, :kept.shape[1]].tolist() == kept[0].tolist()


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_ppo_with_the_vllm_backend(policy_dir, lora):
    """Responses within the length limit, every metric finite, and the weights that train (all of them, or the LoRA
    adapters and the value head) moved."""
    from trainers.models.loading import load_policy, load_tokenizer

    config = small_config(generation_backend="vllm", vllm_gpu_memory_utilization=0.2, lora=lora)
    trainer = PPOTrainer(config, load_policy(policy_dir), load_tokenizer(policy_dir), PROMPTS, count_great)
    trainable = [n for n, p in trainer.actor_critic.named_parameters() if p.requires_grad]
    before = parameters(trainer.actor_critic)
    metrics = trainer.train(2).metrics
    assert 0 < metrics["ppo/response_length"] <= 6 and all(math.isfinite(v) for v in metrics.values()), metrics
    should_train = [n for n in trainable if not lora or "lora_B" in n or "value_head" in n]
    assert set(should_train) <= set(changed(trainer.actor_critic, before))
