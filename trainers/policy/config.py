"""Policy-optimisation settings (`PolicyConfig`: PPO, or GRPO with `algorithm="grpo"`), what a PPO job runs
(`PolicyRun`), the setup error, and `Algorithm`, every way the studio trains a policy (DPO's settings are in
`dpo_config`). The settings every trainer shares (LoRA, clipping, bf16) come from `trainers.settings.TrainerSettings`.
No torch at import time, so the CLI builds its options fast."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import ClassVar

from labeling.queue.synthetic import DEFAULT_ORACLE
from storage import StudioError
from storage.errors import InvalidInput

from ..reward.function_specs import parse_reward_functions
from ..settings import TrainerRun, TrainerSettings

KL_KINDS = ("k1", "k2", "k3")


class RewardSource(StrEnum):
    """What PPO or GRPO maximises: the newest reward model, an oracle scoring function (benchmarks), the reward
    functions alone (`trainers.reward.functions`), or the reward model plus the functions."""

    RM = "rm"
    ORACLE = "oracle"
    FUNCTIONS = "functions"
    RM_FUNCTIONS = "rm+functions"

    @property
    def uses_functions(self) -> bool:
        return self in (RewardSource.FUNCTIONS, RewardSource.RM_FUNCTIONS)

    @property
    def uses_reward_model(self) -> bool:
        return self in (RewardSource.RM, RewardSource.RM_FUNCTIONS)


class Algorithm(StrEnum):
    """How a policy is trained: PPO (a critic, GAE, the KL penalty in the reward), GRPO (G responses per prompt,
    group-relative advantages, no critic, the KL penalty in the loss), both on rollouts against a reward, or DPO (the
    labelled pairs themselves, no rollout, no reward model: `trainers.policy.dpo`, its own job and command)."""

    PPO = "ppo"
    GRPO = "grpo"
    DPO = "dpo"


ROLLOUT_ALGORITHMS = (Algorithm.PPO, Algorithm.GRPO)  # what PolicyConfig (a `ppo` job) runs


class LossNorm(StrEnum):
    """How GRPO averages its per-token loss: over each response's tokens then over responses (the original
    formulation), or over every real token of the mini-batch at once."""

    SEQUENCE = "sequence"
    TOKEN = "token"


class PolicySetupError(StudioError):
    """PPO or GRPO cannot start with these models, prompts or settings."""


@dataclass
class PolicyConfig(TrainerSettings):
    """Settings of a PPO or GRPO run; sizes are per process (under accelerate, each process runs `batch_size` prompts:
    as many episodes under PPO, `batch_size * group_size` under GRPO)."""

    algorithm: str = field(default=Algorithm.PPO.value, metadata={
        "help": "Policy optimiser: ppo (critic, GAE) or grpo (group-relative advantages, no critic); DPO is its own "
                "command (python app.py dpo)."})
    group_size: int = field(default=4, metadata={"help": "GRPO: responses sampled per prompt (G, at least 2)."})
    loss_norm: str = field(default=LossNorm.SEQUENCE.value, metadata={
        "help": "GRPO: average the loss per response then over responses (sequence), or over all tokens (token).",
        "choices": LossNorm})
    seed: int = field(default=0, metadata={"help": "Seed of the initial weights, prompt order and sampling."})
    batch_size: int = field(default=64, metadata={
        "help": "Prompts per iteration and process (one episode each under PPO, group_size under GRPO)."})
    num_mini_batches: int = field(default=1, metadata={
        "help": "Mini-batches per epoch; must divide batch_size (so GRPO's never split a group)."})
    epochs: int = field(default=4, metadata={"help": "Passes over each rollout buffer."})
    learning_rate: float = field(default=1e-5, metadata={"help": "AdamW learning rate of the policy and value head."})
    value_lr: float | None = field(default=None, metadata={
        "help": "AdamW learning rate of the value head; None: learning_rate."})
    adam_eps: float = field(default=1e-5, metadata={"help": "AdamW epsilon."})
    clip_range: float = field(default=0.2, metadata={"help": "PPO ratio clip ε of the policy loss."})
    clip_range_value: float = field(default=0.2, metadata={"help": "Clip of the value change in the value loss."})
    vf_coef: float = field(default=0.1, metadata={"help": "Weight of the value loss."})
    ent_coef: float = field(default=0.0, metadata={"help": "Weight of the entropy bonus."})
    gamma: float = field(default=1.0, metadata={"help": "Discount γ of GAE (1 for language models)."})
    lam: float = field(default=0.95, metadata={"help": "GAE λ."})
    kl_estimator: str = field(default="k1", metadata={"help": "Per-token KL estimate in the reward: k1, k2 or k3."})
    init_kl_coef: float = field(default=0.05, metadata={"help": "β, the weight of the KL penalty (initial value)."})
    target_kl: float | None = field(default=None, metadata={
        "help": "Target sequence KL of the adaptive β controller; None keeps β fixed."})
    kl_horizon: int = field(default=10000, metadata={"help": "Horizon (episodes) of the adaptive β controller."})
    max_approx_kl: float | None = field(default=None, metadata={
        "help": "Stop an iteration's update early when the approximate KL to the old policy exceeds this; "
                "None: never."})
    response_length: int = field(default=24, metadata={"help": "Most tokens generated per response."})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature (> 0); log-probs use the same."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling mass."})
    top_k: int = field(default=0, metadata={
        "help": "Sample only among the k likeliest tokens (0: off). Log-probs are the sampler's only at top-p 1, "
                "top-k 0."})
    monitor_oracle: str | None = field(default=None, metadata={
        "help": "module:function also scoring every rollout response, logged as <algorithm>/oracle_score: a ground "
                "truth to watch (the loop's failure warnings read it), never trained on."})
    missing_eos_penalty: float = field(default=1.0, metadata={
        "help": "Subtracted from the score of a response that ends without EOS."})
    generation_backend: str = field(default="hf", metadata={"help": "Rollout generation: hf (generate) or vllm (GPU)."})
    vllm_gpu_memory_utilization: float = field(default=0.3, metadata={"help": "GPU memory share given to vLLM."})
    save_every: int = field(default=10, metadata={"help": "Save the resumable state every this many iterations."})

    WHAT, COMMAND, ERROR = "PPO/GRPO", "ppo", PolicySetupError
    RENAMED: ClassVar[dict[str, str]] = {"ppo_epochs": "epochs"}  # old setting names, accepted on read

    @staticmethod
    def check_algorithm(algorithm: str) -> None:
        """Raise PolicySetupError, in one line, unless `algorithm` is one PolicyConfig runs (PPO or GRPO)."""
        if algorithm == Algorithm.DPO:
            raise PolicySetupError("DPO trains on the labelled pairs without a rollout, so it is its own command: "
                                   "python app.py dpo --db PATH (or loop --algorithm dpo)")
        if algorithm not in ROLLOUT_ALGORITHMS:
            raise PolicySetupError(f"unknown algorithm {algorithm!r}; use {' or '.join(ROLLOUT_ALGORITHMS)}")

    def check(self) -> None:
        """`check_settings`, then this machine: bf16 and the vllm backend need a GPU."""
        super().check()
        import torch

        if self.generation_backend == "vllm" and not torch.cuda.is_available():
            raise PolicySetupError("the vllm backend needs a GPU; use the hf backend on the CPU")

    def check_settings(self) -> None:
        """Raise PolicySetupError, in one line, for an inconsistent setting (no torch)."""
        self.check_algorithm(self.algorithm)
        if self.algorithm == Algorithm.GRPO:
            self._check_grpo()
        elif self.batch_size < 2:
            raise PolicySetupError(f"batch size must be at least 2 (advantages are whitened over it), got "
                                   f"{self.batch_size}")
        if self.num_mini_batches < 1 or self.batch_size % self.num_mini_batches:
            raise PolicySetupError(f"num_mini_batches ({self.num_mini_batches}) must divide the batch size "
                                   f"({self.batch_size})")
        if self.init_kl_coef < 0:
            raise PolicySetupError(f"the KL coefficient β (init_kl_coef) must be 0 or more, got {self.init_kl_coef}")
        if self.kl_estimator not in KL_KINDS:
            raise PolicySetupError(f"unknown KL estimator {self.kl_estimator!r}; use one of {', '.join(KL_KINDS)}")
        if self.temperature <= 0 or not 0 < self.top_p <= 1 or self.top_k < 0:
            raise PolicySetupError(f"PPO samples: temperature must be > 0, top-p in (0, 1] and top-k 0 or more, got "
                                   f"{self.temperature}, {self.top_p}, {self.top_k}")
        if self.response_length < 1 or self.epochs < 1 or self.save_every < 1:
            raise PolicySetupError("response_length, epochs and save_every must be at least 1")
        if self.target_kl is not None and self.target_kl <= 0:
            raise PolicySetupError(f"target KL must be positive, got {self.target_kl}")
        if self.generation_backend not in ("hf", "vllm"):
            raise PolicySetupError(f"unknown generation backend {self.generation_backend!r}; use hf or vllm")
        super().check_settings()

    def _check_grpo(self) -> None:
        if self.group_size < 2:
            raise PolicySetupError(f"group_size must be at least 2 (GRPO compares the responses of a group), got "
                                   f"{self.group_size}")
        if self.num_mini_batches < 1 or self.batch_size % self.num_mini_batches:
            raise PolicySetupError(f"num_mini_batches ({self.num_mini_batches}) must divide the batch size "
                                   f"({self.batch_size} prompts), so that no mini-batch splits a group of "
                                   f"{self.group_size} responses")
        if self.loss_norm not in {n.value for n in LossNorm}:
            raise PolicySetupError(f"unknown loss_norm {self.loss_norm!r}; use {' or '.join(LossNorm)}")

    @property
    def episodes_per_prompt(self) -> int:
        """Responses sampled per prompt in an iteration: 1 under PPO, the group size under GRPO."""
        return self.group_size if self.algorithm == Algorithm.GRPO else 1


@dataclass
class PolicyRun(TrainerRun):
    """What a policy job (PPO or GRPO) does; `settings` holds `PolicyConfig` fields (defaults for those left out).
    Saved as the job's config, so a resumed job repeats it; jobs stored before the rename keep them under `ppo`."""

    iterations: int = field(default=10, metadata={"help": "PPO (or GRPO) iterations to run."})
    reward: str = field(default=RewardSource.RM.value, metadata={
        "help": "rm: the newest reward model; oracle: the scoring function --oracle (benchmarks); functions: the "
                "--reward-functions alone; rm+functions: --rm-weight x the reward model's normalised score plus them.",
        "choices": RewardSource})
    reward_functions: list = field(default_factory=list, metadata={
        "help": 'JSON list of reward functions, e.g. \'[{"name": "math_answer", "weight": 1.0}]\': built-ins '
                "math_answer, exact_match, regex, format, length, json_valid, or module:function called as TRL calls "
                "reward_funcs (docs/rewards.md)."})
    rm_weight: float = field(default=1.0, metadata={
        "help": "weight of the reward model's normalised score beside the reward functions (rm+functions)."})
    oracle: str = field(default=DEFAULT_ORACLE, metadata={
        "help": "module:function scoring a response text, for the oracle reward."})
    policy_id: int | None = field(default=None, metadata={"help": "Policy version to train (None: the newest)."})
    round: int | None = field(default=None, metadata={"help": "Round of the new policy (None: the start's + 1)."})
    settings: dict = field(default_factory=dict, metadata={"help": "PolicyConfig settings."})

    SETTINGS: ClassVar[type] = PolicyConfig
    RENAMED: ClassVar[dict[str, str]] = {"ppo": "settings"}

    def check(self) -> None:
        if self.iterations < 1:
            raise InvalidInput(f"--iterations must be at least 1, got {self.iterations}")
        if self.reward not in {r.value for r in RewardSource}:
            raise InvalidInput(f"unknown reward {self.reward!r}; use {' or '.join(RewardSource)}")
        functions = parse_reward_functions(self.reward_functions, allow_custom=True)
        if RewardSource(self.reward).uses_functions and not functions:
            raise InvalidInput(f"--reward {self.reward} needs --reward-functions, e.g. "
                               '\'[{"name": "math_answer", "weight": 1.0}]\'')
        if functions and not RewardSource(self.reward).uses_functions:
            raise InvalidInput(f"--reward-functions goes with --reward functions or rm+functions, not {self.reward}")

