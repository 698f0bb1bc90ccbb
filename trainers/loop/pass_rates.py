"""Each reward function's held-out pass rate per policy version: the share of the version's evaluation samples the
function scored above 0 (for `math_answer`, the held-out accuracy; the `pass_rate` of the training metrics, on held-out
prompts), with its 95% Wilson interval, and the change from one version to another with Newcombe's interval of a
difference (`labeling.versions.winrate_stats`), as the round line and the result line show them. Torch-free: the serving
process reads it for the Train tab's result card.

    rates = pass_rates(store, policy.id, ["math_answer"])     # {"math_answer": PassRate("math_answer", 27, 192)}
    change_text(before["math_answer"], after["math_answer"])
    # 'math_answer 14% [10%, 20%] → 31% [25%, 38%] (+17 points [+9, +25]; 192 held-out samples)'
"""

from __future__ import annotations

from dataclasses import dataclass

from labeling.versions.winrate_stats import difference_interval, wilson_interval
from storage import Store
from storage.generations import FUNCTION_SCORE_PREFIX, eval_samples

from ..reward.function_specs import parse_reward_functions


@dataclass(frozen=True)
class PassRate:
    """A reward function's passes (values above 0) among the `n` evaluation samples it scored."""

    label: str
    passed: int
    n: int

    @property
    def rate(self) -> float:
        return self.passed / self.n

    def text(self) -> str:
        low, high = wilson_interval(self.passed, self.n)
        return f"{self.rate:.0%} [{low:.0%}, {high:.0%}]"


def function_labels(settings: dict) -> list[str]:
    """The labels of a loop's reward functions, from its stored settings (none without functions)."""
    return [spec.label for spec in parse_reward_functions(settings.get("reward_functions") or [], allow_custom=True)]


def pass_rates(store: Store, policy_id: int, labels: list[str]) -> dict[str, PassRate]:
    """Each of `labels`' pass rate on the version's stored evaluation samples (a label no sample has is left out)."""
    samples = eval_samples(store, policy_id)
    rates = {}
    for label in labels:
        values = [s[FUNCTION_SCORE_PREFIX + label] for s in samples if FUNCTION_SCORE_PREFIX + label in s]
        if values:
            rates[label] = PassRate(label, sum(value > 0 for value in values), len(values))
    return rates


def change_text(before: PassRate | None, after: PassRate) -> str:
    """`label before [interval] → after [interval] (the change in points [interval]; n held-out samples)`, or the one
    rate when there is no before."""
    if before is None:
        return f"{after.label} {after.text()} ({after.n} held-out samples)"
    low, high = difference_interval(before.passed, before.n, after.passed, after.n)
    samples = f"{after.n}" if after.n == before.n else f"{before.n} and {after.n}"
    return (f"{after.label} {before.text()} → {after.text()} ({(after.rate - before.rate) * 100:+.0f} points "
            f"[{low * 100:+.0f}, {high * 100:+.0f}]; {samples} held-out samples)")
