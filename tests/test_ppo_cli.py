"""`python app.py ppo` (app/commands/ppo_cli.py): a bad input exits 2 with one line and writes nothing, PPO or
GRPO; the algorithms and loss norms are offered by name; the settings left out are the loop's. The runs it starts are
tested in test_policy_job.py."""

import pytest

from storage.policies import list_policies
from tests.policy_helpers import ALGORITHMS, CLI_SETTINGS, GRPO_CLI, ppo_command
from trainers.policy.config import PolicyConfig

pytestmark = pytest.mark.usefixtures("one_thread")

BAD_EITHER = [  # refused under both algorithms
    (["--iterations", "0"], "--iterations must be at least 1"),
    (["--reward", "rm"], "no reward model is registered"),
    (["--batch-size", "16"], "8 training prompts can be used, fewer than a batch of 16"),
    (["--init-kl-coef", "-1"], "init_kl_coef) must be 0 or more"),
]
BAD_GRPO = [
    (["--group-size", "1"], "group_size must be at least 2"),
    (["--num-mini-batches", "3"], "so that no mini-batch splits a group of 3"),
]


@pytest.mark.parametrize("algorithm, arguments, message",
                         [(algorithm, *case) for algorithm in ALGORITHMS for case in BAD_EITHER]
                         + [("grpo", *case) for case in BAD_GRPO])
def test_cli_bad_input_exits_2_and_writes_nothing(seeded_store, capsys, algorithm, arguments, message):
    from storage.jobs import list_jobs

    chosen = GRPO_CLI if algorithm == "grpo" else []
    code = ppo_command(seeded_store, "--reward", "oracle", *CLI_SETTINGS, *chosen, *arguments)
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert list_jobs(seeded_store) == [] and len(list_policies(seeded_store)) == 1


def test_cli_offers_the_algorithms_and_loss_norms_by_name(seeded_store, capsys):
    with pytest.raises(SystemExit) as exited:
        ppo_command(seeded_store, "--loss-norm", "mean")
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "invalid choice: 'mean' (choose from 'sequence', 'token')" in err
    assert ppo_command(seeded_store, "--algorithm", "kto") == 2  # dpo is named: its own command (tests/test_dpo.py)
    err = capsys.readouterr().err
    assert "unknown algorithm 'kto'; use ppo or grpo" in err and len(err.strip().splitlines()) == 1


def test_the_ppo_commands_left_out_settings_are_the_loops_which_suit_the_demo():
    import argparse

    from app.commands.ppo_cli import add_arguments, run_from_args
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
