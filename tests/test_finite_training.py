"""No broken version is registered: a reward function whose values leave float32's range (1e308, 1e39) fails the job in
one line naming it and the iteration, a non-finite loss stops training, and a policy folder with a NaN weight is
refused at registration, whichever job wrote it."""

import math

import pytest
import torch

from storage.jobs import list_jobs
from storage.policies import list_policies
from tests.policy_helpers import CLI_SETTINGS, GRPO_CLI, cli, make_policy, make_tokenizer
from trainers.jobs.layer import register_policy, staging_path
from trainers.models.finite import NonFiniteTraining, NonFiniteWeights, check_finite_step, fits_float32

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("function,algorithm,value", [("huge", "grpo", "1e+308"), ("beyond_float32", "ppo", "1e+39")])
def test_a_reward_outside_float32_fails_the_job_naming_the_function_and_iteration(seeded_store, capsys, function,
                                                                                   algorithm, value):
    code = cli("ppo", "--db", str(seeded_store.path), "--iterations", "2", "--reward", "functions",
               "--reward-functions", f'[{{"name": "tests.custom_rewards:{function}"}}]', *CLI_SETTINGS,
               *(GRPO_CLI if algorithm == "grpo" else []))
    err = capsys.readouterr().err
    assert code == 1
    assert (f"{algorithm.upper()} iteration 1: reward function {function} returned {value}, outside float32's range"
            in err)
    [job] = list_jobs(seeded_store)
    assert job.status.value == "failed" and len(list_policies(seeded_store)) == 1
    assert not list(seeded_store.data_dir.glob("policies/*"))


def test_a_weight_that_overflows_float32_is_refused_too(seeded_store, capsys):
    functions = '[{"name": "tests.custom_rewards:opinionated", "weight": 3e38}]'  # 2.0 × 3e38: inf in float32
    code = cli("ppo", "--db", str(seeded_store.path), "--iterations", "1", "--reward", "functions",
               "--reward-functions", functions, *CLI_SETTINGS)
    assert code == 1 and "reward function opinionated's values times its weight 3e+38" in capsys.readouterr().err
    assert len(list_policies(seeded_store)) == 1


def test_rewards_within_float32_whose_loss_overflows_stop_at_the_first_non_finite_loss(seeded_store, capsys):
    functions = '[{"name": "tests.custom_rewards:opinionated", "weight": 1e38}]'  # 2e38 fits; its square does not
    code = cli("ppo", "--db", str(seeded_store.path), "--iterations", "2", "--reward", "functions",
               "--reward-functions", functions, *CLI_SETTINGS)
    assert code == 1 and "NonFiniteTraining: PPO iteration 1: the loss is nan" in capsys.readouterr().err
    assert len(list_policies(seeded_store)) == 1


def test_float32_range():
    assert fits_float32(3.0e38) and not fits_float32(1e39) and not fits_float32(1e308)
    assert not fits_float32(math.nan) and not fits_float32(-math.inf)


def test_a_non_finite_loss_or_gradient_stops_the_step():
    check_finite_step(torch.tensor(1.5), torch.tensor(2.0), "GRPO iteration 1")
    with pytest.raises(NonFiniteTraining, match="GRPO iteration 3: the loss is nan"):
        check_finite_step(torch.tensor(math.nan), torch.tensor(2.0), "GRPO iteration 3")
    with pytest.raises(NonFiniteTraining, match="SFT step 2: the gradient norm is inf"):
        check_finite_step(torch.tensor(1.0), torch.tensor(math.inf), "SFT step 2")


def test_registering_refuses_a_policy_with_a_nan_weight(seeded_store):
    staged = staging_path(seeded_store)
    policy = make_policy()
    with torch.no_grad():
        policy.transformer.h[0].mlp.c_fc.weight[0, 0] = math.nan
    policy.save_pretrained(staged)
    make_tokenizer().save_pretrained(staged)
    with pytest.raises(NonFiniteWeights, match="holds 1 non-finite weights .*transformer.h.0.mlp.c_fc.weight"):
        register_policy(seeded_store, staged, parent_id=1, round=1, note="PPO, 1 iterations", made_by="ppo")
    assert len(list_policies(seeded_store)) == 1 and not staged.exists()


def test_registering_accepts_finite_weights(seeded_store):
    staged = staging_path(seeded_store)
    make_policy().save_pretrained(staged)
    assert register_policy(seeded_store, staged, parent_id=1, round=1, note="PPO, 1 iterations", made_by="ppo") == 2


def test_sft_stops_at_the_first_non_finite_loss():
    from trainers.models.chat_format import ChatFormat
    from trainers.policy.sft import train_sft
    from trainers.policy.sft_config import SFTConfig, SFTExample

    tokenizer, policy = make_tokenizer(), make_policy()
    with torch.no_grad():
        policy.transformer.ln_f.weight[0] = math.nan
    examples = [SFTExample(i, prompt, " great .") for i, prompt in enumerate(["the movie was", "the plot was"], 1)]
    with pytest.raises(NonFiniteTraining, match="SFT step 1: the loss is nan"):
        train_sft(SFTConfig(epochs=1, batch_size=2, heldout_share=0.0), policy, tokenizer,
                  ChatFormat.from_tokenizer(tokenizer, [tokenizer.eos_token_id]), examples)


def test_dpo_and_sft_stop_at_the_first_non_finite_gradient_before_the_optimizer_steps():
    from types import SimpleNamespace

    from trainers.policy.dpo import StepReporterCallback
    from trainers.policy.sft import SFTReporterCallback
    from trainers.reporting import Reporter

    policy = make_policy()
    for parameter in policy.parameters():
        parameter.grad = torch.zeros_like(parameter)
    StepReporterCallback(Reporter(), {}).on_pre_optimizer_step(None, SimpleNamespace(global_step=0), None, model=policy)
    policy.transformer.wpe.weight.grad[0, 0] = math.inf
    with pytest.raises(NonFiniteTraining, match="DPO step 3: the gradient of transformer.wpe.weight is not finite"):
        StepReporterCallback(Reporter(), {}).on_pre_optimizer_step(None, SimpleNamespace(global_step=2), None,
                                                                   model=policy)
    with pytest.raises(NonFiniteTraining, match="SFT step 1: the gradient"):
        SFTReporterCallback(Reporter(), False).on_pre_optimizer_step(None, SimpleNamespace(global_step=0), None,
                                                                     model=policy)
