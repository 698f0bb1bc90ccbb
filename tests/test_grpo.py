"""GRPO trainer: its settings checks, whole groups in consecutive rows and mini-batches, no critic anywhere, its
metrics, cancel, resume, LoRA, the command line; the tiny models and helpers are test_ppo's."""

import pytest
import torch
from transformers import AutoModelForCausalLM

from storage.jobs import claim_job, create_job, get_job
from storage.metrics import read_metrics
from storage.policies import list_policies
from tests.test_ppo import (
    CLI_SETTINGS,
    PROMPTS,
    CancelAt,
    cli,
    count_great,
    make_policy,
    make_reward_model,
    make_tokenizer,
    one_thread,
    register,
    seeded_store,
    small_config,
)
from trainers.jobs.layer import StoreReporter
from trainers.policy.checkpoint import STATE_FILE, VALUE_HEAD_FILE, load_value_head
from trainers.policy.config import PolicySetupError
from trainers.policy.grpo import GRPOTrainer
from trainers.reporting import JobCancelled

assert one_thread and seeded_store  # fixtures shared with test_ppo (pytest finds them by name in this module)

GRPO_METRICS = ["grpo/score", "grpo/kl", "grpo/kl_token", "grpo/kl_coef", "grpo/entropy", "grpo/loss",
                "grpo/clipfrac", "grpo/approx_kl", "grpo/zero_variance_groups", "grpo/response_length",
                "grpo/eos_rate", "grpo/episodes_per_s"]


def grpo_config(**overrides):
    return small_config(**{"algorithm": "grpo", "group_size": 3, **overrides})


def grpo_trainer(config=None, reward=count_great, **kwargs) -> GRPOTrainer:
    return GRPOTrainer(config or grpo_config(), make_policy(), make_tokenizer(), PROMPTS, reward, **kwargs)


# ----- settings -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("overrides, message", [
    ({"group_size": 1}, "group_size must be at least 2"),
    ({"num_mini_batches": 3}, "must divide the batch size (4 prompts), so that no mini-batch splits a group of 3"),
    ({"init_kl_coef": -0.1}, "the KL coefficient β (init_kl_coef) must be 0 or more"),
    ({"loss_norm": "mean"}, "unknown loss_norm 'mean'; use sequence or token"),
    ({"algorithm": "dpo"}, "unknown algorithm 'dpo'; use ppo or grpo"),
])
def test_bad_settings_are_one_line_errors_naming_the_setting(overrides, message):
    with pytest.raises(PolicySetupError) as error:
        grpo_config(**overrides).check()
    assert message in str(error.value) and "\n" not in str(error.value)


def test_the_trainer_runs_the_algorithm_its_settings_name():
    with pytest.raises(PolicySetupError, match="GRPOTrainer runs algorithm 'grpo' but the settings say 'ppo'"):
        GRPOTrainer(small_config(), make_policy(), make_tokenizer(), PROMPTS, count_great)


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


# ----- training, store reporting, cancel, resume --------------------------------------------------------------

def test_train_reports_the_grpo_metrics_each_iteration_and_changes_the_weights(store):
    policy = make_policy()
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    job_id = create_job(store, "ppo", {})
    claim_job(store, job_id, pid=1)
    trainer = GRPOTrainer(grpo_config(), policy, make_tokenizer(), PROMPTS, count_great)
    trainer.train(2, StoreReporter(store, job_id, phase="grpo"))
    rows = read_metrics(store, job_id)
    assert {r["name"] for r in rows} == set(GRPO_METRICS)
    assert {(r["name"], r["step"]) for r in rows} == {(name, step) for name in GRPO_METRICS for step in (1, 2)}
    changed = [n for n, p in policy.named_parameters() if not torch.equal(p, before[n])]
    assert "transformer.wte.weight" in changed and len(changed) == len(before)
    assert get_job(store, job_id).phase == "grpo 1/2"
    shares = [r["value"] for r in rows if r["name"] == "grpo/zero_variance_groups"]
    assert all(0.0 <= share <= 1.0 for share in shares)


def test_grpo_trains_against_a_reward_model():
    metrics = grpo_trainer(reward=make_reward_model()).train(1).metrics
    assert -5 < metrics["grpo/score"] < 5 and metrics["grpo/kl_token"] >= 0


