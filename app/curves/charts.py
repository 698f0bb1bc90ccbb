"""Charts of the Curves tab: metric series split into rounds, drawn as Plotly figures written as plain dicts.

The browser draws them with the plotly.js that Gradio ships (no plotly package, no torch, no drawing in this
process). A chart panel carries at most PANEL_POINTS points: long series are smoothed on every point, then
downsampled (min and max per bucket), so pages stay responsive on large stores. Each round keeps one color in every
chart; `uirevision` keeps a chart's zoom and hidden rounds across live refreshes.
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass, replace
from itertools import groupby

import numpy as np
from gradio.components.plot import PlotData

from labeling.queue.check_pairs import DEFAULT_MIN_AGREEMENT
from storage.curves import Series
from trainers.loop.diagnostics import downsample, ema
from trainers.policy.config import Algorithm

REWARD_PANELS = {"reward/loss": "Loss", "reward/accuracy": "Accuracy (training batches)",
                 "reward/val_accuracy": "Validation accuracy", "reward/val_loss": "Validation loss"}
OPTIMISER_HEAD = {"score": "Reward-model score", "kl": "KL to the SFT policy (nats)", "kl_coef": "KL coefficient β",
                  "entropy": "Entropy (nats/token)", "clipfrac": "Clip fraction", "approx_kl": "Approx. KL per update"}
OPTIMISER_TAIL = {"response_length": "Response length (tokens)", "eos_rate": "EOS rate",
                  "episodes_per_s": "Episodes per second"}
PPO_PANELS = {f"ppo/{k}": v for k, v in {**OPTIMISER_HEAD, "policy_loss": "Policy loss", "value_loss": "Value loss",
                                        "explained_variance": "Explained variance", **OPTIMISER_TAIL}.items()}
GRPO_PANELS = {f"grpo/{k}": v for k, v in {**OPTIMISER_HEAD, "loss": "GRPO loss",
                                          "kl_token": "k3 KL per token (in the loss)",
                                          "zero_variance_groups": "Groups with equal rewards",
                                          **OPTIMISER_TAIL}.items()}
DPO_PANELS = {f"dpo/{k}": v for k, v in {
    "loss": "DPO loss", "margin": "Implicit reward margin (chosen − rejected)", "accuracy": "Implicit reward accuracy",
    "chosen_reward": "Chosen: β·log(π/π_ref)", "rejected_reward": "Rejected: β·log(π/π_ref)",
    "logp_chosen": "Chosen log-prob", "logp_rejected": "Rejected log-prob", "kl": "KL to the SFT policy (on samples)",
    "entropy": "Entropy (nats/token, on samples)", "response_length": "Response length (samples)",
    "eos_rate": "EOS rate (samples)", "learning_rate": "Learning rate"}.items()}
SFT_PANELS = {"sft/loss": "Loss (answer tokens)", "sft/token_accuracy": "Token accuracy (answer tokens)",
              "sft/heldout_loss": "Held-out loss (demonstrations never trained on)",
              "sft/heldout_token_accuracy": "Held-out token accuracy"}  # an sft job's (trainers.policy.sft)
# no value-function panels for GRPO; DPO has no rollout, its samples are measured a few times a round
OPTIMISER_PANELS = {Algorithm.PPO: PPO_PANELS, Algorithm.GRPO: GRPO_PANELS, Algorithm.DPO: DPO_PANELS}
STEP_NAME = {Algorithm.DPO: "step"}  # what one point of the optimiser's series is (else "iteration")
ROUND_PANELS = {"labels": "Labels collected", "reward_val_accuracy": "Reward model val. accuracy",
                "score": "Mean reward-model score", "kl": "KL to the SFT policy", "oracle_score": "Oracle score",
                "check_agreement": "Check pairs: people agree with the RM",
                "winrate": "Preferred to SFT (win rate, 95% CI)",
                "lc_winrate": "Length-controlled win rate vs SFT"}
INTERVAL_PANELS = ("winrate", "lc_winrate")  # drawn with error bars from `<key>_low` and `<key>_high`
PANEL_POINTS = 1000  # points sent per chart panel (shared by its lines), after smoothing
MIN_LINE_POINTS = 100
COLORS = ["#2563eb", "#ea580c", "#16a34a", "#9333ea", "#dc2626", "#0891b2", "#ca8a04", "#db2777"]
INK, MUTED = "#1f2937", "#6b7280"


# ---- series split into rounds -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Segment:
    """The points of one metric in one round; `offset` turns job steps into steps within the round."""

    round: int | None
    label: str  # "round 2", or for points in no finished round: "in progress", "unfinished round" or "this job"
    steps: np.ndarray
    values: np.ndarray
    offset: int


def segments(series: Series, open_label: str = "in progress") -> list[Segment]:
    """Consecutive runs of points belonging to one round, in step order; `open_label` names points in none."""
    out, start = [], 0
    for round_, run in groupby(series.rounds):
        n = len(list(run))
        label = open_label if round_ is None else f"round {round_}"
        out.append(Segment(round_, label, np.asarray(series.steps[start:start + n]),
                           np.asarray(series.values[start:start + n], dtype=float), 0))
        start += n
    return out


def round_order(round_: int | None) -> float:
    """Sort key: rounds in order, points in no finished round last."""
    return math.inf if round_ is None else round_


def align_rounds(group: dict[str, list[Segment]]) -> dict[str, list[Segment]]:
    """Set every segment's offset so that a round's steps count from where the group's previous rounds ended (the
    last step any of its metrics logged before): the same offset for every metric, even one a round did not log."""
    last: dict[int | None, int] = {}
    for segs in group.values():
        for s in segs:
            last[s.round] = max(last.get(s.round, 0), int(s.steps[-1]))
    offsets, previous = {}, 0
    for round_ in sorted(last, key=round_order):
        offsets[round_], previous = previous, max(previous, last[round_])
    return {name: [replace(s, offset=offsets[s.round]) for s in segs] for name, segs in group.items()}


# ---- figures -------------------------------------------------------------------------------------------------------

def round_color(round_: int | None, raw: bool = False) -> str:
    """The same color for a round in every chart; raw (unsmoothed) lines in a light tint of it."""
    color = INK if round_ is None else COLORS[(round_ - 1) % len(COLORS)]
    if not raw:
        return color
    r, g, b = (int(color[i:i + 2], 16) for i in (1, 3, 5))
    return "#" + "".join(f"{round(c + (255 - c) * 0.7):02x}" for c in (r, g, b))


def significant(values, digits: int = 6) -> np.ndarray:
    """Values rounded to `digits` significant digits of the series' largest magnitude: no float noise such as
    0.09999999999999998 from smoothing a constant (which the chart would zoom into), and shorter JSON."""
    values = np.asarray(values, dtype=float)
    largest = float(np.max(np.abs(values))) if len(values) else 0.0
    if largest == 0.0 or not math.isfinite(largest):
        return values
    return np.round(values, digits - math.ceil(math.log10(largest)))


def _trace(x, y, name: str, color: str, width: float, axis: int, legend: bool = False, **extra) -> dict:
    return {"type": "scatter", "mode": "lines", "x": np.asarray(x).tolist(), "y": significant(y).tolist(), "name": name,
            "legendgroup": name, "showlegend": legend, "line": {"color": color, "width": width},
            "xaxis": f"x{axis}", "yaxis": f"y{axis}", "hovertemplate": "%{y:.4g}", **extra}


def round_lines(segs: list[Segment], smoothing: float, within_round: bool, axis: int, legend: set) -> list[dict]:
    """One line per round (x: step within the round, or the job's step): the EMA, with the raw series faint
    behind it when smoothing; the lines share PANEL_POINTS points. A round of one point (a short reward training
    logs once) is a dot: a line needs two. `legend` collects the rounds already listed."""
    traces = []
    max_points = max(MIN_LINE_POINTS, PANEL_POINTS // max(1, len(segs) * (2 if smoothing > 0 else 1)))
    for s in segs:
        label = s.label
        x = s.steps - s.offset if within_round else s.steps
        dot = {"mode": "lines+markers", "marker": {"color": round_color(s.round), "size": 8}} if len(x) == 1 else {}
        if smoothing > 0 and not dot:
            traces.append(_trace(*downsample(x, s.values, max_points), f"{label} · raw", round_color(s.round, raw=True),
                                 1, axis, hoverinfo="skip", legendgroup=label))
        traces.append(_trace(*downsample(x, ema(s.values, smoothing), max_points), label, round_color(s.round), 2,
                             axis, legend=label not in legend, legendrank=min(round_order(s.round), 10 ** 6), **dot))
        legend.add(label)
    return traces


def figure(panels: dict[str, str], traces: dict[str, list[dict]], cols: int, x_title: str, panel_height: int,
           name: str, x_axis: dict | None = None) -> PlotData:
    """A grid of small charts sharing one legend (click a round to hide it everywhere); the mode bar's camera
    button saves it as PNG named `name`."""
    rows = math.ceil(len(panels) / cols)
    hgap, vgap = 0.05, 0.3 / rows
    width, height = (1 - hgap * (cols - 1)) / cols, (1 - vgap * (rows - 1)) / rows
    top = 56 if any(t.get("showlegend") for group in traces.values() for t in group) else 36  # room for a legend
    layout = {"height": panel_height * rows + top + 20, "margin": {"l": 40, "r": 10, "t": top, "b": 40},
              "paper_bgcolor": "white", "plot_bgcolor": "white", "hovermode": "x unified", "uirevision": name,
              "font": {"size": 11, "color": INK}, "legend": {"orientation": "h", "x": 1, "xanchor": "right", "y": 1,
                                                            "yanchor": "top", "yref": "container"},
              "annotations": []}
    data = []
    for i, (key, title) in enumerate(panels.items()):
        row, col = divmod(i, cols)
        x0, y1 = col * (width + hgap), 1 - row * (height + vgap)
        axis = {"showline": True, "linecolor": "#d1d5db", "gridcolor": "#eef0f3", "zeroline": False,
                "tickfont": {"size": 10, "color": MUTED}}
        layout[f"xaxis{i + 1}"] = {**axis, "domain": [x0, x0 + width], "anchor": f"y{i + 1}",
                                   "title": {"text": x_title, "font": {"size": 10, "color": MUTED}, "standoff": 4},
                                   **(x_axis or {})}
        layout[f"yaxis{i + 1}"] = {**axis, "domain": [y1 - height, y1], "anchor": f"x{i + 1}"}
        layout["annotations"].append({"text": f"<b>{html.escape(title)}</b>", "x": x0, "y": y1, "xref": "paper",
                                      "yref": "paper", "xanchor": "left", "yanchor": "bottom", "showarrow": False,
                                      "font": {"size": 12}})
        if not traces.get(key):
            layout["annotations"].append({"text": "no data yet", "x": x0 + width / 2, "y": y1 - height / 2,
                                          "xref": "paper", "yref": "paper", "showarrow": False,
                                          "font": {"color": MUTED}})
        data.extend(traces.get(key, []))
    config = {"displaylogo": False, "toImageButtonOptions": {"format": "png", "filename": name, "scale": 2},
              "modeBarButtonsToRemove": ["select2d", "lasso2d"]}
    return PlotData(type="plotly", plot=json.dumps({"data": data, "layout": layout, "config": config}))


def reward_figure(group: dict[str, list[Segment]], smoothing: float, name: str) -> PlotData:
    legend: set = set()
    traces = {key: round_lines(group.get(key, []), smoothing, True, i + 1, legend)
              for i, key in enumerate(REWARD_PANELS)}
    for i, key in enumerate(REWARD_PANELS):
        if key.endswith("accuracy") and traces[key]:
            xs = [x for t in traces[key] for x in (t["x"][0], t["x"][-1])]
            traces[key].append(_trace([min(xs), max(xs)], [0.5, 0.5], "chance", MUTED, 1, i + 1,
                                      line={"color": MUTED, "width": 1, "dash": "dot"}))
    return figure(REWARD_PANELS, traces, 4, "step within round", 230, name)


def function_panels(group: dict, algorithm: Algorithm) -> dict[str, str]:
    """A panel per reward function's mean and pass rate (`<algorithm>/<label>/mean`, `.../pass_rate`: docs/rewards.md)
    among the series of `group`, in the order of their names."""
    stats = {"mean": "mean", "pass_rate": "pass rate"}
    panels = {}
    for name in sorted(group):
        parts = name.split("/")
        if len(parts) == 3 and parts[0] == algorithm.value and parts[2] in stats:
            panels[name] = f"{parts[1]}: {stats[parts[2]]}"
    return panels


def optimiser_figure(group: dict[str, list[Segment]], smoothing: float, name: str,
                     algorithm: Algorithm = Algorithm.PPO) -> PlotData:
    """The policy optimiser's panels (PPO's, GRPO's or DPO's), x: its iterations (DPO: steps) across rounds."""
    panels, legend = {**OPTIMISER_PANELS[algorithm], **function_panels(group, algorithm)}, set()
    traces = {key: round_lines(group.get(key, []), smoothing, False, i + 1, legend) for i, key in enumerate(panels)}
    return figure(panels, traces, 4, f"{algorithm.value.upper()} {STEP_NAME.get(algorithm, 'iteration')}", 210, name)


def sft_figure(group: dict[str, list[Segment]], smoothing: float, name: str) -> PlotData:
    """An SFT job's panels: loss and token accuracy on the answer tokens of the training batches and of the held-out
    demonstrations, x: its optimiser steps."""
    legend: set = set()
    traces = {key: round_lines(group.get(key, []), smoothing, False, i + 1, legend) for i, key in enumerate(SFT_PANELS)}
    return figure(SFT_PANELS, traces, 4, "SFT step", 230, name)


def rounds_figure(rounds: list[dict], sft_oracle: float | None, name: str) -> PlotData:
    """Per round: labels, reward-model validation accuracy, mean score, KL, oracle score, check agreement, and the
    round's version's win rate against the SFT policy (plain and length-controlled, with their 95% intervals as error
    bars), with chance, the SFT policy's oracle score, the check warning level and 50% as dotted reference lines."""
    traces = {}
    for i, key in enumerate(ROUND_PANELS):
        points = [(r["round"], r["summary"][key]) for r in rounds if r["summary"].get(key) is not None]
        if not points:
            continue
        x, y = [p[0] for p in points], [p[1] for p in points]
        color = COLORS[2] if key == "oracle_score" else COLORS[3] if key in INTERVAL_PANELS else COLORS[0]
        if key == "labels":
            line = {"type": "bar", "x": x, "y": y, "name": ROUND_PANELS[key], "marker": {"color": color},
                    "xaxis": f"x{i + 1}", "yaxis": f"y{i + 1}", "showlegend": False, "hovertemplate": "%{y}"}
        else:
            line = _trace(x, y, ROUND_PANELS[key], color, 2.5, i + 1, mode="lines+markers", marker={"size": 7})
        if key in INTERVAL_PANELS:
            rows = [r["summary"] for r in rounds if r["summary"].get(key) is not None]
            line["error_y"] = {"type": "data", "symmetric": False, "color": color, "thickness": 1.5, "width": 4,
                               "array": [s[f"{key}_high"] - s[key] for s in rows],
                               "arrayminus": [s[key] - s[f"{key}_low"] for s in rows]}
        traces[key] = [line]
        reference = {"reward_val_accuracy": ("chance", 0.5), "oracle_score": ("SFT policy", sft_oracle),
                     "check_agreement": ("warning level", DEFAULT_MIN_AGREEMENT), "winrate": ("as good as SFT", 0.5),
                     "lc_winrate": ("as good as SFT", 0.5)}.get(key)
        if reference and reference[1] is not None:
            traces[key].append(_trace([min(x) - 0.2, max(x) + 0.2], [reference[1]] * 2, reference[0], MUTED, 1, i + 1,
                                      line={"color": MUTED, "width": 1.5, "dash": "dot"}))
    return figure(ROUND_PANELS, traces, 3, "round", 230, name, x_axis={"dtick": 1, "tick0": 0})
