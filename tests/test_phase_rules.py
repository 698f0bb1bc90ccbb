"""The per-phase failure-warning rules on synthetic phases, checked by hand (the step where each fires)."""

from trainers.loop import phase_rules as d


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
    # per token: 0, 1.0, 1.25, 1.25, 1.25; held over 2 steps (their minimum): 0, 0, 1.0, 1.25 (> 1.0 at step 14)
    [found] = d.kl_findings(phase(kl=[0.0, 8.0, 10.0, 10.0, 10.0], response_length=[8.0] * 5))
    assert (found.rule, found.round, found.step) == ("kl_per_token", 2, 14)
    assert "above 1.25 nats per response token" in found.detail


def test_a_healthy_demo_loops_second_round_does_not_fire_on_kl():
    # the Train tab's default demo loop in one walkthrough (oracle score 0.06 -> 0.69, v3 69% against SFT): round 2's
    # KL per token climbs to 0.80 and 0.84; under the level of 0.5 before, it fired
    kl = [1.34, 1.94, 1.94, 2.94, 3.87, 2.81, 2.89, 5.28, 5.35, 4.47]
    length = [8.0, 7.72, 8.0, 8.62, 7.78, 6.97, 7.0, 6.62, 6.34, 6.31]
    assert d.kl_findings(phase(kl=kl, response_length=length)) == []


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
    assert few.rule == "validation_too_small" and "2 held-out pair(s)" in few.detail
    assert (few.round, few.step) == (1, 40)
    [chance] = d.reward_model_findings(2, 80, 0.55, 50)
    assert chance.rule == "reward_model_near_chance" and (chance.round, chance.step) == (2, 80)
    assert d.reward_model_findings(2, 80, 0.7, 50) == []
    assert d.reward_model_findings(2, 80, 0.5, 30) == []  # 30 pairs: enough to train on, too few to judge chance


def test_check_agreement_below_the_threshold():
    [low] = d.check_pair_findings(3, 0.5, 10, 0.6)
    assert low.rule == "check_agreement_low" and "50%" in low.detail and "10 labels" in low.detail
    assert d.check_pair_findings(3, 0.7, 10, 0.6) == [] and d.check_pair_findings(3, 0.2, 4, 0.6) == []
    assert d.check_pair_findings(3, None, 0, 0.6) == []


def test_people_preferring_the_sft_policy_while_the_score_rose():
    # 5 of 24 judgements (ties half): 21% [9%, 40%], wholly below 50%
    below = d.winrate_below_sft(3, "v3", 5 / 24, 0.09, 0.40, 24, score_rise=0.8)
    assert (below.rule, below.round) == ("winrate_below_sft", 3)
    assert "24 blind judgements" in below.detail and "v3" in below.detail and "21%" in below.detail
    assert d.winrate_below_sft(3, "v3", 0.40, 0.25, 0.56, 24, 0.8) is None  # the interval reaches 50%
    assert d.winrate_below_sft(3, "v3", 0.10, 0.02, 0.40, 19, 0.8) is None  # too few judgements
    assert d.winrate_below_sft(3, "v3", 0.21, 0.09, 0.40, 24, -0.1) is None  # the score did not rise
    assert d.winrate_below_sft(3, "v3", None, None, None, 0, 0.8) is None
