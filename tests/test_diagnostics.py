"""Failure-warning rules on synthetic metric series, and the smoothing/downsampling helpers, checked by hand."""

import numpy as np
import pytest

from trainers.loop import diagnostics as d

RNG = np.random.default_rng(0)


def noisy(values, scale=0.02):
    values = np.asarray(values, dtype=float)
    return values + RNG.normal(0, scale, len(values))


def test_quarter_means_by_hand():
    # 10 points -> quarters of 3, 3, 2, 2: [0,1,2] [3,4,5] [6,7] [8,9]
    assert d.quarter_means(range(10)).tolist() == [1.0, 4.0, 6.5, 8.5]


def test_kl_rising_steadily_is_a_runaway():
    finding = d.kl_runaway(noisy(np.linspace(0.2, 8.0, 80)))
    assert finding is not None and finding.rule == "kl_runaway"
    assert "nats" in finding.detail and "β" in finding.advice


def test_kl_that_levels_off_is_not_a_runaway():
    # rises fast, then flat: quarter means ~[2.4, 5.6, 6.0, 6.0]; the last quarter no longer rises
    kl = np.concatenate([np.linspace(0.5, 6.0, 30), np.full(50, 6.0)])
    assert d.kl_runaway(noisy(kl, 0.01)) is None


def test_small_or_short_kl_is_no_runaway():
    assert d.kl_runaway(np.linspace(0.01, 0.5, 80)) is None  # rising, but under 1 nat
    assert d.kl_runaway([0.1, 1, 2, 4, 8, 16, 32]) is None  # 7 points: too few to judge


def test_noisy_flat_kl_is_no_runaway():
    assert d.kl_runaway(noisy(np.full(100, 3.0), 0.3)) is None


def test_entropy_collapse_by_hand():
    # first tenth mean 2.0, last tenth mean 0.5: 0.5 <= 0.2 * 2.0 is false -> no warning
    entropy = np.concatenate([np.full(10, 2.0), np.linspace(2.0, 0.5, 80), np.full(10, 0.5)])
    assert d.entropy_collapse(entropy) is None
    # last tenth mean 0.4 = 0.2 * 2.0 -> collapse
    entropy = np.concatenate([np.full(10, 2.0), np.linspace(2.0, 0.4, 80), np.full(10, 0.4)])
    finding = d.entropy_collapse(entropy)
    assert finding is not None and "2.00 to 0.40" in finding.detail and "-80%" in finding.detail


def test_healthy_entropy_decline_is_fine():
    assert d.entropy_collapse(noisy(np.linspace(2.0, 1.4, 60))) is None


def test_reward_climbing_while_kl_explodes_is_hacking():
    score = noisy(np.linspace(-0.5, 2.5, 80), 0.1)
    kl = noisy(np.geomspace(0.3, 20.0, 80))
    finding = d.reward_hacking(score, kl)
    assert finding is not None and finding.rule == "reward_hacking"
    # diagnose reports hacking instead of a second, separate KL warning
    rules = [f.rule for f in d.diagnose({"ppo/score": score, "ppo/kl": kl})]
    assert rules == ["reward_hacking"]


def test_reward_climbing_with_bounded_kl_is_not_hacking():
    score = noisy(np.linspace(-0.5, 2.5, 80), 0.1)
    kl = noisy(np.linspace(1.0, 2.5, 80))  # grows 2.5-fold only
    assert d.reward_hacking(score, kl) is None


def test_kl_exploding_while_score_is_flat_is_a_runaway_not_hacking():
    score = noisy(np.zeros(80), 0.3)
    kl = np.geomspace(0.3, 20.0, 80)
    assert d.reward_hacking(score, kl) is None
    assert [f.rule for f in d.diagnose({"ppo/score": score, "ppo/kl": kl})] == ["kl_runaway"]


