"""The base every policy optimiser runs on (trainers/policy/optimizer.py): the prompts and algorithm it accepts,
scoring the decoded responses, rollout bookkeeping, training against a reward model, the early stop, and a run
stopped within one iteration, saved and resumed, for PPO and GRPO alike."""

import copy

import pytest
import torch

from storage.jobs import claim_job, create_job
from storage.metrics import read_metrics
from tests.policy_helpers import (
    ALGORITHMS,
    PROMPTS,
    CancelAt,
    algorithm_config,
    count_great,
    make_policy,
    make_reward_model,
    make_tokenizer,
    make_trainer,
    small_config,
)
from trainers.jobs.layer import StoreReporter
from trainers.policy.checkpoint import STATE_FILE
from trainers.policy.config import PolicySetupError
from trainers.policy.grpo import GRPOTrainer
from trainers.policy.ppo import PPOTrainer
from trainers.reporting import JobCancelled

pytestmark = pytest.mark.usefixtures("one_thread")


# ----- prompts and the algorithm ---------------------------------------------------------------------------------

def test_refuses_fewer_prompts_than_a_batch():
    with pytest.raises(PolicySetupError, match="3 training prompts for a batch of 4"):
        PPOTrainer(small_config(), make_policy(), make_tokenizer(), PROMPTS[:3], count_great)


def test_the_trainer_runs_the_algorithm_its_settings_name():
    with pytest.raises(PolicySetupError, match="GRPOTrainer runs algorithm 'grpo' but the settings say 'ppo'"):
        GRPOTrainer(small_config(), make_policy(), make_tokenizer(), PROMPTS, count_great)


# ----- scoring the decoded responses -----------------------------------------------------------------------------

def test_a_reward_model_with_its_own_tokenizer_scores_the_decoded_text_in_its_own_format():
    from trainers.models.chat_format import ChatFormat
    from trainers.reward.scorer import RewardScorer

    other = make_tokenizer()
    other.add_tokens(["superb"])  # another vocabulary than the policy's: fine, the reward model reads text
    reward_model = make_reward_model(vocab_size=len(other))
    scorer = RewardScorer([reward_model], ChatFormat.from_tokenizer(other), other.pad_token_id, [(0.0, 1.0)])
    trainer = PPOTrainer(small_config(), make_policy(), make_tokenizer(), PROMPTS, scorer)
    score = trainer._score(["the plot was"], torch.tensor([[9, 10, 0]]), torch.tensor([[1.0, 1, 1]]))  # great good
    ids = other("the plot was great good")["input_ids"] + [other.eos_token_id]
    assert score.item() == pytest.approx(reward_model(input_ids=torch.tensor([ids])).logits[0, 0].item(), abs=1e-5)


def test_reward_model_scores_prompt_and_decoded_response_closed_by_eos_never_the_padding():
    from trainers.models.chat_format import ChatFormat
    from trainers.reward.scorer import RewardScorer

    reward_model, tokenizer = make_reward_model(), make_tokenizer()
    scorer = RewardScorer([reward_model], ChatFormat.from_tokenizer(tokenizer), 1, [(0.5, 2.0)])
    trainer = PPOTrainer(small_config(), make_policy(), make_tokenizer(), PROMPTS, scorer)
    responses = torch.tensor([[8, 0, 1, 1], [9, 10, 11, 12]])  # the first ends with EOS (0); the second has none
    mask = torch.tensor([[1.0, 1, 0, 0], [1, 1, 1, 1]])
    scores = trainer._score(["the movie was", "the plot"], responses, mask)
    for sequence, score in zip([[3, 4, 7, 8, 0], [3, 5, 9, 10, 11, 12, 0]], scores, strict=True):
        alone = reward_model(input_ids=torch.tensor([sequence])).logits[0, 0]
        assert score.item() == pytest.approx(((alone - 0.5) / 2.0).item(), abs=1e-5)


# ----- rollout bookkeeping ---------------------------------------------------------------------------------------

def test_rollout_stores_masked_tensors_of_one_shape():
    trainer = PPOTrainer(small_config(), make_policy(), make_tokenizer(), PROMPTS, count_great)
    indices = trainer._batch_indices(0)
    rollout = trainer.rollout([PROMPTS[i] for i in indices], [trainer.prompt_ids[i] for i in indices])
    shape = rollout.responses.shape
    assert shape[0] == 4 and 1 <= shape[1] <= 6
    for name in ("mask", "logprobs", "ref_logprobs", "values", "entropy"):
        assert getattr(rollout, name).shape == shape, name
    pad = rollout.mask == 0
    assert (rollout.responses[pad] == 1).all() and (rollout.logprobs[pad] == 0).all()
    # before any update the reference is the policy itself: per-token KL 0
    torch.testing.assert_close(rollout.logprobs, rollout.ref_logprobs)
    assert (rollout.logprobs[~pad] < 0).all()


