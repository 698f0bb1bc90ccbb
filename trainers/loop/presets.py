"""The settings a loop starts from, chosen from the project's model: the demo keeps the settings tuned on it (as do
tiny models built from a config, under `TINY_PARAMETERS`); a real model gets LoRA adapters on the policy and on the
reward model, each at a LoRA's learning rate, responses long enough for a chat model's answers to end, and a chat
model's temperature. Every place a loop or a policy run starts (the Train tab, `loop`, `ppo`, the
API's `/start_loop`) starts from `project_preset(store)`; any setting can still be given on top. Reads config and
safetensors headers only (no torch).

    preset = project_preset(store)   # Preset("real model (LoRA)", LoopConfig(lora=True, ...), "SmolLM2: 135M ...")
    print(preset.line)               # what was chosen and why, as the CLI prints it and the Train tab shows it
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from assets import DEMO_POLICY_DIR
from storage import Store
from storage.policies import latest_policy, root_policy

from ..models.chat_format import model_context
from ..models.sizes import model_parameters
from ..policy.config import RewardSource
from .config import REWARD_LR, LoopConfig

DEMO, REAL = "demo", "real model (LoRA)"
TINY_PARAMETERS = 20_000_000  # below: a model built from a config for tests, not a chat model to adapt with LoRA
# Measured on SmolLM2-135M-Instruct at temperature 0.7, 32 of the bench's chat prompts (bench/chat_prompts.py): the
# share of responses that end within 64, 128, 192 and 256 tokens is 12%, 47%, 72% and 88%.
RESPONSE_TOKENS = 256
# RLVR (GRPO on reward functions alone): what bench/rlvr_arithmetic.py measured on SmolLM2-135M-Instruct (arithmetic,
# difficulty 1, LoRA): 4 problems x G 4 an iteration, answers of 48 tokens (a worked answer to a word problem), 2
# passes, lr 2e-4, β 0.02, temperature 0.7, 40 iterations gained +17.2 ± 10.0 points of held-out accuracy over 5 seeds
# (docs/benchmarks.md#training-speed). Each version is evaluated on 64 held-out prompts x 3 samples: 192 samples put
# a pass rate's 95% Wilson interval within ±7.1 points (±8 needs 150).
RLVR_RESPONSE_TOKENS = 48
RLVR_SETTINGS = {"algorithm": "grpo", "rounds": 1, "policy_iterations": 40, "policy_batch_size": 4,
                 "policy_mini_batches": 1, "policy_epochs": 2, "group_size": 4, "policy_lr": 2e-4, "kl_coef": 0.02,
                 "target_kl": None, "temperature": 0.7, "eval_prompts": 64, "eval_samples": 3}


@dataclass(frozen=True)
class Preset:
    """A named starting point for a loop, and one line saying why it fits the project's model."""

    name: str
    config: LoopConfig
    reason: str

    @property
    def line(self) -> str:
        return f"settings: the {self.name!r} preset ({self.reason}); any setting can still be given"


def real_model_config(parameters: int | None, context: int | None) -> LoopConfig:
    """Settings for a real chat model of `parameters` weights and a `context`-token window: LoRA adapters on the
    policy (a full fine-tune at the demo's rates wrecks a pretrained model) at 1e-4 (5e-5 from 1B weights up: adapters
    start at zero and need about ten times a full fine-tune's rate; at 2e-5 three rounds on SmolLM2-135M moved its
    held-out oracle score by less than the noise); the reward model a LoRA adapter and a score head on the policy's
    base, at 1e-3 for one epoch (on SmolLM2 over 3 seeds it gained as much as a full fine-tune at 1e-5, at half the
    peak memory and half the reward phase: docs/benchmarks.md); responses of `RESPONSE_TOKENS` (at most a quarter of
    the context) and temperature 0.7."""
    big = parameters is not None and parameters >= 1_000_000_000
    response = RESPONSE_TOKENS if context is None else max(16, min(RESPONSE_TOKENS, context // 4))
    return LoopConfig(prompts_per_round=48, samples_per_prompt=4, labels_per_round=100, label_decay=1.0,
                      reward_epochs=1, reward_lr=REWARD_LR[True], reward_lora=True, reward_batch_size=8,
                      policy_batch_size=16, policy_mini_batches=2, policy_epochs=2,
                      policy_lr=5e-5 if big else 1e-4, kl_coef=0.05, response_length=response, temperature=0.7,
                      lora=True, sft_lr=None, sft_epochs=3.0)


def rlvr_config(preset: LoopConfig) -> LoopConfig:
    """A preset's settings for a loop on the reward functions alone (RLVR): `RLVR_SETTINGS`, and answers of
    `RLVR_RESPONSE_TOKENS` (or the preset's, when shorter: the demo's)."""
    length = min(RLVR_RESPONSE_TOKENS, preset.response_length)
    return LoopConfig.from_dict({**preset.to_dict(), **RLVR_SETTINGS, "response_length": length})


def loop_config(preset: LoopConfig, values: dict) -> LoopConfig:
    """The loop's settings: `preset`, then `values` (user input) on top; when `values` make the reward the functions
    alone, the preset's RLVR settings (`rlvr_config`) are what they go on top of."""
    if values.get("reward", preset.reward) == RewardSource.FUNCTIONS:
        preset = rlvr_config(preset)
    return preset.updated(values)


def model_preset(policy_path: str | None) -> Preset:
    """The preset for a project whose root policy is `policy_path` (None: no policy yet, the demo's)."""
    if policy_path is None or _is_demo(policy_path):
        return Preset(DEMO, LoopConfig(), "the embedded demo's tuned settings")
    parameters, context = model_parameters(policy_path), model_context(policy_path)
    size = f"{parameters / 1e6:,.0f}M parameters" if parameters is not None else "size unknown"
    if parameters is not None and parameters < TINY_PARAMETERS:
        return Preset(DEMO, LoopConfig(), f"a tiny model, {size}: the demo's settings")
    config = real_model_config(parameters, context)
    return Preset(REAL, config, f"{size}, context {context or 'unknown'}: LoRA, policy LR "
                                f"{config.policy.learning_rate:g}, reward model LoRA at LR "
                                f"{config.reward_model.learning_rate:g}, {config.response_length}-token responses, "
                                f"temperature {config.temperature:g}")


def project_preset(store: Store) -> Preset:
    """The preset for the store's project, chosen from its root (SFT) policy."""
    policy = latest_policy(store)
    return model_preset(root_policy(store, policy).path if policy else None)


def project_presets(store: Store) -> dict[str, LoopConfig]:
    """Every preset the Train tab offers for this project: the demo's, and the real-model one sized to its model."""
    policy = latest_policy(store)
    path = root_policy(store, policy).path if policy else None
    real = model_preset(path)
    if real.name != REAL:
        real_config = real_model_config(model_parameters(path) if path else None, model_context(path) if path else None)
        real = Preset(REAL, real_config, "")
    return {DEMO: LoopConfig(), REAL: real.config}


def _is_demo(policy_path: str) -> bool:
    return Path(policy_path).resolve() == DEMO_POLICY_DIR.resolve()
