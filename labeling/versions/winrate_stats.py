"""The statistics of people's judgements between policy versions, as pure functions (numpy only, no SQL).

A judgement's result for the version judged is 1 (preferred), 0 (the other response preferred) or 1/2 (a tie, or
"both bad": no winner), as the reward model counts ties.

- `win_rate`: wins, ties and losses, the win rate with ties counted half, and its 95% **Wilson score interval** over
  the n judgements (Wilson 1927; it stays inside [0, 1] and is sound at small n, where the normal interval is not).
- `difference_interval`: Newcombe's interval of the difference of two proportions from their Wilson intervals (a
  reward function's held-out pass rate before and after a round: `trainers.loop.pass_rates`).
- `length_controlled`: the win rate with answer length regressed out, Chatbot Arena's "style control": a logistic
  (Bradley-Terry) fit P(version preferred) = sigmoid(theta + gamma x d), d = (len_v - len_o) / (len_v + len_o) the
  pair's relative length difference; the length-controlled win rate is sigmoid(theta), the win rate of two answers of
  equal length, with a 95% Wald interval on theta (from the fit's Fisher information). A policy that wins only by
  writing longer answers has a high win rate and a length-controlled one near 1/2.
- `bradley_terry` / `bootstrap_strengths`: Bradley-Terry strengths of every version from all cross-version judgements
  (P(i preferred to j) = sigmoid(s_i - s_j)), the anchor (the SFT policy) fixed at 0, and percentile intervals over
  bootstrap resamples of the judgements (Arena's leaderboard). A version without a path of judgements to the anchor
  has no strength (NaN).

Every fit is Newton's method on the soft-target logistic log-likelihood (ties as targets 1/2) plus `ridge`/2 x |b|^2,
a tiny prior that keeps a version that won every judgement finite (without it its strength is infinite).

    win_rate([1, 1, 0.5, 0])                     # WinRate(wins=2, ties=1, losses=1, n=4, rate=0.625, low=.., high=..)
    length_controlled([1, 0, 1], [0.2, -0.1, 0.3])
    bradley_terry(3, [(1, 0, 1.0), (2, 1, 0.5)])  # strengths, anchor 0 at 0
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

Z95 = 1.959963984540054  # the standard normal's 97.5% quantile
RIDGE = 0.01  # the fits' L2 prior: negligible against a handful of judgements, but a clean sweep stays finite
BOOTSTRAP_ROUNDS = 200


@dataclass(frozen=True)
class WinRate:
    """Judgements of one version against one opponent: counts, win rate (ties half) and its 95% Wilson interval."""

    wins: int
    ties: int
    losses: int
    n: int
    rate: float | None
    low: float | None
    high: float | None


@dataclass(frozen=True)
class LengthControlled:
    """The win rate at equal answer lengths, its 95% interval, and the length coefficient gamma (logits per unit of
    relative length difference: > 0 when longer answers win)."""

    rate: float | None
    low: float | None
    high: float | None
    length_coef: float | None


@dataclass(frozen=True)
class Fit:
    """A logistic fit: its coefficients and their covariance (the inverse of the penalised Fisher information)."""

    coef: np.ndarray
    cov: np.ndarray


def sigmoid(z):
    """1 / (1 + e^-z), without overflow."""
    return 0.5 * (1.0 + np.tanh(0.5 * np.asarray(z, dtype=float)))


def wilson_interval(score: float, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion `score` / `n` (score may hold halves: ties)."""
    if n <= 0:
        raise ValueError("a proportion of 0 judgements has no interval")
    p, z2 = score / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def difference_interval(score_a: float, n_a: int, score_b: float, n_b: int, z: float = Z95) -> tuple[float, float]:
    """Newcombe's 95% interval (his "hybrid score" method 10, 1998) of the difference p_b - p_a of two independent
    proportions, from each one's Wilson interval [l, u]: d - sqrt((p_b - l_b)^2 + (u_a - p_a)^2) to
    d + sqrt((u_b - p_b)^2 + (p_a - l_a)^2)."""
    p_a, p_b = score_a / n_a, score_b / n_b
    (low_a, high_a), (low_b, high_b) = wilson_interval(score_a, n_a, z), wilson_interval(score_b, n_b, z)
    d = p_b - p_a
    return d - math.hypot(p_b - low_b, high_a - p_a), d + math.hypot(high_b - p_b, p_a - low_a)


def win_rate(results: Sequence[float]) -> WinRate:
    """Counts, win rate (ties half) and 95% Wilson interval of results 1 (win), 1/2 (tie) and 0 (loss)."""
    values = [float(r) for r in results]
    if any(r not in (0.0, 0.5, 1.0) for r in values):
        raise ValueError("a judgement's result is 1 (win), 0.5 (tie) or 0 (loss)")
    wins, ties, n = values.count(1.0), values.count(0.5), len(values)
    if not n:
        return WinRate(0, 0, 0, 0, None, None, None)
    score = wins + ties / 2
    return WinRate(wins, ties, n - wins - ties, n, score / n, *wilson_interval(score, n))


def length_difference(tokens: int | None, other_tokens: int | None) -> float:
    """(a - b) / (a + b) of two responses' lengths: in [-1, 1], 0 when either is unknown or both are empty."""
    if tokens is None or other_tokens is None or tokens + other_tokens == 0:
        return 0.0
    return (tokens - other_tokens) / (tokens + other_tokens)


