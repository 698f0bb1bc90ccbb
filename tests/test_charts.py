"""Charts of the Curves tab (app.curves.charts): smoothing, downsampling, one color per round, reference lines, and a
one-point round drawn as a dot."""

import json

import pytest


def test_figures_smooth_downsample_and_color_by_round():
    from app.curves.charts import (
        PANEL_POINTS,
        align_rounds,
        optimiser_figure,
        reward_figure,
        round_color,
        rounds_figure,
        segments,
    )
    from storage.curves import Series

    steps = list(range(1, 20_001))
    kl = segments(Series("ppo/kl", steps, [float(i % 7) for i in steps], [1] * 10_000 + [2] * 10_000))
    raw = json.loads(optimiser_figure({"ppo/kl": kl}, 0.0, "ppo").plot)
    lines = [t for t in raw["data"] if t["xaxis"] == "x2"]  # ppo/kl is the second panel
    assert [(t["name"], t["line"]["color"], t["showlegend"]) for t in lines] == [("round 1", "#2563eb", True),
                                                                                  ("round 2", "#ea580c", True)]
    assert sum(len(t["x"]) for t in lines) <= PANEL_POINTS and lines[1]["x"][-1] == 20_000
    assert sum(a["text"] == "no data yet" for a in raw["layout"]["annotations"]) == 11  # the other PPO panels
    assert raw["config"]["toImageButtonOptions"]["filename"] == "ppo"

    smooth = json.loads(reward_figure(align_rounds({"reward/loss": kl, "reward/accuracy": kl}), 0.9, "reward").plot)
    loss = [t for t in smooth["data"] if t["xaxis"] == "x1"]
    assert [t["name"] for t in loss] == ["round 1 · raw", "round 1", "round 2 · raw", "round 2"]
    assert loss[0]["line"]["color"] == round_color(1, raw=True) and loss[0]["hoverinfo"] == "skip"
    assert loss[2]["x"][0] == 1 and loss[2]["x"][-1] == 10_000  # steps within the round
    accuracy = [t for t in smooth["data"] if t["xaxis"] == "x2"]
    assert [t["showlegend"] for t in accuracy if t["name"].startswith("round")] == [False] * 4  # listed once
    assert accuracy[-1]["name"] == "chance" and accuracy[-1]["y"] == [0.5, 0.5]
    # 70% of the way to white from #2563eb: 37 + 0.7 * 218 = 190 (be), 99 + 0.7 * 156 = 208 (d0), 235 + 0.7 * 20 = 249
    assert round_color(1, raw=True) == "#bed0f9"

    rounds = [{"round": g, "summary": {"labels": 10 * g, "oracle_score": 0.5 + 0.1 * g}} for g in (1, 2, 3)]
    spec = json.loads(rounds_figure(rounds, 0.4, "rounds").plot)
    assert [t["type"] for t in spec["data"] if t["xaxis"] == "x1"] == ["bar"]
    oracle = [t for t in spec["data"] if t["xaxis"] == "x5"]
    assert oracle[0]["y"] == pytest.approx([0.6, 0.7, 0.8]) and oracle[1]["name"] == "SFT policy"
    assert oracle[1]["y"] == [0.4, 0.4]


def test_the_rounds_win_rates_carry_their_intervals_as_error_bars():
    from app.curves.charts import ROUND_PANELS, rounds_figure

    rounds = [{"round": 1, "summary": {"winrate": 0.6, "winrate_low": 0.4, "winrate_high": 0.75}},
              {"round": 2, "summary": {"winrate": 0.7, "winrate_low": 0.5, "winrate_high": 0.85, "lc_winrate": 0.65,
                                       "lc_winrate_low": 0.45, "lc_winrate_high": 0.8}}]
    spec = json.loads(rounds_figure(rounds, None, "rounds").plot)
    axis = f"x{list(ROUND_PANELS).index('winrate') + 1}"
    line, reference = [t for t in spec["data"] if t["xaxis"] == axis]
    assert line["y"] == [0.6, 0.7] and line["error_y"]["array"] == pytest.approx([0.15, 0.15])
    assert line["error_y"]["arrayminus"] == pytest.approx([0.2, 0.2]) and not line["error_y"]["symmetric"]
    assert reference["y"] == [0.5, 0.5] and reference["name"] == "as good as SFT"
    [controlled, _] = [t for t in spec["data"] if t["xaxis"] == f"x{list(ROUND_PANELS).index('lc_winrate') + 1}"]
    assert controlled["x"] == [2] and controlled["error_y"]["arrayminus"] == pytest.approx([0.2])


def test_a_round_of_one_point_is_a_dot():
    """A short reward training logs once per round: a one-point line would draw nothing, so it is a marker."""
    from app.curves.charts import align_rounds, reward_figure, round_color, segments
    from storage.curves import Series

    loss = segments(Series("reward/loss", [10, 20, 21], [0.7, 0.6, 0.5], [1, 2, 2]))
    spec = json.loads(reward_figure(align_rounds({"reward/loss": loss}), 0.6, "reward").plot)
    lines = [t for t in spec["data"] if t["xaxis"] == "x1"]
    assert [(t["name"], t["mode"]) for t in lines] == [("round 1", "lines+markers"), ("round 2 · raw", "lines"),
                                                       ("round 2", "lines")]
    assert lines[0]["x"] == [10] and lines[0]["y"] == [0.7] and lines[0]["marker"]["color"] == round_color(1)
    assert "marker" not in lines[2] and lines[2]["x"] == [10, 11]  # round 2 counts from where round 1 ended


def test_each_reward_function_gets_a_mean_and_a_pass_rate_panel():
    from app.curves.charts import GRPO_PANELS, optimiser_figure, segments
    from storage.curves import Series
    from trainers.policy.config import Algorithm

    steps = [1, 2, 3]
    group = {name: segments(Series(name, steps, [0.2, 0.4, 0.6], [1, 1, 1]))
             for name in ("grpo/math_answer/mean", "grpo/math_answer/pass_rate", "grpo/kl")}
    raw = json.loads(optimiser_figure(group, 0.0, "grpo", Algorithm.GRPO).plot)
    titles = [a["text"] for a in raw["layout"]["annotations"] if a["text"].startswith("<b>")]
    assert titles[len(GRPO_PANELS):] == ["<b>math_answer: mean</b>", "<b>math_answer: pass rate</b>"]
    panel = len(GRPO_PANELS) + 1  # the first function panel
    assert [t["y"] for t in raw["data"] if t["xaxis"] == f"x{panel}"] == [[0.2, 0.4, 0.6]]
