"""PPO trainer: checks before starting, rollout bookkeeping, store reporting, cancel, resume, LoRA, learning on the
demo."""

import copy

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    AutoModelForCausalLM,
    GPT2Config,
    GPT2ForSequenceClassification,
    GPT2LMHeadModel,
    PreTrainedTokenizerFast,
)

from storage.jobs import claim_job, create_job, get_job, request_cancel
from storage.metrics import read_metrics
from storage.policies import list_policies
from trainers.jobs.layer import StoreReporter, register_policy, staging_path
from trainers.models.generation import left_pad
from trainers.policy.checkpoint import STATE_FILE, load_value_head
from trainers.policy.config import PolicyConfig, PolicySetupError
from trainers.policy.ppo import PPOTrainer
from trainers.policy.rollout import cut_at_end
from trainers.reporting import JobCancelled, Reporter

WORDS = "the movie plot acting was is great good bad awful fine and but .".split()
PROMPTS = ["the movie was", "the plot was", "the acting was", "the movie is", "the plot is", "the acting is",
           "the movie and the plot", "the acting and the plot"]
METRICS = ["ppo/score", "ppo/kl", "ppo/kl_coef", "ppo/entropy", "ppo/policy_loss", "ppo/value_loss", "ppo/clipfrac",
           "ppo/approx_kl", "ppo/explained_variance", "ppo/response_length", "ppo/eos_rate", "ppo/episodes_per_s"]


def make_tokenizer(pad: str | None = "<pad>", padding_side: str = "left") -> PreTrainedTokenizerFast:
    """A word-level tokenizer: <eos> = 0, <pad> = 1, <unk> = 2, then WORDS."""
    vocab = {w: i for i, w in enumerate(["<eos>", "<pad>", "<unk>", *WORDS])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    kwargs = {"pad_token": pad} if pad else {}
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<eos>", unk_token="<unk>",
                                   padding_side=padding_side, **kwargs)


def make_policy(seed: int = 0, width: int = 32) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=len(WORDS) + 3, n_positions=32, n_embd=width, n_layer=2, n_head=2,
                        eos_token_id=0, bos_token_id=0, pad_token_id=1)
    return GPT2LMHeadModel(config).eval()


def count_great(prompts: list[str], responses: list[str]) -> torch.Tensor:
    return torch.tensor([float(r.split().count("great")) for r in responses])


def small_config(**overrides) -> PolicyConfig:
    settings = dict(batch_size=4, num_mini_batches=2, epochs=2, learning_rate=1e-3, response_length=6)
    return PolicyConfig(**{**settings, **overrides})


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models run fastest on one thread, above all on a CPU shared with other jobs."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ----- checks before starting ------------------------------------------------------------------------------------

@pytest.mark.parametrize("tokenizer, message", [
    (make_tokenizer(pad=None), "no pad token"),
    (make_tokenizer(pad="<eos>"), "pad token is its EOS"),
    (make_tokenizer(padding_side="right"), "pads on the right"),
])
def test_refuses_bad_tokenizers(tokenizer, message):
    with pytest.raises(PolicySetupError, match=message):
        PPOTrainer(small_config(), make_policy(), tokenizer, PROMPTS, count_great)


def test_refuses_fewer_prompts_than_a_batch():
    with pytest.raises(PolicySetupError, match="3 training prompts for a batch of 4"):
        PPOTrainer(small_config(), make_policy(), make_tokenizer(), PROMPTS[:3], count_great)


def test_refuses_bf16_on_a_cpu():
    with pytest.raises(PolicySetupError, match="bf16 was requested but there is no GPU"):
        PPOTrainer(small_config(bf16=True), make_policy(), make_tokenizer(), PROMPTS, count_great)


def make_reward_model(vocab_size: int = len(WORDS) + 3, num_labels: int = 1) -> GPT2ForSequenceClassification:
    torch.manual_seed(1)
    config = GPT2Config(vocab_size=vocab_size, n_positions=32, n_embd=16, n_layer=1, n_head=2, num_labels=num_labels,
                        pad_token_id=1)
    return GPT2ForSequenceClassification(config).eval()


def test_refuses_a_reward_model_with_two_labels_or_too_few_embeddings_for_its_tokenizer():
    with pytest.raises(PolicySetupError, match="num_labels=2"):
        PPOTrainer(small_config(), make_policy(), make_tokenizer(), PROMPTS, make_reward_model(num_labels=2))
    with pytest.raises(PolicySetupError, match="reward model has 10 embeddings but its tokenizer 17 tokens"):
        PPOTrainer(small_config(), make_policy(), make_tokenizer(), PROMPTS, make_reward_model(vocab_size=10))


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


