"""The settings every policy trainer shares (TRL's `TrainingArguments` habit): `TrainerSettings` (LoRA, gradient-norm
clipping, bf16, gradient checkpointing) for PPO/GRPO, DPO and SFT, and `ScheduledSettings` adding the warmup, weight
decay and logging of the two that run on TRL's `Trainer` (DPO, SFT). Each trainer's own settings subclass one of them
beside its trainer (`trainers.policy.config`, `dpo_config`, `sft_config`). No torch at import time.

One validation style for every settings dataclass: `check_settings()` raises `ERROR`, in one line naming the setting
and the fix, without looking at the machine (the UI and the loop validate with it); `check()` adds this machine (bf16
needs a GPU). `from_dict` reads a job's or a command's settings, old names (`RENAMED`) accepted, unknown ones refused.

    class MyConfig(ScheduledSettings):
        WHAT, COMMAND, ERROR = "My", "mine", MySetupError
    MyConfig.from_dict({"lora": True, "lora_r": 4}).check()
"""

from __future__ import annotations

import functools
import math
import sys
from dataclasses import dataclass, field, fields
from typing import ClassVar, TypeVar

from storage.errors import InvalidInput

Settings = TypeVar("Settings")  # a settings dataclass: PolicyConfig, DPOConfig, SFTConfig


@functools.cache
def note_renamed(old: str, new: str) -> None:
    """Say on stderr, once per process, that the setting or flag `old` is now called `new` (the old one still works)."""
    print(f"note: {old} is now called {new}; the old name still works", file=sys.stderr)


def renamed_settings(values: dict, renamed: dict[str, str], what: str) -> dict:
    """`values` with each setting stored under an old name (`renamed`: old -> new) moved to its new name (noted once),
    so jobs and configs written before a rename keep their meaning; both names at once is refused in one line."""
    values = dict(values)
    for old, new in renamed.items():
        if old in values:
            if new in values:
                raise InvalidInput(f"{what} setting {old!r} is the old name of {new!r}; give only {new!r}")
            values[new] = values.pop(old)
            note_renamed(f"{what} setting {old!r}", repr(new))
    return values


def known_settings(config: type[Settings], values: dict, what: str, command: str) -> Settings:
    """`config(**values)`; a setting `config` has no field for is refused in one line that names the `what` settings
    and the command whose --help lists them."""
    unknown = sorted(set(values) - {f.name for f in fields(config)})
    if unknown:
        raise InvalidInput(f"unknown {what} setting {unknown[0]!r}; see python app.py {command} --help for the "
                           "settings")
    return config(**values)


def check_bf16(bf16: bool, error: type[Exception]) -> None:
    """Raise `error`, in one line, when bfloat16 is asked for on a machine without a GPU (torch imported here)."""
    import torch

    if bf16 and not torch.cuda.is_available():
        raise error("bf16 was requested but there is no GPU; drop --bf16 to train in float32 on the CPU")


def positive_number(value) -> bool:
    """Is `value` a finite number above 0 (a learning rate, a clipping threshold)?"""
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


@dataclass
class TrainerSettings:
    """What PPO/GRPO, DPO and SFT set alike: the weights trained (all, or LoRA adapters), clipping and precision."""

    max_grad_norm: float = field(default=1.0, metadata={"help": "Gradient-norm clipping threshold."})
    lora: bool = field(default=False, metadata={"help": "Train LoRA adapters instead of all weights."})
    lora_r: int = field(default=8, metadata={"help": "LoRA rank."})
    lora_alpha: int = field(default=16, metadata={"help": "LoRA scaling α."})
    lora_dropout: float = field(default=0.0, metadata={"help": "LoRA dropout."})
    lora_target_modules: list[str] | None = field(default=None, metadata={
        "help": "Module names given adapters; None: peft's default for the architecture."})
    bf16: bool = field(default=False, metadata={"help": "bfloat16 mixed precision (GPU only)."})
    gradient_checkpointing: bool = field(default=False, metadata={
        "help": "Recompute activations during the backward pass: less memory, slower steps."})

    WHAT: ClassVar[str] = "trainer"  # the settings' name in errors ("unknown DPO setting ...")
    COMMAND: ClassVar[str] = ""  # the command whose --help lists them
    ERROR: ClassVar[type[Exception]] = InvalidInput  # what a bad setting raises
    RENAMED: ClassVar[dict[str, str]] = {}  # old setting names, accepted on read

    @classmethod
    def from_dict(cls: type[Settings], values: dict) -> Settings:
        """Settings from a job or a command (old names accepted); an unknown one is refused in one line."""
        return known_settings(cls, renamed_settings(values, cls.RENAMED, cls.WHAT), cls.WHAT, cls.COMMAND)

    def check(self) -> None:
        """Raise `ERROR`, in one line, for a setting that cannot work (this machine's GPU included)."""
        self.check_settings()
        check_bf16(self.bf16, self.ERROR)

    def check_settings(self) -> None:
        """Raise `ERROR`, in one line, for a setting that cannot work, without looking at the machine (no torch)."""
        if not positive_number(self.max_grad_norm):
            raise self.ERROR(f"max_grad_norm must be a positive number, got {self.max_grad_norm}")
        if self.lora_r < 1:
            raise self.ERROR(f"lora_r must be at least 1, got {self.lora_r}")
        if not 0 <= self.lora_dropout < 1:
            raise self.ERROR(f"lora_dropout must be in [0, 1), got {self.lora_dropout}")


class TrainerRun:
    """The base of what a trainer's job runs (`PolicyRun`, `DPORun`, `SFTRun`: dataclasses with a `settings` dict of
    their `SETTINGS` fields), saved as the job's config: `from_dict` reads one back, old names (`RENAMED`) accepted and
    keys the run no longer has left out, so a stored job still resumes."""

    SETTINGS: ClassVar[type[TrainerSettings]]
    RENAMED: ClassVar[dict[str, str]] = {}

    @classmethod
    def from_dict(cls: type[Settings], values: dict) -> Settings:
        values = renamed_settings(values, cls.RENAMED, "run")
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})

    @property
    def config(self) -> TrainerSettings:
        """The run's settings (old setting names accepted, unknown ones refused in one line)."""
        return self.SETTINGS.from_dict(self.settings)


@dataclass
class ScheduledSettings(TrainerSettings):
    """`TrainerSettings` plus the learning-rate warmup, weight decay and logging of a trainer on TRL's `Trainer`."""

    warmup_ratio: float = field(default=0.1, metadata={"help": "Share of the steps the learning rate warms up over."})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay."})
    logging_steps: int = field(default=1, metadata={"help": "Log the metrics every this many steps."})

    def check_settings(self) -> None:
        super().check_settings()
        if not 0 <= self.warmup_ratio < 1:
            raise self.ERROR(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        if self.logging_steps < 1:
            raise self.ERROR(f"logging_steps must be at least 1, got {self.logging_steps}")
        if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise self.ERROR(f"weight_decay must be 0 or a positive number, got {self.weight_decay}")
