"""The win-rate statistics against hand computations: the Wilson interval (ties half), the length-controlled fit
(two groups of judgements: its maximum-likelihood fit solves by hand), Bradley-Terry strengths on a tree and a
consistent cycle of versions, and the bootstrap intervals' properties."""

import math

import numpy as np
import pytest

from labeling.versions.winrate_stats import (
    bootstrap_strengths,
    bradley_terry,
    fit_logistic,
    length_controlled,
    length_difference,
    sigmoid,
    wilson_interval,
    win_rate,
)


def logit(p):
    return math.log(p / (1 - p))


def test_wilson_interval_by_hand():
    # 8 of 10: centre (0.8 + z^2/20) / (1 + z^2/10), half-width z sqrt(0.016 + z^2/400) / (1 + z^2/10), z = 1.96
    z = 1.959963984540054
    centre, half = (0.8 + z * z / 20) / (1 + z * z / 10), z * math.sqrt(0.016 + z * z / 400) / (1 + z * z / 10)
    assert wilson_interval(8, 10) == pytest.approx((centre - half, centre + half))
    assert wilson_interval(8, 10) == pytest.approx((0.4902, 0.9433), abs=1e-4)  # the textbook value
    assert wilson_interval(0, 5)[0] == 0.0 and wilson_interval(5, 5)[1] == 1.0  # it stays inside [0, 1]
    with pytest.raises(ValueError):
        wilson_interval(0, 0)


def test_win_rate_counts_ties_half():
    rate = win_rate([1] * 6 + [0.5] * 4 + [0] * 2)
    assert (rate.wins, rate.ties, rate.losses, rate.n) == (6, 4, 2, 12)
    assert rate.rate == pytest.approx(8 / 12)
    assert (rate.low, rate.high) == pytest.approx(wilson_interval(8, 12))
    assert win_rate([]).rate is None and win_rate([]).n == 0
    with pytest.raises(ValueError, match="1 \\(win\\), 0.5 \\(tie\\) or 0"):
        win_rate([0.7])


def test_length_difference():
    assert length_difference(30, 10) == 0.5 and length_difference(10, 30) == -0.5
    assert length_difference(None, 10) == 0.0 and length_difference(0, 0) == 0.0


def test_length_controlled_win_rate_of_two_groups_by_hand():
    # longer by d = +0.5: 8 wins of 10; shorter by d = -0.5: 5 of 10. The fit is saturated, so
    # theta + gamma/2 = logit(0.8) = ln 4 and theta - gamma/2 = logit(0.5) = 0: theta = ln 2, gamma = ln 4
    results = [1] * 8 + [0] * 2 + [1] * 5 + [0] * 5
    lc = length_controlled(results, [0.5] * 10 + [-0.5] * 10, ridge=0.0)
    assert lc.rate == pytest.approx(2 / 3) and lc.length_coef == pytest.approx(math.log(4))
    # the Wald interval from the Fisher information: var(theta) = (1/(n1 p1 q1) + 1/(n2 p2 q2)) / 4
    se = math.sqrt((1 / (10 * 0.8 * 0.2) + 1 / (10 * 0.5 * 0.5)) / 4)
    z = 1.959963984540054
    assert (lc.low, lc.high) == pytest.approx((sigmoid(math.log(2) - z * se), sigmoid(math.log(2) + z * se)))
    assert win_rate(results).rate == pytest.approx(0.65)


def test_style_control_takes_the_length_advantage_away():
    # a version that mostly wins when it writes longer: 18 of 20 when longer, 1 of 4 (a quarter) when shorter
    results = [1] * 18 + [0] * 2 + [1, 0, 0, 0]
    lc = length_controlled(results, [0.5] * 20 + [-0.5] * 4, ridge=0.0)
    theta = (logit(0.9) + logit(0.25)) / 2
    assert lc.rate == pytest.approx(sigmoid(theta)) and lc.rate == pytest.approx(0.634, abs=1e-3)
    assert win_rate(results).rate == pytest.approx(19 / 24)  # 79% raw, 63% at equal lengths
    assert lc.length_coef > 0


def test_without_length_differences_the_length_controlled_rate_is_the_win_rate():
    lc = length_controlled([1, 1, 1, 0, 0.5], [0.0] * 5)
    assert lc.rate == pytest.approx(0.7, abs=2e-3) and lc.length_coef == pytest.approx(0.0)
    assert length_controlled([], []).rate is None
    with pytest.raises(ValueError):
        length_controlled([1], [])


def test_bradley_terry_on_a_tree_and_a_consistent_cycle_by_hand():
    # v1 beats v0 3 of 4: s1 = logit(3/4) = ln 3; v2 against v1: 2 wins and 2 ties = 3/4: s2 = s1 + ln 3
    tree = [(1, 0, 1.0)] * 3 + [(1, 0, 0.0)] + [(2, 1, 1.0)] * 2 + [(2, 1, 0.5)] * 2
    assert bradley_terry(3, tree, ridge=0.0) == pytest.approx([0.0, math.log(3), 2 * math.log(3)])
    # v2 against v0 9 of 10 = sigmoid(2 ln 3): consistent with the tree, so nothing moves
    cycle = tree + [(2, 0, 1.0)] * 9 + [(2, 0, 0.0)]
    assert bradley_terry(3, cycle, ridge=0.0) == pytest.approx([0.0, math.log(3), 2 * math.log(3)])
    # the anchor can be any item; strengths are relative to it
    assert bradley_terry(3, tree, anchor=1, ridge=0.0) == pytest.approx([-math.log(3), 0.0, math.log(3)])


def test_an_unjoined_version_has_no_strength_and_a_clean_sweep_stays_finite():
    strengths = bradley_terry(4, [(1, 0, 1.0), (1, 0, 0.0)])
    assert strengths[1] == pytest.approx(0.0) and np.isnan(strengths[2]) and np.isnan(strengths[3])
    swept = bradley_terry(2, [(1, 0, 1.0)] * 24)
    assert np.isfinite(swept[1]) and sigmoid(swept[1]) > 0.99
    assert bradley_terry(3, [(1, 0, 1.0)] * 3 + [(1, 0, 0.0)])[1] < math.log(3)  # the ridge shrinks a little


def test_bootstrap_intervals_hold_the_estimate_and_narrow_with_more_judgements():
    few = [(1, 0, 1.0)] * 6 + [(1, 0, 0.0)] * 2
    many = few * 10
    estimate = bradley_terry(2, many)
    low, high = bootstrap_strengths(2, many, seed=3)
    assert low[1] < estimate[1] < high[1] and (low[0], high[0]) == (0.0, 0.0)
    few_low, few_high = bootstrap_strengths(2, few, seed=3)
    assert few_high[1] - few_low[1] > high[1] - low[1]
    assert np.array_equal(np.array(bootstrap_strengths(2, many, seed=3)), np.array([low, high]))  # seeded
    assert np.isnan(bootstrap_strengths(2, many, rounds=0)[0]).all()


def test_fit_logistic_matches_the_closed_form_of_one_proportion():
    fit = fit_logistic(np.ones((5, 1)), [1, 1, 1, 0, 0], ridge=0.0)
    assert fit.coef[0] == pytest.approx(logit(0.6)) and fit.cov[0, 0] == pytest.approx(1 / (5 * 0.6 * 0.4))