def test_refuses_inconsistent_settings():
    with pytest.raises(PolicySetupError, match="must divide"):
        small_config(num_mini_batches=3).check()
    with pytest.raises(PolicySetupError, match="k1, k2, k3"):
        small_config(kl_estimator="k9").check()
    with pytest.raises(PolicySetupError, match="context of 32"):
        PPOTrainer(small_config(response_length=30), make_policy(), make_tokenizer(), PROMPTS, count_great)


# ----- rollout bookkeeping ---------------------------------------------------------------------------------------

def test_left_pad_and_cut_at_any_end_id():
    ids, mask = left_pad([[5, 6, 7], [8]], pad=1)
    assert ids.tolist() == [[5, 6, 7], [1, 1, 8]] and mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    responses = torch.tensor([[4, 0, 9, 9], [4, 5, 6, 7], [0, 3, 0, 3], [4, 3, 0, 9]])  # end ids 0 and 3
    kept, mask, ended = cut_at_end(responses, end_ids=(0, 3), pad=1)
    assert kept.tolist() == [[4, 0, 1, 1], [4, 5, 6, 7], [0, 1, 1, 1], [4, 3, 1, 1]]
    assert mask.tolist() == [[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 0, 0]]
    assert ended.tolist() == [True, False, True, True]


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


def test_ppo_trains_against_a_reward_model():
    trainer = PPOTrainer(small_config(), make_policy(), make_tokenizer(), PROMPTS, make_reward_model())
    metrics = trainer.train(1).metrics
    assert -5 < metrics["ppo/score"] < 5


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


# ----- training, store reporting, cancel, resume -----------------------------------------------------------------

class CancelAt(Reporter):
    """Requests the job's cancel once step `step` is reported (a person pressing Stop mid-run)."""

    def __init__(self, store, job_id: int, step: int):
        self.store, self.job_id, self.step = store, job_id, step

    def on_step(self, step, metrics):
        if step == self.step:
            request_cancel(self.store, self.job_id)


def register(store, trainer, round: int = 0) -> int:
    """What the job layer does with a trained policy: save it into a staging folder, then register it."""
    staged = staging_path(store)
    trainer.save_pretrained(staged)
    return register_policy(store, staged, parent_id=None, round=round, note="PPO")


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
    changed = [n for n, p in policy.named_parameters() if not torch.equal(p, before[n])]
    assert "transformer.wte.weight" in changed and len(changed) == len(before)
    assert get_job(store, job_id).phase == "ppo 1/2"


def test_cancel_stops_within_one_iteration_and_saves_the_state(store, tmp_path):
    job_id = create_job(store, "ppo", {})
    claim_job(store, job_id, pid=1)
    trainer = PPOTrainer(small_config(), make_policy(), make_tokenizer(), PROMPTS, count_great,
                         state_dir=tmp_path / "state")
    with pytest.raises(JobCancelled):
        trainer.train(10, StoreReporter(store, job_id, listener=CancelAt(store, job_id, 2)))
    assert trainer.iteration == 2
    assert max(r["step"] for r in read_metrics(store, job_id)) == 2
    state = torch.load(tmp_path / "state" / STATE_FILE, weights_only=True)
    assert state["iteration"] == 2


def test_resumed_run_equals_an_uninterrupted_one(tmp_path):
    config = small_config(target_kl=0.5, kl_horizon=100, save_every=100)
    straight = PPOTrainer(config, make_policy(), make_tokenizer(), PROMPTS, count_great)
    straight.train(3)

    first = PPOTrainer(config, make_policy(), make_tokenizer(), PROMPTS, count_great, state_dir=tmp_path)
    first.train(2)  # the state is saved at the end of a train() call
    resumed = PPOTrainer(config, make_policy(), make_tokenizer(), PROMPTS, count_great, state_dir=tmp_path)
    assert resumed.iteration == 2
    resumed.train(3)

    assert resumed.kl_controller.value == straight.kl_controller.value != config.init_kl_coef
    expected = straight.actor_critic.state_dict()
    for name, value in resumed.actor_critic.state_dict().items():
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