def test_cancel_stops_within_one_iteration_and_saves_the_state(store, tmp_path):
    job_id = create_job(store, "ppo", {})
    claim_job(store, job_id, pid=1)
    trainer = grpo_trainer(state_dir=tmp_path / "state")
    with pytest.raises(JobCancelled, match="GRPO was stopped after 2 of 10 iterations"):
        trainer.train(10, StoreReporter(store, job_id, listener=CancelAt(store, job_id, 2)))
    assert trainer.iteration == 2 and max(r["step"] for r in read_metrics(store, job_id)) == 2
    state = torch.load(tmp_path / "state" / STATE_FILE, weights_only=True)
    assert state["iteration"] == 2 and state["config"]["algorithm"] == "grpo"
    assert not any("value_head" in name for name in state["model"])


def test_resumed_run_equals_an_uninterrupted_one(tmp_path):
    config = grpo_config(target_kl=0.01, kl_horizon=100, save_every=100)
    straight = grpo_trainer(config)
    straight.train(3)
    grpo_trainer(config, state_dir=tmp_path).train(2)
    resumed = grpo_trainer(config, state_dir=tmp_path)
    assert resumed.iteration == 2
    resumed.train(3)
    assert resumed.kl_controller.value == straight.kl_controller.value != config.init_kl_coef
    expected = straight.policy_model.state_dict()
    for name, value in resumed.policy_model.state_dict().items():
        assert torch.equal(value, expected[name]), name


def test_a_ppo_state_does_not_resume_as_grpo(tmp_path):
    from trainers.policy.ppo import PPOTrainer

    PPOTrainer(small_config(), make_policy(), make_tokenizer(), PROMPTS, count_great, state_dir=tmp_path).train(1)
    with pytest.raises(PolicySetupError, match="made with other settings \\(algorithm, LoRA or model\\)"):
        grpo_trainer(state_dir=tmp_path)


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


# ----- the command line and store runs ----------------------------------------------------------------------------

GRPO_CLI = ["--algorithm", "grpo", "--group-size", "3"]


def ppo_command(store, *arguments: str) -> int:
    """`python app.py ppo --db STORE ARGUMENTS` in this process, on a store the test seeded itself."""
    return cli("ppo", "--db", str(store.path), *arguments)


def test_cli_trains_grpo_and_a_later_ppo_run_starts_a_fresh_value_head(seeded_store, capsys):
    from storage.jobs import list_jobs
    from trainers.jobs.policy_job import load_models, start_policy

    arguments = ["--iterations", "2", "--reward", "oracle", *CLI_SETTINGS]
    assert ppo_command(seeded_store, *arguments, *GRPO_CLI) == 0, capsys.readouterr().err
    [job] = list_jobs(seeded_store)
    assert job.status.value == "completed" and job.config["settings"]["algorithm"] == "grpo"
    assert {r["step"] for r in read_metrics(seeded_store, job.id, names=["grpo/score"])} == {1, 2}
    assert read_metrics(seeded_store, job.id, prefix="ppo/") == []
    grpo_policy = start_policy(seeded_store, None)
    assert grpo_policy.note == "GRPO, 2 iterations" and load_value_head(grpo_policy.path) is None
    assert "grpo job" in capsys.readouterr().out

    assert load_models(seeded_store, grpo_policy, lora=False)[3] is None  # PPO from it: no head to warm
    assert ppo_command(seeded_store, *arguments) == 0
    ppo_policy = start_policy(seeded_store, None)
    assert ppo_policy.parent_id == grpo_policy.id and load_value_head(ppo_policy.path)["weight"].shape == (1, 32)


@pytest.mark.parametrize("arguments, message", [
    (["--group-size", "1"], "group_size must be at least 2"),
    (["--num-mini-batches", "3"], "so that no mini-batch splits a group of 3"),
    (["--init-kl-coef", "-1"], "init_kl_coef) must be 0 or more"),
])
def test_cli_bad_grpo_settings_exit_2_and_write_nothing(seeded_store, capsys, arguments, message):
    from storage.jobs import list_jobs

    code = ppo_command(seeded_store, "--reward", "oracle", *CLI_SETTINGS, *GRPO_CLI, *arguments)
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert list_jobs(seeded_store) == [] and len(list_policies(seeded_store)) == 1


def test_cli_offers_the_algorithms_and_loss_norms_by_name(seeded_store, capsys):
    with pytest.raises(SystemExit) as exited:
        ppo_command(seeded_store, "--loss-norm", "mean")
    assert exited.value.code == 2 and "invalid choice: 'mean' (choose from 'sequence', 'token')" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        ppo_command(seeded_store, "--algorithm", "dpo")
    assert "invalid choice: 'dpo' (choose from 'ppo', 'grpo')" in capsys.readouterr().err
