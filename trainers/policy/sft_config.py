"""SFT's settings (`SFTConfig`) and what an SFT job runs (`SFTRun`). No torch at import time, so the CLI builds its
options and the UI validates the settings without loading a model.

    config = SFTConfig(epochs=3, learning_rate=2e-5, lora=True)
    config.check()                                   # SFTSetupError, in one line, for a setting that cannot work
    run = SFTRun(source="writers", settings={"epochs": 2})
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from ..settings import ScheduledSettings, TrainerRun, positive_number
from .config import PolicySetupError

ROOT_CHECK_RULE = "new_root_check"  # the job warning of an SFT version not made the SFT policy (trainers.jobs.sft_job)
MAKE_SFT_POLICY = "Make it the SFT policy"  # the Train tab's button that does it by hand (app.train.root_action)
# A full fine-tune as a new root on fewer demonstrations is refused: at the demo's preset (1e-3, 6 epochs) 1 and 2
# synthetic demonstrations moved its held-out fluency the most (ratio up to 1.56), 4 to 32 at most 1.16
# (docs/benchmarks.md, "The new-root check")
MIN_ROOT_DEMONSTRATIONS = 4


class SFTSetupError(PolicySetupError):
    """SFT cannot start with these settings, demonstrations or models."""


@dataclass
class SFTConfig(ScheduledSettings):
    """Settings of a supervised fine-tuning run on TRL's `SFTTrainer`: the policy learns to write the demonstrations,
    the loss on the answer's tokens only (its end-of-turn id included), nothing cut."""

    seed: int = field(default=0, metadata={"help": "Seed of the data order, the held-out split and the LoRA "
                                                   "initialisation."})
    batch_size: int = field(default=8, metadata={"help": "Demonstrations per optimiser step (per process)."})
    epochs: float = field(default=3.0, metadata={"help": "Passes over the demonstrations."})
    learning_rate: float = field(default=2e-5, metadata={"help": "AdamW learning rate of the policy."})
    heldout_share: float = field(default=0.1, metadata={
        "help": "Share of the demonstrations held out (never trained on) to measure sft/heldout_loss; 0: none."})
    eval_every: int = field(default=10, metadata={"help": "Measure the held-out loss every this many steps (and after "
                                                          "the last)."})
    lora: bool = field(default=False, metadata={"help": "Train LoRA adapters instead of all weights (merged into the "
                                                        "saved version)."})
    save_every: int = field(default=50, metadata={"help": "Save the resumable state every this many steps."})

    WHAT, COMMAND, ERROR = "SFT", "sft", SFTSetupError

    def check_settings(self) -> None:
        """Raise SFTSetupError, in one line, for a setting that cannot work, without looking at the machine (no
        torch)."""
        for name in ("batch_size", "logging_steps", "save_every", "eval_every", "lora_r"):
            if getattr(self, name) < 1:
                raise SFTSetupError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("epochs", "learning_rate"):
            if not positive_number(getattr(self, name)):
                raise SFTSetupError(f"{name} must be a positive number, got {getattr(self, name)}")
        if not 0 <= self.heldout_share < 1:
            raise SFTSetupError(f"heldout_share must be in [0, 1), got {self.heldout_share}; 0.1 holds out a tenth")
        super().check_settings()


def check_root_demonstrations(config: SFTConfig, as_root: bool, count: int) -> None:
    """SFTSetupError, in one line, for a full fine-tune meant as a new root on fewer than `MIN_ROOT_DEMONSTRATIONS`
    demonstrations (LoRA, or a version that stays the start's child, may train on any number)."""
    if as_root and not config.lora and count < MIN_ROOT_DEMONSTRATIONS:
        raise SFTSetupError(f"{count} demonstration{'s' if count != 1 else ''} can train SFT, fewer than the "
                            f"{MIN_ROOT_DEMONSTRATIONS} a full fine-tune as a new SFT policy needs (on fewer the "
                            "demo's held-out fluency fell the most: docs/benchmarks.md); write more, or train LoRA "
                            "(lora, --lora) or a child of the start (as_root false, --no-as-root)")


@dataclass
class SFTRun(TrainerRun):
    """What an SFT job does; `settings` holds `SFTConfig` fields (defaults for those left out). Saved as the job's
    config, so a resumed job repeats it."""

    policy_id: int | None = field(default=None, metadata={"help": "Policy version to fine-tune (None: the newest)."})
    source: str | None = field(default=None, metadata={
        "help": "Train only on the demonstrations by this author: a person, or an import's source name "
                "(import-demonstrations --source); None: every current demonstration."})
    as_root: bool = field(default=True, metadata={
        "help": "Register the SFT version as the new SFT policy: later versions stay close to it (the KL term, DPO's "
                "reference) and win-rate pairs compare against it. Off: it is the start's child, and the start's SFT "
                "policy stays."})
    round: int | None = field(default=None, metadata={"help": "Round of the new policy (None: the start's)."})
    since: float | None = field(default=None, metadata={
        "help": "Train only on the demonstrations stored after this time (seconds since the epoch; a loop's SFT step "
                "of each round); None: all of them."})
    settings: dict = field(default_factory=dict, metadata={"help": "SFTConfig settings."})

    SETTINGS: ClassVar[type] = SFTConfig



@dataclass
class SFTExample:
    """One demonstration as SFT trains on it: its id, the prompt (text or turns) and the answer."""

    demonstration_id: int
    prompt: str | list[dict]
    text: str