def test_a_resumed_run_hands_the_restored_weights_to_the_generation_backend_before_sampling(tmp_path):
    config = small_config(save_every=100)
    first = PPOTrainer(config, make_policy(), make_tokenizer(), PROMPTS, count_great, state_dir=tmp_path)
    first.train(2)
    trained = first.actor_critic.policy.lm_head.weight.detach().clone()
    policy = make_policy()
    backend = EngineStandIn(policy, make_tokenizer())
    resumed = PPOTrainer(config, policy, make_tokenizer(), PROMPTS, count_great, state_dir=tmp_path, backend=backend)
    assert len(backend.synced) == 1 and torch.equal(backend.synced[0], trained)  # synced on resume, before any rollout
    assert torch.equal(backend.engine.lm_head.weight, trained)
    resumed.train(3)
    assert len(backend.synced) == 2  # and after the one update since


def test_early_stop_when_the_policy_moves_too_far():
    trainer = PPOTrainer(small_config(max_approx_kl=0.0, epochs=4, learning_rate=1e-2), make_policy(),
                         make_tokenizer(), PROMPTS, count_great)
    steps = []
    step = trainer.optimizer.step
    trainer.optimizer.step = lambda *a, **k: (steps.append(1), step(*a, **k))[1]
    trainer.train(1)
    assert len(steps) == 1  # 4 epochs x 2 mini-batches without the bound


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
    saved = [p.name for p in [type(store.path)(policy.path)]]
    assert [p.name for p in (store.data_dir / "policies").iterdir()] == saved


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


# ----- the command line and store runs ----------------------------------------------------------------------------

def cli(*arguments: str) -> int:
    """`python app.py ARGS` in this process."""
    from app.cli import main

    return main(list(arguments))


CLI_SETTINGS = ["--batch-size", "4", "--num-mini-batches", "2", "--ppo-epochs", "1", "--response-length", "6",
                "--learning-rate", "1e-3"]


@pytest.fixture
def seeded_store(store, tmp_path):
    """A store holding the tiny policy (version 1) and the training prompts."""
    from storage.policies import add_policy
    from storage.prompts import add_prompts

    path = tmp_path / "sft"
    make_policy().save_pretrained(path)
    make_tokenizer().save_pretrained(path)
    add_policy(store, str(path))
    add_prompts(store, PROMPTS)
    return store


def test_cli_trains_and_registers_a_new_policy_version(seeded_store, capsys):
    from storage.jobs import list_jobs

    code = cli("ppo", "--db", str(seeded_store.path), "--iterations", "2", "--reward", "oracle",
               *CLI_SETTINGS)
    assert code == 0, capsys.readouterr().err
    [job] = list_jobs(seeded_store)
    assert job.status.value == "completed" and job.config["settings"]["batch_size"] == 4
    first, second = list_policies(seeded_store)
    assert (second.parent_id, second.round) == (first.id, 1)
    assert {r["step"] for r in read_metrics(seeded_store, job.id, names=["ppo/score"])} == {1, 2}
    assert not (seeded_store.data_dir / "ppo" / f"job-{job.id}").exists()  # the resumable state is dropped
    assert f"registered policy version {second.id}" in capsys.readouterr().out


def test_cli_policy_option_trains_that_version(seeded_store):
    """`--policy ID` is the version PPO starts from (its help says so): the new version's parent, not the newest."""
    arguments = ["ppo", "--db", str(seeded_store.path), "--iterations", "1", "--reward", "oracle",
                 *CLI_SETTINGS]
    assert cli(*arguments) == 0
    assert cli(*arguments, "--policy", "1") == 0
    sft, first, second = list_policies(seeded_store)
    assert (first.parent_id, second.parent_id) == (sft.id, sft.id) and (first.round, second.round) == (1, 1)


@pytest.mark.parametrize("arguments, message", [
    (["--iterations", "0"], "--iterations must be at least 1"),
    (["--reward", "rm"], "no reward model is registered"),
    (["--batch-size", "16"], "8 training prompts for a batch of 16"),
])
def test_cli_bad_input_exits_2_and_writes_nothing(seeded_store, capsys, arguments, message):
    from storage.jobs import list_jobs

    code = cli("ppo", "--db", str(seeded_store.path), "--reward", "oracle", *CLI_SETTINGS, *arguments)
    assert code == 2
    assert message in capsys.readouterr().err
    assert list_jobs(seeded_store) == [] and len(list_policies(seeded_store)) == 1


