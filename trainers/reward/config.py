"""Reward-model settings (`RewardConfig`): one dataclass, checked before anything is written. No torch here, so the
CLI builds its options fast and the UI can build a reward job's config.

    config = RewardConfig(epochs=1, learning_rate=1e-5, ensemble=3)
    config.check()                                   # InvalidInput, in one line, for an out-of-range setting
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from storage.errors import InvalidInput


class RewardTraining(StrEnum):
    """Which labels a reward training reads: all of them, or the newest reward model's unseen ones plus a replay."""

    FULL = "full"
    INCREMENTAL = "incremental"


@dataclass
class RewardConfig:
    """Settings of a reward-model training; the defaults suit the demo."""

    epochs: float = field(default=12.0, metadata={
        "help": "Passes over the training labels (demo: 12; real models: 1-2)."})
    learning_rate: float = field(default=1e-3, metadata={
        "help": "Peak AdamW learning rate, linear decay (demo: 1e-3, measured by bench/reward_quality.py and "
                "bench/label_efficiency.py; real models: ~1e-5)."})
    continue_lr_scale: float = field(default=1.0, metadata={
        "help": "A training that continues the newest reward model (incremental training, warm start) peaks at "
                "learning_rate x this."})
    batch_size: int = field(default=16, metadata={
        "help": "Labelled pairs per optimiser step and device; a ranking of K counts as K/2 pairs (the answers it "
                "reads), so 8 rankings of 4 make a batch of 16."})
    weight_decay: float = field(default=0.1, metadata={
        "help": "AdamW weight decay (regularises the small label sets)."})
    warmup_ratio: float = field(default=0.1, metadata={
        "help": "Fraction of the steps spent warming the learning rate up."})
    ensemble: int = field(default=1, metadata={
        "help": "Members K; K > 1 trains each on a bootstrap resample of the labels (the disagreement selector "
                "needs 2+)."})
    val_fraction: float = field(default=0.2, metadata={"help": "Fraction of labelled pairs held out for validation."})
    split_seed: int | None = field(default=None, metadata={
        "help": "Seed of the validation split (None: seed); the loop keeps one per run."})
    warm_start: bool = field(default=False, metadata={
        "help": "Start from the newest reward model (member k from its member k) instead of the base, when one "
                "exists; it then validates on its lineage's whole held-out set."})
    training: str = field(default=RewardTraining.FULL.value, metadata={
        "help": "full: train on every label (from the base, or with warm_start from the newest reward model); "
                "incremental: continue the newest reward model on the labels it has not seen plus replay_labels "
                "older ones, so the cost follows the new labels (the first reward model trains in full)",
        "choices": RewardTraining})
    replay_labels: int = field(default=100, metadata={
        "help": "incremental training: older labels replayed beside the new ones, a seeded sample drawn anew each "
                "round (0: only the new labels)"})
    lora: bool = field(default=False, metadata={
        "help": "Train a LoRA adapter and the score head instead of every weight; the member is saved merged (a "
                "plain sequence classifier) with the adapter beside it, so a LoRA policy on the same base scores "
                "with it on its own copy of the base."})
    lora_r: int = field(default=8, metadata={"help": "LoRA rank of the reward adapter."})
    lora_alpha: int = field(default=16, metadata={"help": "LoRA scaling alpha of the reward adapter."})
    early_stopping_patience: int = field(default=0, metadata={
        "help": "Stop after this many validations without a lower validation loss and keep the best weights (0: "
                "train every epoch)."})
    both_bad_as_tie: bool = field(default=True, metadata={
        "help": "Train 'both bad' labels as ties (off: leave them out)."})
    margin: float = field(default=0.0, metadata={
        "help": "The preferred response must lead by this margin (0: none); imported labels with a margin of their "
                "own keep theirs."})
    label_noise: float = field(default=0.0, metadata={"help": "Label-noise rate eps: P = (1-eps)*sigmoid(d) + eps/2."})
    bf16: bool = field(default=False, metadata={"help": "bfloat16 mixed precision (GPUs that support it)."})
    activation_checkpointing: bool = field(default=False, metadata={
        "help": "Recompute activations to save memory (slower)."})
    group_by_length: bool = field(default=True, metadata={
        "help": "Batch pairs of similar length (less padding, faster)."})
    logging_steps: int = field(default=10, metadata={
        "help": "Optimiser steps between metrics, validation and cancel checks."})
    norm_samples: int = field(default=1024, metadata={
        "help": "Policy samples scored for the reward mean/std normalisation."})
    policy_id: int | None = field(default=None, metadata={
        "help": "Policy version whose samples normalise the rewards (None: the newest)."})
    init_policy_id: int | None = field(default=None, metadata={
        "help": "Policy version the model starts from (None: the project's reward base, else the SFT policy)."})
    round: int = field(default=0, metadata={"help": "Loop round that trains this reward model (0 outside the loop)."})
    seed: int = field(default=0, metadata={
        "help": "Seed of the split, the bootstrap, the head's init and the batches."})

    def check(self) -> None:
        """Raises InvalidInput, in one line, for an out-of-range setting."""
        checks = [(self.epochs > 0, f"epochs must be positive, got {self.epochs}"),
                  (self.learning_rate > 0, f"learning rate must be positive, got {self.learning_rate}"),
                  (self.continue_lr_scale > 0, f"continue LR scale must be positive, got {self.continue_lr_scale}"),
                  (self.batch_size >= 1, f"batch size must be at least 1, got {self.batch_size}"),
                  (self.ensemble >= 1, f"ensemble size must be at least 1, got {self.ensemble}"),
                  (0 <= self.val_fraction < 1, f"validation fraction must be in [0, 1), got {self.val_fraction}"),
                  (0 <= self.label_noise < 1, f"label noise must be in [0, 1), got {self.label_noise}"),
                  (self.margin >= 0, f"margin must be 0 or positive, got {self.margin}"),
                  (self.logging_steps >= 1, f"logging steps must be at least 1, got {self.logging_steps}"),
                  (self.training in {t.value for t in RewardTraining},
                   f"reward training must be one of {', '.join(RewardTraining)}, got {self.training!r}"),
                  (self.lora_r >= 1, f"LoRA rank must be at least 1, got {self.lora_r}"),
                  (self.replay_labels >= 0, f"replay labels must be 0 or more, got {self.replay_labels}"),
                  (self.early_stopping_patience >= 0,
                   f"early stopping patience must be 0 (off) or more, got {self.early_stopping_patience}")]
        for ok, message in checks:
            if not ok:
                raise InvalidInput(message)
