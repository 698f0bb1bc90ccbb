"""Plain-words warnings when training curves show a known failure, and the series helpers the charts use.

Pure functions over metric series (sequences of floats in step order); no torch, so the UI process imports this.
Most rules compare the means of a series' four quarters (q1..q4, in step order), which ignores single spikes:

- KL rising without bound: the KL to the reference rose in every quarter, q4 >= 2 x q1, q4 >= 1 nat, and the
  last quarter still rose at least half as fast as the quarters before it (no levelling off);
- entropy collapse: the mean entropy of the last tenth of the run is at most 20% of the first tenth's;
- reward hacking: the reward-model score rose (q4 - q1 > half the series' standard deviation) while the KL grew
  at least 4-fold to 1 nat or more; or, over the last three rounds, the score rose while the oracle score fell;
- reward model near chance: its latest validation accuracy is below 60%.

    findings = diagnose({"ppo/kl": kl, "ppo/entropy": entropy, "ppo/score": score, "reward/val_accuracy": acc})

A GRPO job's series (`grpo/kl`, `grpo/entropy`, `grpo/score`: the same names and units) are read the same way, and so
are a DPO job's (`dpo/kl`, `dpo/entropy` of its samples; it has no reward-model score).

The per-phase rules a loop checks after each phase are in `phase_rules`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

MIN_POINTS = 8  # shorter series are too noisy to judge
KL_FLOOR = 1.0  # nats: below this a rising KL is no concern yet
KL_GROWTH = 2.0
HACKING_KL_GROWTH = 4.0
ENTROPY_KEPT = 0.2
CHANCE_ACCURACY = 0.6
ORACLE_ROUNDS = 3
@dataclass(frozen=True)
class Finding:
    """One warning: a stable rule id, a headline, what the numbers show and what to do about it."""

    rule: str
    title: str
    detail: str
    advice: str
    round: int | None = None  # where the rule fired (per-phase rules; None for the whole-job rules)
    step: int | None = None


def quarter_means(values: Sequence[float]) -> np.ndarray:
    """Means of the four consecutive quarters of a series (the first quarters take the remainder)."""
    return np.array([chunk.mean() for chunk in np.array_split(np.asarray(values, dtype=float), 4)])


def kl_runaway(kl: Sequence[float]) -> Finding | None:
    """KL to the reference rising quarter after quarter with no sign of levelling off."""
    if len(kl) < MIN_POINTS:
        return None
    q = quarter_means(kl)
    still_rising = q[3] - q[2] >= 0.5 * (q[3] - q[0]) / 3
    if np.all(np.diff(q) > 0) and q[3] >= KL_GROWTH * max(q[0], 0.0) and q[3] >= KL_FLOOR and still_rising:
        return Finding(
            "kl_runaway", "KL is rising without bound",
            f"The KL divergence to the reference model rose in every quarter of the run, from {q[0]:.2f} to "
            f"{q[3]:.2f} nats on average, and is still climbing.",
            "The policy is drifting away from what the SFT model would write. Raise β (the KL coefficient), set a "
            "target KL for the adaptive controller, or lower the PPO (or GRPO) learning rate (`policy_lr`).")
    return None


def entropy_collapse(entropy: Sequence[float]) -> Finding | None:
    """The policy's entropy fell to a small fraction of where it started."""
    if len(entropy) < MIN_POINTS:
        return None
    values = np.asarray(entropy, dtype=float)
    tenth = max(1, len(values) // 10)
    start, end = values[:tenth].mean(), values[-tenth:].mean()
    if start > 0 and end <= ENTROPY_KEPT * start:
        return Finding(
            "entropy_collapse", "Entropy collapse",
            f"The policy's per-token entropy fell from {start:.2f} to {end:.2f} nats ({end / start - 1:+.0%}): it "
            "now writes nearly the same tokens every time.",
            "Samples lose their variety and the reward model sees nothing new. Raise the entropy bonus or β, or "
            "lower the PPO (or GRPO) learning rate (`policy_lr`).")
    return None


def reward_hacking(score: Sequence[float], kl: Sequence[float]) -> Finding | None:
    """The reward-model score climbs while the KL to the reference explodes."""
    if len(score) < MIN_POINTS or len(kl) < MIN_POINTS:
        return None
    s, k = quarter_means(score), quarter_means(kl)
    score_rose = s[3] - s[0] > 0.5 * float(np.std(score))
    kl_exploded = k[3] >= HACKING_KL_GROWTH * max(k[0], 0.0) and k[3] >= KL_FLOOR
    if score_rose and kl_exploded:
        return Finding(
            "reward_hacking", "Possible reward hacking",
            f"The reward-model score rose from {s[0]:.2f} to {s[3]:.2f} while the KL to the reference grew "
            f"{k[3] / max(k[0], 1e-9):.0f}-fold ({k[0]:.2f} → {k[3]:.2f} nats).",
            "The policy may be exploiting the reward model's mistakes rather than getting better: read its samples "
            "in the Samples tab, compare the oracle score if there is one, and raise β.")
    return None


def oracle_disagrees(round_scores: Sequence[float], oracle_scores: Sequence[float]) -> Finding | None:
    """Over the last rounds the reward-model score rose while the oracle (true) score fell."""
    n = min(len(round_scores), len(oracle_scores))
    if n < ORACLE_ROUNDS:
        return None
    score, oracle = list(round_scores)[-ORACLE_ROUNDS:], list(oracle_scores)[-ORACLE_ROUNDS:]
    if score[-1] > score[0] and oracle[-1] < oracle[0]:
        return Finding(
            "oracle_disagrees", "Reward hacking: the oracle disagrees",
            f"Over the last {ORACLE_ROUNDS} rounds the reward-model score rose from {score[0]:.2f} to {score[-1]:.2f} "
            f"while the oracle score fell from {oracle[0]:.2f} to {oracle[-1]:.2f}.",
            "The policy is learning what the reward model gets wrong. Collect more labels on its newest samples "
            "(the disagreement selector helps), raise β, or run fewer PPO iterations per round.")
    return None


def reward_model_near_chance(val_accuracy: Sequence[float]) -> Finding | None:
    """The reward model's latest validation accuracy is hardly better than a coin."""
    if len(val_accuracy) == 0:
        return None
    latest = float(val_accuracy[-1])
    if latest >= CHANCE_ACCURACY:
        return None
    below = latest < 0.45
    return Finding(
        "reward_model_near_chance", "Reward model below chance" if below else "Reward model near chance",
        f"The reward model picks the preferred response of held-out pairs {latest:.0%} of the time; a coin does 50%.",
        ("Check that labels are stored the right way round (first vs second) and that annotators agree. "
         if below else "") + "Collect more labels, check annotator agreement in the Samples tab, or train the "
        "reward model longer before trusting PPO's gains.")


def optimiser_prefix(names) -> str:
    """Where the policy optimiser's series are: `grpo/` or `dpo/` for a GRPO or DPO job's metric names, else `ppo/`
    (DPO's `kl` and `entropy` are measured on samples of the policy, in the same units)."""
    names = list(names)
    return next((prefix for prefix in ("grpo/", "dpo/") if any(name.startswith(prefix) for name in names)), "ppo/")


def diagnose(series: Mapping[str, Sequence[float]]) -> list[Finding]:
    """Every rule that fires on the series given by metric name (`ppo/kl`, `ppo/entropy`, `ppo/score`, or GRPO's
    `grpo/...` of the same names, `reward/val_accuracy`, `round/score`, `round/oracle_score`); missing series are
    skipped."""
    def get(name: str) -> Sequence[float]:
        return series.get(name, [])

    optimiser = optimiser_prefix(series)
    hacking = reward_hacking(get(f"{optimiser}score"), get(f"{optimiser}kl"))
    findings = [
        hacking or kl_runaway(get(f"{optimiser}kl")),  # the hacking warning already tells of the KL
        entropy_collapse(get(f"{optimiser}entropy")),
        oracle_disagrees(get("round/score"), get("round/oracle_score")),
        reward_model_near_chance(get("reward/val_accuracy")),
    ]
    return [f for f in findings if f is not None]


def ema(values: Sequence[float], smoothing: float) -> np.ndarray:
    """Debiased exponential moving average (as TensorBoard): s_t = w s_{t-1} + (1-w) x_t, divided by 1 - w^t."""
    values = np.asarray(values, dtype=float)
    if not 0.0 <= smoothing < 1.0:
        raise ValueError(f"smoothing must be in [0, 1), got {smoothing}")
    if smoothing == 0.0 or len(values) == 0:
        return values.copy()
    out = np.empty_like(values)
    last = 0.0
    for i, x in enumerate(values):
        last = smoothing * last + (1.0 - smoothing) * x
        out[i] = last / (1.0 - smoothing ** (i + 1))
    return out


def downsample(steps: Sequence[float], values: Sequence[float], max_points: int) -> tuple[np.ndarray, np.ndarray]:
    """At most `max_points` points that keep the shape: the first and the last, and the min and max of each of
    (max_points - 2) / 2 equal buckets in between."""
    steps, values = np.asarray(steps), np.asarray(values, dtype=float)
    if len(values) <= max_points:
        return steps, values
    inner = values[1:-1]
    size = math.ceil(len(inner) / ((max_points - 2) // 2))
    buckets = math.ceil(len(inner) / size)
    padded = np.full(buckets * size, np.nan)
    padded[:len(inner)] = inner
    grid = padded.reshape(buckets, size)  # (buckets, size); only the last bucket may hold NaN padding
    offsets = np.arange(buckets) * size + 1
    keep = np.concatenate([[0, len(values) - 1], offsets + np.nanargmin(grid, axis=1),
                           offsets + np.nanargmax(grid, axis=1)])
    index = np.unique(keep)
    return steps[index], values[index]