def fit_logistic(features, targets, ridge: float = RIDGE, max_iter: int = 100, tol: float = 1e-10) -> Fit:
    """Minimise -sum[y log sigmoid(x.b) + (1 - y) log sigmoid(-x.b)] + ridge/2 |b|^2 by Newton's method with step
    halving; `features` (n, k), soft `targets` (n,) in [0, 1]."""
    x, y = np.asarray(features, dtype=float), np.asarray(targets, dtype=float)  # (n, k), (n,)
    beta, eye = np.zeros(x.shape[1]), np.eye(x.shape[1])

    def loss(b: np.ndarray) -> float:
        z = x @ b
        return float(np.sum(y * np.logaddexp(0, -z) + (1 - y) * np.logaddexp(0, z)) + ridge / 2 * b @ b)

    def hessian(b: np.ndarray) -> np.ndarray:
        p = sigmoid(x @ b)
        return (x.T * (p * (1 - p))) @ x + ridge * eye  # (k, k)

    for _ in range(max_iter):
        gradient = x.T @ (sigmoid(x @ beta) - y) + ridge * beta  # (k,)
        step = np.linalg.pinv(hessian(beta)) @ gradient
        current, t = loss(beta), 1.0
        while loss(beta - t * step) > current + 1e-12 and t > 1e-8:
            t /= 2
        beta = beta - t * step
        if np.max(np.abs(t * step), initial=0.0) < tol:
            break
    return Fit(beta, np.linalg.pinv(hessian(beta)))


def length_controlled(results: Sequence[float], length_diffs: Sequence[float], ridge: float = RIDGE,
                      z: float = Z95) -> LengthControlled:
    """The style-controlled win rate: sigmoid(theta) of the fit sigmoid(theta + gamma x d) to the results (ties
    half), with a Wald interval sigmoid(theta +- z se(theta))."""
    if len(results) != len(length_diffs):
        raise ValueError(f"{len(length_diffs)} length differences for {len(results)} results")
    if not len(results):
        return LengthControlled(None, None, None, None)
    features = np.column_stack([np.ones(len(results)), np.asarray(length_diffs, dtype=float)])  # (n, 2)
    fit = fit_logistic(features, results, ridge)
    theta, se = fit.coef[0], math.sqrt(max(fit.cov[0, 0], 0.0))
    return LengthControlled(float(sigmoid(theta)), float(sigmoid(theta - z * se)), float(sigmoid(theta + z * se)),
                            float(fit.coef[1]))


Judgement = tuple[int, int, float]  # (item i, item j, result for i: 1, 1/2 or 0)


def connected_to(anchor: int, items: int, judgements: Sequence[Judgement]) -> np.ndarray:
    """Which items a path of judgements joins to `anchor` (the anchor itself included), as a boolean mask."""
    reached, frontier = {anchor}, [anchor]
    neighbours: dict[int, set[int]] = {}
    for i, j, _ in judgements:
        neighbours.setdefault(i, set()).add(j)
        neighbours.setdefault(j, set()).add(i)
    while frontier:
        for other in neighbours.get(frontier.pop(), ()):
            if other not in reached:
                reached.add(other)
                frontier.append(other)
    return np.isin(np.arange(items), sorted(reached))


def bradley_terry(items: int, judgements: Sequence[Judgement], anchor: int = 0, ridge: float = RIDGE) -> np.ndarray:
    """Bradley-Terry strengths (logits) of `items` from judgements (i, j, result for i), anchor at 0; NaN for an
    item no judgements join to the anchor."""
    joined = connected_to(anchor, items, judgements)
    free = [k for k in range(items) if joined[k] and k != anchor]
    strengths = np.where(joined, 0.0, np.nan)
    used = [(i, j, r) for i, j, r in judgements if joined[i] and joined[j] and i != j]
    if not free or not used:
        return strengths
    column = {k: c for c, k in enumerate(free)}
    features = np.zeros((len(used), len(free)))  # (n, free items): +1 for i, -1 for j, the anchor has no column
    for row, (i, j, _) in enumerate(used):
        if i in column:
            features[row, column[i]] += 1.0
        if j in column:
            features[row, column[j]] -= 1.0
    fit = fit_logistic(features, [r for _, _, r in used], ridge)
    strengths[free] = fit.coef
    return strengths


def bootstrap_strengths(items: int, judgements: Sequence[Judgement], anchor: int = 0,
                        rounds: int = BOOTSTRAP_ROUNDS, seed: int = 0, ridge: float = RIDGE
                        ) -> tuple[np.ndarray, np.ndarray]:
    """2.5% and 97.5% percentiles of each item's strength over `rounds` resamples (with replacement) of the
    judgements; NaN where the full data gives no strength (and everywhere for 0 rounds). A resample that leaves an
    item unjoined counts for nothing for that item."""
    full = bradley_terry(items, judgements, anchor, ridge)
    if rounds < 1:
        return np.full(items, np.nan), np.full(items, np.nan)
    if not judgements:
        return full.copy(), full.copy()
    rng = np.random.default_rng(seed)
    draws = np.array([bradley_terry(items, [judgements[k] for k in rng.integers(0, len(judgements), len(judgements))],
                                    anchor, ridge) for _ in range(rounds)])  # (rounds, items)
    low, high = np.full(items, np.nan), np.full(items, np.nan)
    for k in np.flatnonzero(~np.isnan(full)):
        values = draws[:, k][~np.isnan(draws[:, k])]
        if len(values):
            low[k], high[k] = np.percentile(values, [2.5, 97.5])
    return low, high
