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


# ---- per-phase rules in absolute terms ----------------------------------------------------------------------------

def phase(round=2, **series):
    steps = list(range(11, 11 + len(next(iter(series.values())))))
    return d.Phase(round, steps, series)


HEALTHY_PHASE = dict(kl=[0.0, 0.3, 0.6, 0.9, 1.0], response_length=[8.0, 8.5, 9.0, 9.0, 9.5],
                     score=[0.1, 0.4, 0.8, 1.0, 1.2], oracle_score=[-0.1, 0.0, 0.05, 0.1, 0.1],
                     entropy=[2.0, 1.9, 1.9, 1.8, 1.8], eos_rate=[1.0, 1.0, 0.9, 1.0, 1.0],
                     oracle_correlation=[0.5, 0.6, 0.4, 0.5, 0.55])


def test_a_healthy_phase_fires_nothing():
    assert d.phase_findings(phase(**HEALTHY_PHASE)) == []
    assert d.phase_findings(d.Phase(1, [], {})) == []


def test_kl_per_token_fires_at_the_first_step_it_held_beyond_the_level():
    # per token: 0, 0.5, 0.75, 0.75, 0.75; held over 2 steps (their minimum): 0, 0, 0.5, 0.75 (> 0.5 at step 14)
    [found] = d.kl_findings(phase(kl=[0.0, 4.0, 6.0, 6.0, 6.0], response_length=[8.0] * 5))
    assert (found.rule, found.round, found.step) == ("kl_per_token", 2, 14)
    assert "above 0.75 nats per response token" in found.detail


def test_kl_growing_five_fold_within_a_phase():
    # per token: 0.1, 0.1, 0.25, 0.5, 1.0; held: 0.1, 0.1, 0.1, 0.25, 0.5; base 0.1: 5-fold and >= 0.3 at step 15
    [found] = d.kl_findings(phase(kl=[0.8, 0.8, 2.0, 4.0, 8.0], response_length=[8.0] * 5))
    assert (found.rule, found.step) == ("kl_growth", 15) and "5-fold" in found.detail


def test_one_spike_of_kl_does_not_fire():
    assert d.kl_findings(phase(kl=[0.5, 0.5, 9.0, 0.5, 0.5], response_length=[10.0] * 5)) == []


def test_score_far_beyond_the_validated_range():
    found = d.score_beyond_range(phase(score=[1.0, 2.0, 4.0, 6.0]))  # held: 1, 1, 2, 4
    assert found.step == 14 and "score is 4.0" in found.detail
    assert d.score_beyond_range(phase(score=[1.0, 2.0, 4.0, 2.0])) is None  # 3.0 is not beyond 3


def test_oracle_falling_within_a_phase_while_the_score_rises():
    # oracle held (max of 2 steps): 0.2, 0.2, 0.2, -0.2 (start 0.2; fell by >= 0.3 at step 14); score rises
    found = d.oracle_falls(phase(oracle_score=[0.2, 0.2, -0.2, -0.2], score=[0.0, 0.5, 1.0, 2.0]))
    assert found.rule == "oracle_falls" and found.step == 14 and "from 0.20 to -0.20" in found.detail
    assert d.oracle_falls(phase(oracle_score=[0.2, 0.2, -0.2, -0.2], score=[2.0, 1.5, 1.0, 0.0])) is None


def test_reward_model_ranking_the_policys_samples_unlike_the_oracle():
    # means so far: -0.3, -0.4, -0.5, -0.5, -0.5 (judged from the 5th step, step 15)
    flipped = d.oracle_uncorrelated(phase(oracle_correlation=[-0.3, -0.5, -0.7, -0.5, -0.5]))
    assert (flipped.rule, flipped.round, flipped.step) == ("oracle_uncorrelated", 2, 15)
    assert "correlated -0.50 on average" in flipped.detail and "wrong way round" in flipped.detail
    # means so far: 0.1, 0.0, 0.05/3, 0.05/4, 0.05/5 = +0.01
    coin = d.oracle_uncorrelated(phase(oracle_correlation=[0.1, -0.1, 0.05, 0.0, 0.0]))
    assert coin.step == 15 and "+0.01" in coin.detail and "hardly better than a coin" in coin.detail
    # means so far: 0.6, 0.55, 0.5, 0.45, 0.4, 0.25: held at 0.3 or above until the 6th step
    assert d.oracle_uncorrelated(phase(oracle_correlation=[0.6, 0.5, 0.4, 0.3, 0.2, -0.5])).step == 16


def test_one_poor_rollout_too_few_steps_or_no_oracle_fire_no_correlation_warning():
    # means so far: 0.6, 0.65, 0.6, 0.4, 0.42, 0.45
    assert d.oracle_uncorrelated(phase(oracle_correlation=[0.6, 0.7, 0.5, -0.2, 0.5, 0.6])) is None
    assert d.oracle_uncorrelated(phase(oracle_correlation=[-0.9] * 4)) is None  # 4 steps: not judged yet
    assert d.oracle_uncorrelated(phase(score=[0.1, 0.2, 0.3, 0.4, 0.5])) is None  # no oracle: nothing to compare


def test_held_out_oracle_falling_across_rounds():
    found = d.held_out_oracle_falls(3, 30, before=0.1, after=-0.4, score_rise=1.5)
    assert (found.round, found.step) == (3, 30) and "from 0.10 to -0.40" in found.detail
    assert d.held_out_oracle_falls(3, 30, before=0.1, after=-0.1, score_rise=1.5) is None  # a drop of 0.2: noise
    assert d.held_out_oracle_falls(3, 30, before=0.1, after=-0.4, score_rise=-0.2) is None


def test_entropy_length_and_eos_collapse():
    rules = {f.rule: f.step for f in d.sampling_findings(phase(
        entropy=[1.0, 0.15, 0.05, 0.05], response_length=[6.0, 3.0, 1.0, 1.0], eos_rate=[0.5, 0.3, 0.1, 0.0]))}
    # held (max of 2 steps): entropy 1, 1, 0.15, 0.05; length 6, 6, 3, 1; eos 0.5, 0.5, 0.3, 0.1
    assert rules == {"entropy_floor": 14, "length_collapse": 14, "never_ending": 14}


def test_reward_model_on_too_few_validation_pairs_names_the_count():
    [few] = d.reward_model_findings(1, 40, 1.0, 2)
    assert few.rule == "validation_too_small" and "2 held-out pair(s)" in few.detail and (few.round, few.step) == (1, 40)
    [chance] = d.reward_model_findings(2, 80, 0.55, 50)
    assert chance.rule == "reward_model_near_chance" and (chance.round, chance.step) == (2, 80)
    assert d.reward_model_findings(2, 80, 0.7, 50) == []
    assert d.reward_model_findings(2, 80, 0.5, 30) == []  # 30 pairs: enough to train on, too few to judge chance


def test_audit_agreement_below_the_threshold():
    [low] = d.audit_findings(3, 0.5, 10, 0.6)
    assert low.rule == "audit_agreement_low" and "50%" in low.detail and "10 labels" in low.detail
    assert d.audit_findings(3, 0.7, 10, 0.6) == [] and d.audit_findings(3, 0.2, 4, 0.6) == []
    assert d.audit_findings(3, None, 0, 0.6) == []