def test_oracle_falling_while_reward_rises():
    finding = d.oracle_disagrees([0.1, 0.5, 0.9, 1.4], [0.3, 0.6, 0.5, 0.4])
    assert finding is not None and "0.50 to 1.40" in finding.detail and "0.60 to 0.40" in finding.detail
    assert d.oracle_disagrees([0.1, 0.5, 0.9], [0.3, 0.4, 0.6]) is None  # both rise: the loop works
    assert d.oracle_disagrees([0.1, 0.9], [0.5, 0.2]) is None  # two rounds: too few


def test_reward_model_accuracy_near_and_below_chance():
    assert d.reward_model_near_chance([0.5, 0.7, 0.55]).title == "Reward model near chance"
    below = d.reward_model_near_chance([0.4])
    assert below.title == "Reward model below chance" and "right way round" in below.advice
    assert d.reward_model_near_chance([0.5, 0.62]) is None
    assert d.reward_model_near_chance([]) is None


def test_diagnose_on_a_healthy_run_says_nothing():
    series = {
        "ppo/kl": noisy(np.linspace(0.1, 0.8, 100)),
        "ppo/entropy": noisy(np.linspace(2.0, 1.6, 100)),
        "ppo/score": noisy(np.linspace(0.0, 1.0, 100), 0.1),
        "reward/val_accuracy": [0.6, 0.72, 0.78],
        "round/score": [0.1, 0.4, 0.7],
        "round/oracle_score": [0.2, 0.5, 0.6],
    }
    assert d.diagnose(series) == []
    assert d.diagnose({}) == []


def test_ema_by_hand():
    # w = 0.5: s1 = 0.5 -> 0.5/0.5 = 1; s2 = 0.25 + 1 = 1.25 -> 1.25/0.75 = 5/3
    assert d.ema([1.0, 2.0], 0.5) == pytest.approx([1.0, 5 / 3])
    assert d.ema([3.0, 3.0, 3.0], 0.9) == pytest.approx([3.0, 3.0, 3.0])  # debiased: no pull towards 0
    assert d.ema([1.0, 5.0], 0.0).tolist() == [1.0, 5.0]
    with pytest.raises(ValueError):
        d.ema([1.0], 1.0)


def test_downsample_keeps_extremes_and_order():
    steps = np.arange(1000)
    values = np.zeros(1000)
    values[437] = 9.0  # a spike a stride would miss
    values[901] = -4.0
    s, v = d.downsample(steps, values, 100)
    assert len(s) <= 100 and np.all(np.diff(s) > 0)
    assert 9.0 in v and -4.0 in v and 437 in s and 901 in s
    assert s[0] == 0 and s[-1] == 999  # the line still starts and ends where the series does
    s, v = d.downsample(steps[:50], values[:50], 100)
    assert len(s) == 50


@pytest.mark.parametrize("n", [101, 1000, 1234, 9999])
def test_downsample_bounds_on_any_length(n):
    values = RNG.normal(size=n)
    s, v = d.downsample(np.arange(n), values, 100)
    assert len(s) <= 100 and np.all(np.diff(s) > 0)
    assert values.min() in v and values.max() in v and s[0] == 0 and s[-1] == n - 1
    assert np.array_equal(values[s], v)


def test_a_grpo_jobs_series_are_read_like_ppos():
    """GRPO logs the same quantities under grpo/ (grpo/kl the per-response KL, as ppo/kl): the same rules fire."""
    kl, entropy = noisy(np.linspace(0.2, 8.0, 80)), np.concatenate([np.full(10, 2.0), np.full(90, 0.3)])
    assert [f.rule for f in d.diagnose({"grpo/kl": kl, "grpo/entropy": entropy, "grpo/score": np.zeros(80)})] == \
        ["kl_runaway", "entropy_collapse"]
    assert d.diagnose({"grpo/kl_token": kl}) == []  # the loss's per-token k3 is not the sequence KL
    assert d.optimiser_prefix(["ppo/kl", "reward/loss"]) == "ppo/" and d.optimiser_prefix(["grpo/kl"]) == "grpo/"
