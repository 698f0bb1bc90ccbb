"""Command-line options generated from the config dataclasses: help and defaults are the fields', the short names
docs/commands.md shows keep working as aliases, and each option sets the field its help describes."""

import argparse
import dataclasses
from dataclasses import dataclass, field

import pytest

from app.commands import loop_cli, ppo_cli, reward_cli
from storage import InvalidInput
from trainers.entry.options import add_options, given_options
from trainers.loop.config import LoopConfig
from trainers.policy.config import PolicyConfig, PolicyRun
from trainers.reward.config import RewardConfig
from trainers.settings import note_renamed


def parser_of(add_arguments) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser


def option_help(parser: argparse.ArgumentParser, flag: str) -> str:
    [action] = [a for a in parser._actions if flag in a.option_strings]
    return action.help


@dataclass
class Example:
    steps: int = field(default=7, metadata={"help": "How many steps."})
    rate: float | None = field(default=None, metadata={"help": "A rate."})
    fast: bool = field(default=False, metadata={"help": "Go fast."})
    mode: str = field(default="a", metadata={"help": "The mode.", "choices": ["a", "b"]})


def test_options_take_type_help_default_and_choices_from_the_fields():
    parser = argparse.ArgumentParser()
    add_options(parser, Example, aliases={"steps": ["-n"]})
    assert option_help(parser, "--steps") == "How many steps. (default: 7)"
    assert option_help(parser, "-n") == option_help(parser, "--steps")
    assert given_options(parser.parse_args([]), Example) == {}  # left out: the dataclass's defaults apply
    args = parser.parse_args(["-n", "3", "--rate", "0.5", "--fast", "--mode", "b"])
    assert Example(**given_options(args, Example)) == Example(steps=3, rate=0.5, fast=True, mode="b")
    assert given_options(parser.parse_args(["--no-fast"]), Example) == {"fast": False}
    with pytest.raises(SystemExit):
        parser.parse_args(["--mode", "c"])


def test_a_field_the_command_line_cannot_set_must_be_skipped():
    with pytest.raises(TypeError, match="settings"):
        add_options(argparse.ArgumentParser(), PolicyRun)
    add_options(argparse.ArgumentParser(), PolicyRun, skip=("settings",))


@pytest.mark.parametrize("add_arguments, config, skipped", [
    (reward_cli.add_arguments, RewardConfig, set(reward_cli.SKIPPED)),  # the versions: --policy vK, --norm-policy vK
    (ppo_cli.add_arguments, PolicyConfig, set()),
    (ppo_cli.add_arguments, PolicyRun, set(ppo_cli.RUN_SKIPPED)),
    (loop_cli.add_arguments, LoopConfig, set()),
])
def test_every_setting_is_an_option_documented_by_its_field(add_arguments, config, skipped):
    parser = parser_of(add_arguments)
    settings = config.settings_fields() if config is LoopConfig else dataclasses.fields(config)  # LoopConfig's flat
    for f in settings:
        if f.name not in skipped:
            assert option_help(parser, "--" + f.name.replace("_", "-")).startswith(f.metadata["help"]), f.name


def test_train_reward_keeps_the_documented_option_names():
    args = parser_of(reward_cli.add_arguments).parse_args(
        ["--lr", "1e-5", "--epochs", "1", "--batch-size", "8", "--ensemble", "3", "--margin", "0.5",
         "--label-noise", "0.1", "--seed", "4", "--val-fraction", "0.25", "--drop-both-bad"])
    config = reward_cli.config_from_args(args)
    assert (config.learning_rate, config.epochs, config.batch_size, config.ensemble, config.margin) == \
        (1e-5, 1.0, 8, 3, 0.5)
    assert (config.label_noise, config.seed, config.val_fraction) == (0.1, 4, 0.25)
    assert config.both_bad_as_tie is False
    assert reward_cli.config_from_args(parser_of(reward_cli.add_arguments).parse_args([])) == RewardConfig()


def test_train_reward_policy_is_the_version_the_model_starts_from():
    """`--policy vK` says "the version the model starts from": it names the start, not the version that normalises
    rewards (`--norm-policy vK`); the old flags, which took ids, name the same."""
    parser = parser_of(reward_cli.add_arguments)
    args = parser.parse_args(["--policy", "v2", "--norm-policy", "v3"])
    assert (args.init_policy_id_version, args.policy_id_version) == ("v2", "v3")
    assert reward_cli.config_from_args(args) == RewardConfig()  # named versions are read against the store
    old = parser.parse_args(["--init-policy-id", "2", "--policy-id", "3"])
    assert (old.init_policy_id_version, old.policy_id_version) == ("2", "3")
    assert "starts from" in option_help(parser, "--policy") and "vK" in option_help(parser, "--policy")
    assert "normalise" in option_help(parser, "--norm-policy")


