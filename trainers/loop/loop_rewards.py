"""What a loop's rounds maximise: the reward model (`rm`), the reward functions alone (`functions`: RLVR, no labels
and no reward model, so a round samples, optimises and evaluates) or both (`rm+functions`), and the check of those
settings (torch-free: the Train tab checks them too). Custom `module:function` entries are allowed here; the studio
refuses them, as any code name in any setting, before a job is started (`app.train.code_names`)."""

from __future__ import annotations

from storage.errors import InvalidInput

from ..policy.config import Algorithm, RewardSource
from ..reward.function_specs import parse_reward_functions

LOOP_REWARDS = (RewardSource.RM, RewardSource.FUNCTIONS, RewardSource.RM_FUNCTIONS)


def check_loop_reward(config) -> None:
    """InvalidInput (one line) when a loop config's `reward`, `reward_functions` and algorithm do not go together."""
    if config.reward not in {reward.value for reward in LOOP_REWARDS}:
        raise InvalidInput(f"reward must be one of {', '.join(LOOP_REWARDS)}, got {config.reward!r}")
    functions = parse_reward_functions(config.reward_functions, allow_custom=True)
    uses_functions = RewardSource(config.reward).uses_functions
    if uses_functions and not functions:
        raise InvalidInput(f"reward {config.reward} needs reward_functions, e.g. "
                           '[{"name": "math_answer", "weight": 1.0}]')
    if functions and not uses_functions:
        raise InvalidInput("reward_functions go with reward functions or rm+functions; set reward")
    if uses_functions and config.algorithm == Algorithm.DPO:
        raise InvalidInput("reward functions score rollouts, which DPO has none of; use algorithm ppo or grpo")


def rlvr_line(config) -> str:
    """What a loop on the reward functions alone does, in one line, as `loop` prints it when it starts."""
    names = ", ".join(spec.label for spec in parse_reward_functions(config.reward_functions, allow_custom=True))
    rounds = f"{config.rounds} round{'s' * (config.rounds != 1)}"
    group = f" x G {config.policy.group_size}" if config.algorithm == Algorithm.GRPO else ""
    return (f"reward: {names} alone (RLVR: no labels, pairs or reward model); {rounds} of {config.policy.iterations} "
            f"{config.algorithm.upper()} iterations ({config.policy.batch_size} prompts{group}, answers of up to "
            f"{config.response_length} tokens); each version's pass rate on {config.eval_prompts} held-out prompts x "
            f"{config.eval_samples} samples (fewer prompts when fewer are held out)")
