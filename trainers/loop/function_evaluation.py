"""The reward functions on a version's held-out evaluation samples: each function's value is stored beside the
sample's other scores (`fn:<label>`), each function's mean logged per round as `round/fn/<label>` (for `math_answer`:
the held-out accuracy); the Leaderboard tab, `leaderboard` and `status` show them per version
(`storage.generations.function_scores`). Samples evaluated before (by an earlier job, with other functions) are
scored for the functions they lack; nothing is sampled again.

    means = evaluate_functions(store, policy, config)     # {"math_answer": 0.41, ...}; {} without functions
"""

from __future__ import annotations

from storage import Store
from storage.generations import FUNCTION_SCORE_PREFIX, add_scores, eval_sample_ids, eval_samples
from storage.metrics import log_metrics
from storage.prompts import list_prompts
from storage.types import Policy

from ..policy.config import RewardSource
from ..reward.function_specs import parse_reward_functions
from ..reward.functions import RewardFunctions, prompt_key
from .config import LoopConfig


def evaluate_functions(store: Store, policy: Policy, config: LoopConfig) -> dict[str, float]:
    """Each reward function's mean over `policy`'s evaluation samples (those with an opinion), scoring the samples
    that lack it; {} when the loop has no reward functions or the version no evaluation samples."""
    if not RewardSource(config.reward).uses_functions:
        return {}
    specs = parse_reward_functions(config.reward_functions, allow_custom=True)
    samples = eval_samples(store, policy.id)
    missing = [spec for spec in specs if not any(FUNCTION_SCORE_PREFIX + spec.label in s for s in samples)]
    if missing and samples:
        _score_samples(store, policy, missing, samples)
        samples = eval_samples(store, policy.id)
    means = {}
    for spec in specs:
        values = [s[FUNCTION_SCORE_PREFIX + spec.label] for s in samples if FUNCTION_SCORE_PREFIX + spec.label in s]
        if values:
            means[spec.label] = sum(values) / len(values)
    return means


def _score_samples(store: Store, policy: Policy, specs, samples: list[dict]) -> None:
    from ..models.loading import load_tokenizer

    prompts = {prompt.text: prompt for prompt in list_prompts(store)}
    contents = [prompts[s["prompt"]].content for s in samples]
    references = {prompt_key(p.content): p.reference for p in prompts.values() if p.reference}
    tokenizer = load_tokenizer(policy.path)
    entries = [{"name": s.name, "weight": s.weight, "label": s.label, **s.options} for s in specs]
    functions = RewardFunctions.build(entries, references,
                                      encode=lambda text: tokenizer(text, add_special_tokens=False)["input_ids"])
    functions(contents, [s["text"] for s in samples])
    ids = eval_sample_ids(store, policy.id)
    add_scores(store, {generation_id: {FUNCTION_SCORE_PREFIX + label: values[i]
                                       for label, values in functions.latest.items() if values[i] is not None}
                       for i, generation_id in enumerate(ids)})


def log_function_scores(store: Store, job_id: int, step: int, policy: Policy, config: LoopConfig) -> None:
    """Evaluate the functions on `policy`'s held-out samples and log each mean as `round/fn/<label>` at `step`."""
    means = evaluate_functions(store, policy, config)
    if means:
        log_metrics(store, job_id, step, {f"round/fn/{label}": mean for label, mean in means.items()})