def test_ppo_policy_is_the_version_to_train_and_settings_go_to_the_ppo_config():
    parser = parser_of(ppo_cli.add_arguments)
    args = parser.parse_args(["--policy", "v3", "--iterations", "5", "--batch-size", "4", "--lora", "--reward",
                              "oracle"])
    run = ppo_cli.run_from_args(args)
    given = {"batch_size": 4, "lora": True}
    settings = {**ppo_cli.command_defaults(given), **given}
    assert run == PolicyRun(iterations=5, reward="oracle", settings=settings) and args.policy_id_version == "v3"
    assert "to train" in option_help(parser, "--policy") and "vK" in option_help(parser, "--policy")
    assert ppo_cli.run_from_args(parser.parse_args([])) == PolicyRun(settings=ppo_cli.command_defaults({}))
    arguments = ["--algorithm", "grpo", "--group-size", "8", "--loss-norm", "token"]
    grpo = ppo_cli.run_from_args(parser.parse_args(arguments))
    given = {"algorithm": "grpo", "group_size": 8, "loss_norm": "token"}
    assert grpo.settings == {**ppo_cli.command_defaults(given), **given}


def test_loop_options_then_json_on_top():
    parser = parser_of(loop_cli.add_arguments)
    assert loop_cli.config_from_args(parser.parse_args([])) == LoopConfig()
    args = parser.parse_args(["--rounds", "2", "--labels-per-round", "40", "--annotator", "human", "--ppo-iterations",
                              "3", "--seed", "5", "--config", '{"kl_coef": 0.2, "rounds": 4}'])
    config = loop_cli.config_from_args(args)
    assert (config.rounds, config.labels_per_round, config.annotator, config.policy.iterations, config.seed,
            config.policy.init_kl_coef) == (4, 40, "human", 3, 5, 0.2)
    grpo = loop_cli.config_from_args(parser.parse_args(["--config", '{"algorithm": "grpo", "group_size": 8}']))
    assert (grpo.algorithm, grpo.policy.group_size) == ("grpo", 8)
    grpo = loop_cli.config_from_args(parser.parse_args(["--algorithm", "grpo", "--group-size", "3"]))
    assert grpo.policy.group_size == 3
    assert loop_cli.config_from_args(parser.parse_args(["--selector", "disagreement"])).reward_model.ensemble == 3
    two = loop_cli.config_from_args(parser.parse_args(["--selector", "disagreement", "--ensemble", "2"]))
    assert two.reward_model.ensemble == 2
    assert parser.parse_args(["--resume", "7"]).resume == 7
    with pytest.raises(SystemExit):
        parser.parse_args(["--selector", "best"])
    with pytest.raises(InvalidInput, match="needs an ensemble of 2"):
        loop_cli.config_from_args(parser.parse_args(["--selector", "disagreement", "--ensemble", "1"]))


def test_a_label_budget_sets_the_first_rounds_labels_and_refuses_labels_per_round_beside_it():
    parser = parser_of(loop_cli.add_arguments)
    config = loop_cli.config_from_args(parser.parse_args(["--label-budget", "150"]))
    assert (config.label_budget, config.labels_per_round) == (150, 108)  # 108 + 32 + 10 at label_decay 0.3
    assert config.schedule == "108 + 32 + 10 = 150 labels over 3 rounds"
    flat = loop_cli.config_from_args(parser.parse_args(["--label-budget", "150", "--label-decay", "1"]))
    assert flat.labels_per_round == 50 and flat.schedule == "50 + 50 + 50 = 150 labels over 3 rounds"
    preset = LoopConfig(label_budget=300)  # a budget beneath is replaced by the N given, and the other way round
    assert loop_cli.config_from_args(parser.parse_args(["--labels-per-round", "20"]), preset).label_budget is None
    assert loop_cli.config_from_args(parser.parse_args(["--label-budget", "60"]), LoopConfig(labels_per_round=5)
                                     ).labels_per_round == 43
    assert "100 + 30 + 9 = 139 labels over 3 rounds" in option_help(parser, "--labels-per-round")
    assert "check pairs included" in option_help(parser, "--label-budget")
    with pytest.raises(InvalidInput, match="^give label_budget .* or labels_per_round .*, not both$"):
        loop_cli.config_from_args(parser.parse_args(["--label-budget", "150", "--labels-per-round", "50"]))
    assert LoopConfig.from_dict(config.to_dict()) == config  # a stored job reads back the same


def test_the_old_policy_setting_names_still_work_on_the_command_line():
    loop = parser_of(loop_cli.add_arguments).parse_args(["--ppo-iterations", "7", "--ppo-lr", "3e-4"])
    assert given_options(loop, LoopConfig) == {"policy_iterations": 7, "policy_lr": 3e-4}
    ppo = parser_of(ppo_cli.add_arguments).parse_args(["--ppo-epochs", "3"])
    assert ppo_cli.run_from_args(ppo).settings["epochs"] == 3


def test_the_old_check_pair_flags_still_work_with_a_note_naming_the_new_ones(capsys):
    note_renamed.cache_clear()  # the note is once per process: start this test's process afresh
    parser = parser_of(loop_cli.add_arguments)
    args = parser.parse_args(["--audit-share", "0.2", "--audit-min-agreement", "0.7", "--audit-share", "0.3"])
    assert given_options(args, LoopConfig) == {"check_share": 0.3, "check_min_agreement": 0.7}
    assert capsys.readouterr().err.splitlines() == [
        "note: --audit-share is now called --check-share; the old name still works",
        "note: --audit-min-agreement is now called --check-min-agreement; the old name still works"]
    assert given_options(parser.parse_args(["--check-share", "0"]), LoopConfig) == {"check_share": 0.0}
    assert capsys.readouterr().err == ""  # the new flag: no note
