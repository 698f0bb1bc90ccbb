"""The settings of each phase of a loop round, named as the phase's trainer names them: `RewardPhase` (the reward model:
`RewardConfig`'s names), `PolicyPhase` (PPO or GRPO: `PolicyConfig`'s and `PolicyRun`'s), `DPOPhase` (`DPOConfig`'s)
and `SFTPhase` (the SFT steps). A loop config holds one of each (`LoopConfig.reward_model`, `.policy`, `.dpo`, `.sft`).

Users, commands and stored jobs name these settings flat, as one loop setting each (`reward_lr`, `policy_epochs`,
`dpo_beta`, `sft_first`): a field's `metadata["flat"]`, which `FLAT` maps back to its phase and field. Each phase
checks its own settings (`check_settings`), in one line naming the flat setting. No torch here.

    PolicyPhase(learning_rate=3e-4).check_settings(grpo=False)
    FLAT["policy_lr"]                                # ("policy", the `PolicyPhase.learning_rate` field)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from storage.errors import InvalidInput

from ..policy.dpo_config import LOSS_TYPES, DPOConfig
from ..reward.config import RewardConfig, RewardTraining


def setting(flat: str, default, help: str, **metadata) -> dataclasses.Field:
    """A phase field known to users as the loop setting `flat`, with its help."""
    return field(default=default, metadata={"flat": flat, "help": help, **metadata})


def at_least_one(phase, *names: str) -> None:
    """InvalidInput, in one line naming the flat setting, for a field of `names` below 1."""
    for name in names:
        if getattr(phase, name) < 1:
            raise InvalidInput(f"{flat_name(phase, name)} must be at least 1, got {getattr(phase, name)}")


def positive(phase, *names: str) -> None:
    """InvalidInput, in one line naming the flat setting, for a field of `names` not above 0."""
    for name in names:
        if not getattr(phase, name) > 0:
            raise InvalidInput(f"{flat_name(phase, name)} must be positive, got {getattr(phase, name)}")


def flat_name(phase, name: str) -> str:
    return phase.__dataclass_fields__[name].metadata["flat"]


@dataclass(frozen=True)
class RewardPhase:
    """How each round trains its reward model (or ensemble)."""

    ensemble: int = setting("ensemble", 1, "reward-model ensemble size (disagreement needs 2+)")
    epochs: int = setting("reward_epochs", 12, "reward-model epochs over all labels")
    learning_rate: float = setting("reward_lr", RewardConfig.learning_rate,
                                   "reward-model learning rate (demo: 1e-3; real models: ~1e-5)")
    continue_lr_scale: float = setting(
        "reward_continue_lr_scale", 1.0, "a round whose reward model continues the previous round's (incremental, "
        "reward_warm_start) trains at reward_lr x this")
    batch_size: int = setting(
        "reward_batch_size", 16, "reward-model pairs per batch (a ranking of K counts as K/2 pairs: 8 rankings of 4 "
        "make 16)")
    warm_start: bool = setting(
        "reward_warm_start", False, "start each round's reward model from the previous round's instead of the SFT "
        "policy")
    early_stopping_patience: int = setting(
        "reward_patience", 0, "stop reward training after this many validations without a lower validation loss, "
        "keeping the best weights (0: off; 3 keeps an incremental round's cost at the first round's: "
        "bench/round_cost.py)")
    # full by default: on the demo every incremental variant measured held its reward models' accuracy on the pairs
    # no model of its lineage trained on 2-7 points below a full retrain's (docs/benchmarks.md#round-cost)
    training: str = setting(
        "reward_training", RewardTraining.FULL.value, "incremental: each round continues the previous round's reward "
        "model on its new labels plus reward_replay older ones (the cost follows the new labels; implies the warm "
        "start); full: every label each round, from the SFT policy (or the previous model with reward_warm_start)",
        choices=RewardTraining)
    replay_labels: int = setting(
        "reward_replay", 100, "incremental reward training: older labels replayed each round, a seeded sample drawn "
        "anew")
    lora: bool = setting(
        "reward_lora", False, "train the reward model as a LoRA adapter and a score head; with lora and the reward "
        "model on the policy's base, PPO/GRPO score with that adapter on the policy's own copy of the base. The "
        "adapter starts at zero and needs about 1e-3 (on SmolLM2 one epoch at 1e-5, a full fine-tune's rate, left it "
        "at chance): given against the preset's choice without reward_lr, it takes that kind's rate (1e-3 for LoRA, "
        "1e-5 for a full fine-tune)")

    def check_settings(self) -> None:
        """InvalidInput, in one line, for a reward-model setting out of range."""
        at_least_one(self, "epochs", "batch_size", "ensemble")
        positive(self, "learning_rate", "continue_lr_scale")
        if self.early_stopping_patience < 0:
            raise InvalidInput(f"reward_patience must be 0 (off) or more, got {self.early_stopping_patience}")
        if self.training not in {t.value for t in RewardTraining} or self.replay_labels < 0:
            raise InvalidInput(f"reward_training must be one of {', '.join(RewardTraining)} and reward_replay 0 or "
                               f"more, got {self.training!r} and {self.replay_labels}")


@dataclass(frozen=True)
class PolicyPhase:
    """How each round optimises the policy with PPO or GRPO (its iterations, batches, rate and KL penalty)."""

    iterations: int = setting("policy_iterations", 10, "M: PPO (or GRPO) iterations per round")
    batch_size: int = setting("policy_batch_size", 32, "prompts per rollout (GRPO: x G responses)")
    num_mini_batches: int = setting("policy_mini_batches", 2, "mini-batches per epoch (divides the batch)")
    epochs: int = setting("policy_epochs", 2, "PPO (or GRPO) epochs over each rollout")
    learning_rate: float = setting("policy_lr", 2e-4, "PPO (or GRPO) learning rate")
    group_size: int = setting("group_size", 4, "G: GRPO responses per prompt (at least 2)")
    init_kl_coef: float = setting("kl_coef", 0.1, "beta: KL penalty to the reference (PPO, GRPO)")
    target_kl: float | None = setting("target_kl", None, "adaptive KL target (None = fixed beta)")

    def check_settings(self, grpo: bool) -> None:
        """InvalidInput, in one line, for a PPO/GRPO setting out of range (`grpo`: the loop's algorithm is GRPO)."""
        at_least_one(self, "iterations", "batch_size", "num_mini_batches", "epochs")
        positive(self, "learning_rate")
        if self.batch_size % self.num_mini_batches:
            whole = " (prompts), so that no mini-batch splits a group" if grpo else ""
            raise InvalidInput(f"policy_mini_batches ({self.num_mini_batches}) must divide policy_batch_size "
                               f"({self.batch_size}){whole}")
        if self.group_size < 2:
            raise InvalidInput(f"group_size must be at least 2 (GRPO compares the responses to a prompt), got "
                               f"{self.group_size}")
        if self.target_kl is not None and not self.target_kl > 0:
            raise InvalidInput(f"target_kl must be positive or null, got {self.target_kl}")


@dataclass(frozen=True)
class DPOPhase:
    """How each round trains the policy with DPO (`algorithm dpo`); the rest of `DPOConfig` comes from the loop's
    shared settings (`trainers.loop.config.dpo_settings`), which `DPOConfig.check_settings` checks together."""

    dpo_beta: float = setting("dpo_beta", DPOConfig.dpo_beta, "DPO's beta: the strength of its implicit KL anchor to "
                                                              "the SFT policy (> 0)")
    loss_type: str = setting("dpo_loss_type", DPOConfig.loss_type, "DPO loss, one of TRL's: " + ", ".join(LOSS_TYPES))
    label_smoothing: float = setting("dpo_label_smoothing", DPOConfig.label_smoothing,
                                     "DPO label-flip probability of the robust, exo_pair and aot losses")
    train_ties: bool = setting("dpo_train_ties", False, "DPO trains ties and both-bad labels at p = 0.5 (off: left "
                                                        "out and counted)")
    batch_size: int = setting("dpo_batch_size", 8, "DPO: labelled pairs per step")

    def check_settings(self) -> None:
        at_least_one(self, "batch_size")


@dataclass(frozen=True)
class SFTPhase:
    """When and how the loop fine-tunes the policy on the store's demonstrations (SFT)."""

    first: bool = setting(
        "sft_first", False, "before the first round, fine-tune the policy on the store's demonstrations (SFT) and "
        "register it as the new SFT policy: what the KL term and DPO stay close to and win-rate pairs compare against")
    each_round: bool = setting(
        "sft_each_round", False, "before each round's policy phase, fine-tune the newest policy on the "
        "demonstrations stored since the job's previous SFT step (the root stays the reference); off: on the demo it "
        "did worse than SFT first (docs/benchmarks.md)")
    epochs: float = setting("sft_epochs", 6.0, "SFT epochs over the demonstrations (sft_first, sft_each_round, "
                                               "python app.py sft)")
    learning_rate: float | None = setting(
        "sft_lr", 1e-3, "SFT learning rate (the demo's: a full fine-tune of its tiny policy; None: policy_lr with "
        "LoRA, 2e-5 for a full fine-tune)")

    def check_settings(self) -> None:
        positive(self, "epochs")
        if self.learning_rate is not None and not self.learning_rate > 0:
            raise InvalidInput(f"sft_lr must be positive or null, got {self.learning_rate}")


PHASES = {"reward_model": RewardPhase, "policy": PolicyPhase, "dpo": DPOPhase, "sft": SFTPhase}  # LoopConfig's
# each flat loop setting a phase holds: its phase (a LoopConfig field) and its field there
FLAT = {f.metadata["flat"]: (phase, f) for phase, kind in PHASES.items() for f in dataclasses.fields(kind)}
