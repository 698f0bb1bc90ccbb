"""The time-left estimate (`trainers.loop.time_left`): hand cases, and a demo-like loop's readings, on which the pace
alone grew through the first reward phase while the estimate holds back, then only falls."""

import pytest

from trainers.loop.time_left import POLICY_START, time_left


def test_a_job_of_one_phase_goes_by_its_pace_once_it_has_gone_a_little_way():
    assert time_left(80, 0.4) == pytest.approx(120)
    assert time_left(5, 0.01) is None  # too early to tell
    assert time_left(3, None) is None and time_left(90, 1.0) is None


def test_a_loop_estimates_from_its_policy_phase_then_from_the_time_its_rounds_took():
    assert time_left(60, 0.16, rounds=3) is None  # round 1's reward phase: no guide to the rest
    assert time_left(64, POLICY_START / 3, rounds=3) == pytest.approx(320)  # 64 s for half a round at that pace
    assert time_left(100, 0.4, rounds=3, round_ends=[90]) == pytest.approx(80 + 90)  # 90 s a round; 10 s into round 2
    # round 2 runs over its 90 s: what its fraction leaves at 90 s a round (0.65 x 90), never 0 or less
    assert time_left(200, 0.45, rounds=3, round_ends=[90]) == pytest.approx(0.65 * 90 + 90)
    assert time_left(300, 0.99, rounds=3, round_ends=[90, 180, 270]) == pytest.approx(300 * 0.01 / 0.99)  # judging


def demo_readings(reward_s=(60, 78, 83), rounds=3, every_s=2.0):
    """(elapsed, progress, round ends so far) read every `every_s` of a demo-like loop, whose reports are placed as
    `trainers.loop.rounds` places them: 4 s of sampling and labels, the reward phase (`reward_s`, longer each round as
    it trains on all labels so far; 20 reports), 16 s of PPO (10 iterations), 4 s of evaluation. Also the total."""
    t, reports, ends = 0.0, [(0.0, 0.0)], []
    for r in range(rounds):
        reward = [(reward_s[r] / 20, 0.3 + (POLICY_START - 0.3) * i / 20) for i in range(1, 21)]
        policy = [(1.6, POLICY_START + (0.95 - POLICY_START) * i / 10) for i in range(1, 11)]
        for took, fraction in [(0, 0.0), (3, 0.1), (1, 0.3), *reward, *policy, (3, 0.95), (1, 0.99)]:
            t += took
            reports.append((t, (r + fraction) / rounds))
        ends.append(t)
    steps = int(t / every_s)
    return [(k * every_s, max(p for at_s, p in reports if at_s <= k * every_s), [e for e in ends if e <= k * every_s])
            for k in range(steps)], t


def test_on_steady_progress_the_estimate_waits_then_falls_where_the_pace_alone_grew():
    readings, total = demo_readings()
    pace = [elapsed * (1 - p) / p for elapsed, p, _ in readings if 0.03 <= p < 0.5 / 3]  # round 1's reward phase
    assert pace[-1] > 3 * pace[0]  # what the walkthrough saw: the estimate grew through round 1's reward phase
    estimates = [(elapsed, time_left(elapsed, p, 3, ends)) for elapsed, p, ends in readings]
    shown = [(elapsed, left) for elapsed, left in estimates if left is not None]
    first = shown[0][0]
    assert first >= 60 and all(left is None for elapsed, left in estimates if elapsed < first)  # round 1's policy phase
    rises = [(b - a) / a for (_, a), (_, b) in zip(shown, shown[1:], strict=False) if b > a]
    assert max(rises, default=0) < 0.1  # a round that ran longer than the ones before raises it a little, once
    assert len(rises) <= 2
    after_round_1 = [(elapsed, left) for elapsed, left in shown if elapsed > total / 3]
    assert all(abs(left - (total - elapsed)) < 0.15 * total for elapsed, left in after_round_1)  # within 45 s of 293
