"""The settings PPO/GRPO, DPO and SFT share are one dataclass (`trainers.settings`), checked one way: `check_settings`
(one line naming the setting, no torch) and `check` (this machine too)."""

import dataclasses

import pytest

from storage import InvalidInput
from trainers.policy.config import PolicyConfig, PolicySetupError
from trainers.policy.dpo_config import DPOConfig, DPOSetupError
from trainers.policy.sft_config import SFTConfig, SFTSetupError
from trainers.settings import ScheduledSettings, TrainerSettings

SHARED = ("max_grad_norm", "lora", "lora_r", "lora_alpha", "lora_dropout", "lora_target_modules", "bf16",
          "gradient_checkpointing")


def test_the_shared_settings_are_defined_once():
    assert issubclass(PolicyConfig, TrainerSettings)
    assert issubclass(DPOConfig, ScheduledSettings) and issubclass(SFTConfig, ScheduledSettings)
    shared = {f.name: f for f in dataclasses.fields(TrainerSettings)}
    assert tuple(shared) == SHARED
    for config in (PolicyConfig, DPOConfig, SFTConfig):
        fields = {f.name: f for f in dataclasses.fields(config)}
        for name in SHARED if config is not SFTConfig else set(SHARED) - {"lora"}:  # SFT says the adapter is merged
            assert fields[name] is shared[name], (config.__name__, name)
    assert {f.name for f in dataclasses.fields(ScheduledSettings)} - set(SHARED) == {"warmup_ratio", "weight_decay",
                                                                                     "logging_steps"}


@pytest.mark.parametrize("config, error", [(PolicyConfig, PolicySetupError), (DPOConfig, DPOSetupError),
                                           (SFTConfig, SFTSetupError)])
@pytest.mark.parametrize("overrides, message", [
    ({"lora_r": 0}, "lora_r must be at least 1, got 0"),
    ({"lora_dropout": 1.0}, "lora_dropout must be in [0, 1), got 1.0"),
    ({"max_grad_norm": 0.0}, "max_grad_norm must be a positive number, got 0.0"),
    ({"max_grad_norm": float("nan")}, "max_grad_norm must be a positive number, got nan"),
])
def test_every_trainer_refuses_a_bad_shared_setting_in_one_line(config, error, overrides, message):
    with pytest.raises(error) as raised:
        config(**overrides).check_settings()
    assert str(raised.value) == message
    with pytest.raises(error, match="must be"):
        config(**overrides).check()  # check runs check_settings before looking at the machine


@pytest.mark.parametrize("config, error", [(DPOConfig, DPOSetupError), (SFTConfig, SFTSetupError)])
def test_the_trainers_on_trls_trainer_check_their_schedule_alike(config, error):
    with pytest.raises(error, match=r"warmup_ratio must be in \[0, 1\), got 1.0"):
        config(warmup_ratio=1.0).check_settings()
    with pytest.raises(error, match="logging_steps must be at least 1, got 0"):
        config(logging_steps=0).check_settings()
    with pytest.raises(error, match="weight_decay must be 0 or a positive number, got -0.1"):
        config(weight_decay=-0.1).check_settings()


@pytest.mark.parametrize("config, what, command", [(PolicyConfig, "PPO/GRPO", "ppo"), (DPOConfig, "DPO", "dpo"),
                                                   (SFTConfig, "SFT", "sft")])
def test_from_dict_reads_the_shared_settings_and_refuses_unknown_ones_alike(config, what, command):
    read = config.from_dict({"lora": True, "lora_r": 4, "bf16": False, "max_grad_norm": 0.5})
    assert (read.lora, read.lora_r, read.max_grad_norm) == (True, 4, 0.5)
    with pytest.raises(InvalidInput, match=f"unknown {what} setting 'lora_rank'; see python app.py {command} --help"):
        config.from_dict({"lora_rank": 4})


def test_a_stored_job_reads_back_into_its_run_alike():
    from trainers.policy.config import PolicyRun
    from trainers.policy.dpo_config import DPORun
    from trainers.policy.sft_config import SFTRun
    from trainers.settings import TrainerRun

    for run, config in ((PolicyRun, PolicyConfig), (DPORun, DPOConfig), (SFTRun, SFTConfig)):
        assert issubclass(run, TrainerRun) and run.SETTINGS is config
        read = run.from_dict({"settings": {"lora": True}, "a_key_of_an_older_version": 1})
        assert isinstance(read.config, config) and read.config.lora
    assert PolicyRun.from_dict({"ppo": {"ppo_epochs": 3}}).config.epochs == 3  # jobs stored before the renames
