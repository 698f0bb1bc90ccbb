"""Held-out evaluation of a policy version: its samples of the evaluation prompts, drawn once and stored (source
`eval`) with their reward-model and oracle scores, for the Samples tab, the round's oracle score and the win-rate
pairs (`trainers.loop.winrate_pairs`).

The evaluation's size is `eval_prompts` held-out prompts x `eval_samples` samples (default 16 x 2 = 32; a store
with fewer held-out prompts is evaluated on all of them). The prompts are a seeded choice among the held-out ones,
so every version answers the same prompts and their samples can be compared prompt by prompt. A version evaluated
once (by this job, an earlier one, or a killed worker) is never sampled again: its stored samples are reused.

    score = evaluate_policy(store, policy, config, with_oracle=True)    # mean oracle score, or None
"""

from __future__ import annotations

import math
import random
from typing import Callable

import numpy as np

from storage import Store
from storage.generations import EVAL_SOURCE, NewGeneration, add_generations, eval_samples
from storage.reward_models import list_reward_models
from storage.types import Policy, Prompt

from ..models.chat_format import PromptBudget, prompt_budget
from .config import LoopConfig
from .prompt_use import prompt_use

EVAL_SEED = 12345
BATCH_TOKENS = 64 * 48  # response tokens of a batch at most (`eval_batch_rows`)
Progress = Callable[[int, int], None]


def evaluation_prompts(store: Store, config: LoopConfig, budget: PromptBudget | None = None) -> list[Prompt]:
    """The held-out prompts every version is evaluated on: a seeded choice of `eval_prompts` of those not excluded
    and within `budget` (all when fewer), in id order."""
    heldout = prompt_use(store, budget, heldout=True).used
    if len(heldout) <= config.eval_prompts:
        return heldout
    chosen = {p.id for p in random.Random(EVAL_SEED).sample(heldout, config.eval_prompts)}
    return [p for p in heldout if p.id in chosen]


def evaluate_policy(store: Store, policy: Policy, config: LoopConfig, with_oracle: bool,
                    progress: Progress | None = None) -> float | None:
    """The mean oracle score of `policy`'s evaluation samples (None without an oracle), drawing them if the version
    has none yet (`progress(done, total)` hears the samples drawn)."""
    stored = ensure_eval_samples(store, policy, config, with_oracle, progress)
    values = [sample["oracle"] for sample in stored if "oracle" in sample]
    return float(np.mean(values)) if with_oracle and values else None


def ensure_eval_samples(store: Store, policy: Policy, config: LoopConfig, with_oracle: bool,
                        progress: Progress | None = None) -> list[dict]:
    """The version's evaluation samples: the stored ones, else newly drawn."""
    return eval_samples(store, policy.id) or draw_eval_samples(store, policy, config, with_oracle, progress)


def eval_batch_rows(config: LoopConfig) -> int:
    """The rows sampled at once: 64 (the generator's batch), fewer for answers longer than 48 tokens, so that
    progress is reported every few seconds on a CPU (SmolLM2-135M on 2 cores: a batch in well under 10 s)."""
    return max(8, min(64, BATCH_TOKENS // config.response_length))


def draw_eval_samples(store: Store, policy: Policy, config: LoopConfig, with_oracle: bool,
                      progress: Progress | None = None) -> list[dict]:
    """Sample the evaluation prompts with `policy` (`progress(samples drawn, samples)` after each batch); store the
    samples and their scores in one transaction."""
    from labeling.queue.synthetic import load_scorer

    from ..models.generation import HFGenerator
    from ..models.loading import default_device, load_sampler_policy, load_tokenizer
    from ..reward.scorer import RewardScorer

    prompts = evaluation_prompts(store, config, prompt_budget(policy.path, config.response_length))
    if not prompts:
        return []
    generator = HFGenerator(load_sampler_policy(policy.path, config.bf16), load_tokenizer(policy.path))
    groups = generator.generate([p.content for p in prompts], config.eval_samples, config.response_length,
                                config.temperature, config.top_p, seed=EVAL_SEED, top_k=config.top_k,
                                batch_size=eval_batch_rows(config), progress=progress)
    rows = [NewGeneration(prompt.id, s.text, policy_id=policy.id, token_count=s.num_tokens, seed=EVAL_SEED,
                          ended_with_eos=s.ended_with_eos, source=EVAL_SOURCE)
            for prompt, group in zip(prompts, groups, strict=True) for s in group]
    texts = [(prompt.content, s.text) for prompt, group in zip(prompts, groups, strict=True) for s in group]
    scores: list[dict[str, float]] = [{} for _ in rows]
    if list_reward_models(store):
        scorer = RewardScorer.from_store(store, device=default_device())
        rewards = scorer.score([p for p, _ in texts], [t for _, t in texts])
        for named, reward in zip(scores, rewards.tolist(), strict=True):
            if not math.isnan(reward):  # NaN: too long for the reward model's context, so not scored (no score)
                named["reward"] = reward
    if with_oracle:
        oracle = load_scorer(config.oracle)
        for named, (_, text) in zip(scores, texts, strict=True):
            named["oracle"] = oracle(text)
    add_generations(store, rows, scores=scores)
    return eval_samples(store, policy.id)
