"""DPO's settings (`DPOConfig`), what a DPO job runs (`DPORun`) and the loss types TRL's `DPOTrainer` offers. No torch
at import time, so the CLI builds its options and the UI validates a loop's DPO settings without loading a model.

    config = DPOConfig(dpo_beta=0.1, loss_type="sigmoid", train_ties=True)
    config.check()                                   # DPOSetupError, in one line, for a setting that cannot work
    run = DPORun(source="hh-rlhf", settings={"epochs": 2})
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from ..settings import ScheduledSettings, TrainerRun, positive_number
from .config import PolicySetupError

# TRL 1.16's DPOTrainer loss types (`trl.DPOConfig.loss_type`); tests/test_dpo.py checks TRL still offers exactly these
LOSS_TYPES = ("sigmoid", "hinge", "ipo", "exo_pair", "nca_pair", "robust", "bco_pair", "sppo_hard", "aot",
              "aot_unpaired", "apo_zero", "apo_down", "discopop", "sft", "sigmoid_norm")
SMOOTHED_LOSS_TYPES = ("robust", "exo_pair", "aot", "aot_unpaired")  # the ones that read label_smoothing
TIE_LOSS_TYPES = ("sigmoid", "ipo")  # a preference probability p = 0.5 has a meaning in these (dpo_math)


class DPOSetupError(PolicySetupError):
    """DPO cannot start with these settings, labels or models."""


@dataclass
class DPOConfig(ScheduledSettings):
    """Settings of a DPO run (Rafailov et al. 2023) on TRL's `DPOTrainer`: the policy trained on labelled pairs against
    a frozen reference (the SFT root), then sampled to measure how far it moved."""

    dpo_beta: float = field(default=0.1, metadata={
        "help": "DPO's β: the strength of the implicit KL term to the SFT policy (> 0; higher stays closer). Not the "
                "PPO KL coefficient."})
    loss_type: str = field(default="sigmoid", metadata={
        "help": "TRL's DPO loss: " + ", ".join(LOSS_TYPES) + " (sigmoid: DPO itself)."})
    label_smoothing: float = field(default=0.0, metadata={
        "help": "Label-flip probability ε of the robust, exo_pair and aot losses (robust: [0, 0.5); exo_pair: > 0)."})
    train_ties: bool = field(default=False, metadata={
        "help": "Train ties (and, with both_bad_as_tie, both-bad labels) at target p = 0.5 with a per-example soft "
                "loss (sigmoid and ipo losses); off: they are left out and counted."})
    both_bad_as_tie: bool = field(default=True, metadata={
        "help": "With train_ties: 'both bad' labels train as ties (as the reward model does); off: left out."})
    seed: int = field(default=0, metadata={"help": "Seed of the data order, the LoRA initialisation and the samples."})
    batch_size: int = field(default=8, metadata={"help": "Labelled pairs per optimiser step (per process)."})
    epochs: float = field(default=1.0, metadata={"help": "Passes over the labelled pairs."})
    learning_rate: float = field(default=1e-5, metadata={"help": "AdamW learning rate of the policy."})
    save_every: int = field(default=50, metadata={"help": "Save the resumable state every this many steps."})
    sample_prompts: int = field(default=32, metadata={
        "help": "Prompts (of the labelled pairs) the policy answers to measure its KL to the reference, entropy and "
                "EOS rate on its own samples."})
    sample_evals: int = field(default=2, metadata={
        "help": "How often in a run the policy is sampled for those measures (evenly spaced, the last after the "
                "final step)."})
    response_length: int = field(default=24, metadata={"help": "Most tokens of each sampled response."})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature (> 0); log-probs use the same."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling mass."})
    top_k: int = field(default=0, metadata={"help": "Sample only among the k likeliest tokens (0: off)."})
    monitor_oracle: str | None = field(default=None, metadata={
        "help": "module:function also scoring the sampled responses, logged as dpo/oracle_score (never trained on)."})

    WHAT, COMMAND, ERROR = "DPO", "dpo", DPOSetupError

    def check_settings(self) -> None:
        """Raise DPOSetupError, in one line, for a setting that cannot work, without looking at the machine (no torch:
        the UI validates a loop's DPO settings with it)."""
        if not positive_number(self.dpo_beta):
            raise DPOSetupError(f"dpo_beta (DPO's β) must be a positive number, got {self.dpo_beta}; 0.1 is the usual "
                                "start")
        if self.loss_type not in LOSS_TYPES:
            raise DPOSetupError(f"unknown DPO loss type {str(self.loss_type)[:40]!r}; use one of "
                                f"{', '.join(LOSS_TYPES)}")
        self._check_smoothing()
        if self.train_ties and self.loss_type not in TIE_LOSS_TYPES:
            raise DPOSetupError(f"train_ties needs a loss in which a tie (p = 0.5) means something: "
                                f"{' or '.join(TIE_LOSS_TYPES)}, not {self.loss_type}; change loss_type or leave ties "
                                "out")
        for name in ("batch_size", "save_every", "sample_prompts", "sample_evals", "response_length"):
            if getattr(self, name) < 1:
                raise DPOSetupError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not self.epochs > 0 or not self.learning_rate > 0:
            raise DPOSetupError(f"epochs and learning_rate must be positive, got {self.epochs} and "
                                f"{self.learning_rate}")
        if self.temperature <= 0 or not 0 < self.top_p <= 1 or self.top_k < 0:
            raise DPOSetupError(f"DPO samples: temperature must be > 0, top-p in (0, 1] and top-k 0 or more, got "
                                f"{self.temperature}, {self.top_p}, {self.top_k}")
        super().check_settings()

    def _check_smoothing(self) -> None:
        if self.label_smoothing and self.loss_type not in SMOOTHED_LOSS_TYPES:
            raise DPOSetupError(f"label_smoothing is read only by the {', '.join(SMOOTHED_LOSS_TYPES)} losses, not "
                                f"{self.loss_type}; set it to 0 or choose one of them")
        if self.loss_type == "robust" and not 0 <= self.label_smoothing < 0.5:
            raise DPOSetupError(f"the robust loss needs label_smoothing in [0, 0.5), got {self.label_smoothing}")
        if self.loss_type == "exo_pair" and not 0 < self.label_smoothing < 1:
            raise DPOSetupError(f"the exo_pair loss needs label_smoothing in (0, 1) (its paper uses 1e-3), got "
                                f"{self.label_smoothing}")


@dataclass
class DPORun(TrainerRun):
    """What a DPO job does; `settings` holds `DPOConfig` fields (defaults for those left out). Saved as the job's
    config, so a resumed job repeats it."""

    policy_id: int | None = field(default=None, metadata={"help": "Policy version to train (None: the newest)."})
    source: str | None = field(default=None, metadata={
        "help": "Train only on the labels of this annotator or imported data set (import-preferences --source); "
                "None: every label that trains."})
    round: int | None = field(default=None, metadata={"help": "Round of the new policy (None: the start's + 1)."})
    settings: dict = field(default_factory=dict, metadata={"help": "DPOConfig settings."})

    SETTINGS: ClassVar[type] = DPOConfig