def test_cli_resumes_a_cancelled_job_to_the_end(seeded_store):
    from dataclasses import asdict

    from storage.jobs import finish_job
    from storage.types import JobStatus
    from trainers.jobs.policy_job import state_dir, train_policy
    from trainers.policy.config import PolicyRun

    run = PolicyRun(iterations=3, reward="oracle", policy_id=1, settings={"batch_size": 4, "response_length": 6})
    job_id = create_job(seeded_store, "ppo", asdict(run))
    claim_job(seeded_store, job_id, pid=1)
    with pytest.raises(JobCancelled):
        train_policy(seeded_store, run, job_id, listener=CancelAt(seeded_store, job_id, 1))
    assert torch.load(state_dir(seeded_store, job_id) / STATE_FILE, weights_only=True)["iteration"] == 1
    assert len(list_policies(seeded_store)) == 1  # nothing registered
    finish_job(seeded_store, job_id, JobStatus.CANCELLED)

    assert cli("ppo", "--db", str(seeded_store.path), "--resume", str(job_id)) == 0
    assert get_job(seeded_store, job_id).status.value == "completed"
    assert sorted(r["step"] for r in read_metrics(seeded_store, job_id, names=["ppo/kl"])) == [1, 2, 3]
    assert len(list_policies(seeded_store)) == 2


# ----- vLLM backend (GPU machines only) ---------------------------------------------------------------------------

@pytest.fixture
def policy_dir(tmp_path):
    path = tmp_path / "policy"
    make_policy(width=64).save_pretrained(path)  # heads of 32: a size every vLLM attention backend supports
    make_tokenizer().save_pretrained(path)
    return path


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="vLLM needs a CUDA GPU")
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


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="vLLM needs a CUDA GPU")
@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_ppo_with_the_vllm_backend(policy_dir, lora):
    from trainers.models.loading import load_policy, load_tokenizer

    config = small_config(generation_backend="vllm", vllm_gpu_memory_utilization=0.2, lora=lora)
    trainer = PPOTrainer(config, load_policy(policy_dir), load_tokenizer(policy_dir), PROMPTS, count_great)
    metrics = trainer.train(2).metrics
    assert 0 < metrics["ppo/response_length"] <= 6 and metrics["ppo/kl"] == metrics["ppo/kl"]


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


def test_a_second_lora_run_continues_the_adapter_with_the_sft_policy_as_reference(seeded_store):
    from trainers.jobs.policy_job import load_models, start_policy

    assert cli("ppo", "--db", str(seeded_store.path), "--iterations", "1", "--reward", "oracle",
               "--lora", "--learning-rate", "1e-2", *CLI_SETTINGS[:-2]) == 0
    trained = start_policy(seeded_store, None)
    policy, reference, _, value_head = load_models(seeded_store, trained, lora=True)
    assert reference is None and value_head is not None
    ids = torch.tensor([[3, 4, 7, 5]])
    merged = AutoModelForCausalLM.from_pretrained(trained.path)
    torch.testing.assert_close(policy(input_ids=ids).logits, merged(input_ids=ids).logits)  # the adapter goes on
    with policy.disable_adapter():  # ...and the reference is still the SFT policy
        torch.testing.assert_close(policy(input_ids=ids).logits, make_policy()(input_ids=ids).logits)


def test_the_value_head_learns_at_its_own_rate_when_given_one():
    from trainers.policy.modules import PolicyWithValueHead
    from trainers.policy.ppo import parameter_groups

    model = PolicyWithValueHead(make_policy())
    policy, head = parameter_groups(model, small_config(learning_rate=1e-5, value_lr=1e-3))
    assert head["lr"] == 1e-3 and "lr" not in policy  # the policy takes the optimiser's learning_rate
    assert {id(p) for p in head["params"]} == {id(p) for p in model.value_head.parameters()}
    assert len(policy["params"]) + len(head["params"]) == len(list(model.parameters()))
    assert parameter_groups(model, small_config(learning_rate=1e-5))[1]["lr"] == 1e-5


def test_the_ppo_commands_left_out_settings_are_the_loops_which_suit_the_demo():
    import argparse

    from trainers.entry.ppo_cli import add_arguments, run_from_args
    from trainers.loop.config import LoopConfig, policy_settings

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    loop = policy_settings(LoopConfig())
    run = run_from_args(parser.parse_args(["--reward", "oracle"]))
    for name in ("batch_size", "num_mini_batches", "epochs", "learning_rate", "init_kl_coef"):
        assert run.settings[name] == loop[name] != getattr(PolicyConfig(), name), name
    given = run_from_args(parser.parse_args(["--learning-rate", "1e-3", "--batch-size", "5"])).settings
    assert given["learning_rate"] == 1e-3 and given["batch_size"] == 5
    assert "num_mini_batches" not in given  # 2 does not divide 5: PolicyConfig's 1
    PolicyConfig(**given).check()
