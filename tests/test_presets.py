"""The settings a loop starts from are chosen from the project's model: the demo (and tiny test models) keep the
demo's tuned settings, a real model gets LoRA, small learning rates and long responses, wherever a loop starts."""

import json
import struct
from pathlib import Path

import pytest

from app.commands import loop_cli, ppo_cli
from storage.policies import add_policy
from trainers.loop.config import LoopConfig
from trainers.loop.presets import DEMO, REAL, TINY_PARAMETERS, model_preset, project_preset, real_model_config
from trainers.models.sizes import model_parameters


def fake_model_folder(folder: Path, shapes: dict[str, list[int]], context: int = 8192) -> Path:
    """A folder whose config and safetensors header describe a model of `shapes` (no weights written: the size is
    read from the header alone)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "max_position_embeddings": context}))
    header = json.dumps({name: {"dtype": "F32", "shape": shape, "data_offsets": [0, 0]}
                         for name, shape in shapes.items()}).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    return folder


def test_the_size_is_read_from_the_safetensors_headers(tmp_path):
    folder = fake_model_folder(tmp_path / "m", {"embed": [49152, 576], "layer": [576, 576], "__metadata__": []})
    assert model_parameters(folder) == 49152 * 576 + 576 * 576
    shard = fake_model_folder(tmp_path / "sharded", {"a": [10, 10]})
    (shard / "model.safetensors").rename(shard / "model-1.safetensors")
    fake_model_folder(tmp_path / "other", {"b": [3, 7]})
    (tmp_path / "other" / "model.safetensors").rename(shard / "model-2.safetensors")
    (shard / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"a": "model-1.safetensors", "b": "model-2.safetensors"}}))
    assert model_parameters(shard) == 100 + 21
    (tmp_path / "empty").mkdir()
    assert model_parameters(tmp_path / "empty") is None
    (tmp_path / "empty" / "model.safetensors").write_bytes(b"\xff" * 16)  # no header: unknown, never an error
    assert model_parameters(tmp_path / "empty") is None


def test_the_demo_and_tiny_models_keep_the_demo_settings(demo_store, tiny_llama_dir):
    from app.context import Studio
    from app.train import train_form

    assert project_preset(demo_store).name == DEMO and project_preset(demo_store).config == LoopConfig()
    assert train_form.project_form(Studio(demo_store))[0] == DEMO
    assert model_parameters(tiny_llama_dir) < TINY_PARAMETERS
    assert model_preset(str(tiny_llama_dir)).name == DEMO and model_preset(None).config == LoopConfig()


def test_a_real_model_gets_lora_small_rates_and_long_responses(store, tmp_path):
    folder = fake_model_folder(tmp_path / "chat", {"embed": [49152, 576], "layers": [30, 576, 6000]})
    add_policy(store, str(folder), round=0, note="SFT")
    preset = project_preset(store)
    assert preset.name == REAL and "132M parameters, context 8192" in preset.line
    config = preset.config
    assert config.lora and config.policy.learning_rate == 1e-4 and config.reward_model.epochs == 1
    # an adapter and a score head, at an adapter's rate
    assert config.reward_model.lora and config.reward_model.learning_rate == 1e-3
    assert "reward model LoRA at LR 0.001" in preset.line
    assert config.response_length == 256 and config.temperature == 0.7
    assert (config.top_p, config.top_k) == (1.0, 0)  # the distribution the model was tuned to, untruncated
    short = model_preset(str(fake_model_folder(tmp_path / "short", {"e": [50000, 600]}, context=512)))
    assert short.config.response_length == 128  # a quarter of the context, so prompts keep room
    assert real_model_config(7_000_000_000, 4096).policy.learning_rate == 5e-5  # a bigger model, a gentler rate


@pytest.fixture()
def real_store(store, tmp_path):
    add_policy(store, str(fake_model_folder(tmp_path / "chat", {"embed": [49152, 576], "more": [500, 50000]})),
               round=0, note="SFT")
    return store


def test_loop_and_ppo_commands_start_from_the_projects_preset_and_say_so(real_store, capsys, monkeypatch):
    from trainers.loop import prompt_use

    monkeypatch.setattr(prompt_use, "check_against_store", lambda config, store: None)  # a folder of headers only
    parser = loop_cli.argparse.ArgumentParser()
    loop_cli.add_arguments(parser)
    config = loop_cli.project_config(parser.parse_args(["--rounds", "2", "--config", '{"ppo_lr": 3e-5}']), real_store)
    assert config.lora and config.response_length == 256 and config.rounds == 2 and config.policy.learning_rate == 3e-5
    assert "real model (LoRA)" in capsys.readouterr().out
    full = loop_cli.project_config(parser.parse_args(["--config", '{"reward_lora": false}']), real_store)
    # a full fine-tune at its own rate, not an adapter's
    assert (full.reward_model.lora, full.reward_model.learning_rate) == (False, 1e-5)
    given = loop_cli.project_config(parser.parse_args(["--no-reward-lora", "--reward-lr", "2e-5"]), real_store)
    assert (given.reward_model.lora, given.reward_model.learning_rate) == (False, 2e-5)
    demo = LoopConfig()
    assert demo.updated({"reward_lora": True}).reward_model.learning_rate == 1e-3
    assert demo.updated({"reward_lora": False}) == demo
    kept = LoopConfig(reward_lr=3e-4).updated({"reward_lora": False})
    assert kept.reward_model.learning_rate == 3e-4  # no switch: the rate kept
    ppo_parser = ppo_cli.argparse.ArgumentParser()
    ppo_cli.add_arguments(ppo_parser)
    preset = project_preset(real_store).config
    settings = ppo_cli.run_from_args(ppo_parser.parse_args(["--epochs", "1"]), preset).settings
    assert settings["lora"] and settings["response_length"] == 256 and settings["temperature"] == 0.7
    assert settings["epochs"] == 1
    assert settings["learning_rate"] == project_preset(real_store).config.policy.learning_rate


def test_the_train_tab_opens_on_the_projects_preset_and_says_why(real_store):
    from app.context import Studio
    from app.train import train_checks, train_form

    name, *values, chosen = train_form.project_form(Studio(real_store))
    assert name == REAL and "**real model (LoRA)**" in chosen and "LoRA" in chosen
    assert values == train_form.fill_preset(REAL, {REAL: project_preset(real_store).config})
    config = train_checks.config_from_form({REAL: project_preset(real_store).config}, REAL, '{"seed": 3}', *values)
    assert config.lora and config.response_length == 256 and config.seed == 3  # fields off the form come too
    switched = train_checks.config_from_form({REAL: project_preset(real_store).config}, REAL, '{"reward_lora": false}',
                                          *values)
    # the preset's rate left: the kind's own
    assert (switched.reward_model.lora, switched.reward_model.learning_rate) == (False, 1e-5)
    typed = dict(zip(train_form.FORM, values, strict=True)) | {"reward_lr": 5e-5}
    config = train_checks.config_from_form({REAL: project_preset(real_store).config}, REAL, '{"reward_lora": false}',
                                        *typed.values())
    # a rate typed in the form is a rate given
    assert (config.reward_model.lora, config.reward_model.learning_rate) == (False, 5e-5)


def test_the_train_reward_command_takes_the_projects_preset_where_options_are_left_out(real_store):
    from app.commands import reward_cli
    from trainers.reward.config import RewardConfig

    parser = reward_cli.argparse.ArgumentParser()
    reward_cli.add_arguments(parser)
    preset = project_preset(real_store).config
    config = reward_cli.config_from_args(parser.parse_args([]), preset)
    assert (config.epochs, config.learning_rate, config.batch_size, config.lora) == (1.0, 1e-3, 8, True)  # the preset's
    given = reward_cli.config_from_args(parser.parse_args(["--lr", "3e-5", "--epochs", "2"]), preset)
    assert (given.epochs, given.learning_rate, given.batch_size, given.lora) == (2.0, 3e-5, 8, True)  # given wins
    full = reward_cli.config_from_args(parser.parse_args(["--no-lora"]), preset)
    assert (full.lora, full.learning_rate) == (False, 1e-5)  # a full fine-tune at its own rate, not an adapter's
    assert reward_cli.config_from_args(parser.parse_args(["--no-lora", "--lr", "2e-5"]), preset).learning_rate == 2e-5
    assert reward_cli.config_from_args(parser.parse_args([]), LoopConfig()) == RewardConfig()  # the demo's
    demo_lora = reward_cli.config_from_args(parser.parse_args(["--lora"]), LoopConfig())
    assert (demo_lora.lora, demo_lora.learning_rate) == (True, 1e-3)