def test_prompt_batches_cover_every_prompt_each_epoch():
    trainer = PPOTrainer(small_config(), make_policy(), make_tokenizer(), PROMPTS, count_great)
    epoch = trainer._batch_indices(0) + trainer._batch_indices(1)
    assert sorted(epoch) == list(range(8))
    assert trainer._batch_indices(2) != trainer._batch_indices(0)  # a new order in the next epoch
    assert trainer._batch_indices(0) == trainer._batch_indices(0)


def test_early_stop_when_the_policy_moves_too_far():
    # before the first step the policy is the one sampled: its KL to the old log-probs (the sampler's) is rounding
    trainer = PPOTrainer(small_config(max_approx_kl=1e-9, epochs=4, learning_rate=1e-2), make_policy(),
                         make_tokenizer(), PROMPTS, count_great)
    steps = []
    step = trainer.optimizer.step
    trainer.optimizer.step = lambda *a, **k: (steps.append(1), step(*a, **k))[1]
    trainer.train(1)
    assert len(steps) == 1  # 4 epochs x 2 mini-batches without the bound


# ----- stop, save, resume ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_cancel_stops_within_one_iteration_and_saves_the_state(store, tmp_path, algorithm):
    job_id = create_job(store, "ppo", {})
    claim_job(store, job_id, pid=1)
    trainer = make_trainer(algorithm, state_dir=tmp_path / "state")
    with pytest.raises(JobCancelled, match=f"{algorithm.upper()} was stopped after 2 of 10 iterations"):
        trainer.train(10, StoreReporter(store, job_id, listener=CancelAt(store, job_id, 2)))
    assert trainer.iteration == 2 and max(r["step"] for r in read_metrics(store, job_id)) == 2
    state = torch.load(tmp_path / "state" / STATE_FILE, weights_only=True)
    assert state["iteration"] == 2 and state["config"]["algorithm"] == algorithm
    assert any("value_head" in name for name in state["model"]) == (algorithm == "ppo")  # GRPO has no critic


@pytest.mark.parametrize("algorithm, target_kl", [("ppo", 0.5), ("grpo", 0.01)])
def test_resumed_run_equals_an_uninterrupted_one(tmp_path, algorithm, target_kl):
    config = algorithm_config(algorithm, target_kl=target_kl, kl_horizon=100, save_every=100)
    straight = make_trainer(algorithm, config)
    straight.train(3)

    make_trainer(algorithm, config, state_dir=tmp_path).train(2)  # the state is saved at the end of a train() call
    resumed = make_trainer(algorithm, config, state_dir=tmp_path)
    assert resumed.iteration == 2
    resumed.train(3)

    assert resumed.kl_controller.value == straight.kl_controller.value != config.init_kl_coef
    expected = straight.policy_model.state_dict()
    assert resumed.policy_model.state_dict().keys() == expected.keys()
    for name, value in resumed.policy_model.state_dict().items():
        assert torch.equal(value, expected[name]), name


class EngineStandIn:
    """A generation backend with its own copy of the weights, as a vLLM engine has: it samples with the HF policy
    only after `sync_weights` handed it the policy's current weights."""

    def __init__(self, policy, tokenizer):
        from trainers.policy.rollout import HFRolloutBackend

        self.engine = copy.deepcopy(policy)
        self.hf = HFRolloutBackend(self.engine, tokenizer.pad_token_id, [tokenizer.eos_token_id])
        self.synced: list[torch.Tensor] = []

    def generate_ids(self, *args, **kwargs):
        return self.hf.generate_ids(*args, **kwargs)

    def sync_weights(self, policy):
        self.engine.load_state_dict(policy.state_dict())
        self.synced.append(policy.lm_head.weight.detach().clone())


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_resumed_run_hands_the_restored_weights_to_the_generation_backend_before_sampling(tmp_path, algorithm):
    config = algorithm_config(algorithm, save_every=100)
    first = make_trainer(algorithm, config, state_dir=tmp_path)
    first.train(2)
    trained = first.policy_model.policy.lm_head.weight.detach().clone()
    policy = make_policy()
    backend = EngineStandIn(policy, make_tokenizer())
    resumed = make_trainer(algorithm, config, policy=policy, state_dir=tmp_path, backend=backend)
    assert len(backend.synced) == 1 and torch.equal(backend.synced[0], trained)  # synced on resume, before any rollout
    assert torch.equal(backend.engine.lm_head.weight, trained)
    resumed.train(3)
    assert len(backend.synced) == 2  # and after the one update since


def test_a_ppo_state_does_not_resume_as_grpo(tmp_path):
    make_trainer("ppo", state_dir=tmp_path).train(1)
    with pytest.raises(PolicySetupError, match="made with other settings \\(algorithm, LoRA or model\\)"):
        make_trainer("grpo", state_dir=tmp_path)
