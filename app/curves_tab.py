"""Curves tab: the rounds, reward-model and PPO charts of a job, warnings in plain words, live refresh while the
job runs, the shown data as CSV (each chart exports itself as PNG); API `/metrics(job_id, names)`.

Charts are Plotly figures written here as plain dicts and drawn in the browser by the plotly.js that Gradio
ships (no plotly package, no torch, no drawing in this process). A chart panel carries at most PANEL_POINTS points:
long series are smoothed on every point, then downsampled (min and max per bucket), so pages stay responsive on
large stores. A chart keeps its zoom and hidden rounds across live refreshes.
"""

from __future__ import annotations

import csv
import html
import json
import math
import tempfile
from dataclasses import dataclass, replace
from itertools import groupby
from pathlib import Path

import gradio as gr
import numpy as np
from gradio.components.plot import PlotData

from storage import jobs as job_rows
from storage.curves import Series, metric_series
from storage.generations import eval_samples
from storage.metrics import read_metrics
from storage.rounds import list_rounds
from storage.types import Job
from trainers.diagnostics import Finding, diagnose, downsample, ema

from .context import Studio, user_errors

TITLE = "Curves"
REWARD_PANELS = {"reward/loss": "Loss", "reward/accuracy": "Accuracy (training batches)",
                 "reward/val_accuracy": "Validation accuracy", "reward/val_loss": "Validation loss"}
PPO_PANELS = {"ppo/score": "Reward-model score", "ppo/kl": "KL to reference (nats)", "ppo/kl_coef": "KL coefficient β",
              "ppo/entropy": "Entropy (nats/token)", "ppo/clipfrac": "Clip fraction", "ppo/approx_kl": "Approx. KL per update",
              "ppo/policy_loss": "Policy loss", "ppo/value_loss": "Value loss",
              "ppo/explained_variance": "Explained variance", "ppo/response_length": "Response length (tokens)",
              "ppo/eos_rate": "EOS rate", "ppo/episodes_per_s": "Episodes per second"}
ROUND_PANELS = {"labels": "Labels collected", "reward_val_accuracy": "Reward model val. accuracy",
                "score": "Mean reward-model score", "kl": "KL to reference", "oracle_score": "Oracle score"}
ALL, IN_PROGRESS = "all", "current"
PANEL_POINTS = 1000  # points sent per chart panel (shared by its lines), after smoothing
MIN_LINE_POINTS = 100
LIVE_REFRESH_S = 3.0
DEFAULT_SMOOTHING = 0.6
COLORS = ["#2563eb", "#ea580c", "#16a34a", "#9333ea", "#dc2626", "#0891b2", "#ca8a04", "#db2777"]
INK, MUTED = "#1f2937", "#6b7280"


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


def _round_order(round_: int | None) -> float:
    return math.inf if round_ is None else round_


def align_rounds(group: dict[str, list[Segment]]) -> dict[str, list[Segment]]:
    """Set every segment's offset so that a round's steps count from where the group's previous rounds ended (the
    last step any of its metrics logged before): the same offset for every metric, even one a round did not log."""
    last: dict[int | None, int] = {}
    for segs in group.values():
        for s in segs:
            last[s.round] = max(last.get(s.round, 0), int(s.steps[-1]))
    offsets, previous = {}, 0
    for round_ in sorted(last, key=_round_order):
        offsets[round_], previous = previous, max(previous, last[round_])
    return {name: [replace(s, offset=offsets[s.round]) for s in segs] for name, segs in group.items()}


@dataclass(frozen=True)
class Curves:
    """Everything the tab shows for one job (job None: no job yet)."""

    job: Job | None
    reward: dict[str, list[Segment]]
    ppo: dict[str, list[Segment]]
    rounds: list[dict]  # every round of the store, with its summary
    sft_oracle: float | None  # mean oracle score of the round-0 policy's held-out samples

    @property
    def points(self) -> int:
        return sum(len(s.steps) for group in (self.reward, self.ppo) for segs in group.values() for s in segs)

    def round_choices(self) -> list[tuple[str, str]]:
        seen = sorted({(s.round, s.label) for group in (self.reward, self.ppo) for segs in group.values() for s in segs},
                      key=lambda pair: _round_order(pair[0]))
        return [("All rounds", ALL)] + [(label.capitalize(), IN_PROGRESS if r is None else str(r)) for r, label in seen]

    def select(self, group: dict[str, list[Segment]], choice: str) -> dict[str, list[Segment]]:
        """Segments of the chosen round only (or all of them)."""
        if choice == ALL:
            return group
        wanted = None if choice == IN_PROGRESS else int(choice)
        return {name: [s for s in segs if s.round == wanted] for name, segs in group.items()}


def load_curves(studio: Studio, job_id: int | None) -> Curves:
    store = studio.store
    job = job_rows.get_job(store, job_id) if job_id is not None else None
    open_label = ("in progress" if job.status.active else "unfinished round" if job.kind == "loop" else "this job"
                  ) if job else ""
    by_prefix = {p: metric_series(store, job_id, prefix=p) if job else {} for p in ("reward/", "ppo/")}
    reward, ppo = (align_rounds({name: segments(s, open_label) for name, s in by_prefix[p].items()})
                   for p in ("reward/", "ppo/"))
    sft = [s["oracle"] for s in eval_samples(store) if s["round"] == 0 and "oracle" in s]
    return Curves(job, reward, ppo, list_rounds(store), float(np.mean(sft)) if sft else None)


def findings(curves: Curves, choice: str) -> list[Finding]:
    """Run the warning rules on the shown PPO curves, the finished rounds' reward-model validation accuracy and
    the rounds' scores."""
    ppo = curves.select(curves.ppo, choice)
    series = {name: np.concatenate([s.values for s in segs]) for name, segs in ppo.items() if segs}
    finished = [s.values[-1] for s in curves.select(curves.reward, choice).get("reward/val_accuracy", [])
                if s.round is not None or not (curves.job and curves.job.status.active)]
    series["reward/val_accuracy"] = finished
    for key in ("score", "oracle_score"):
        series[f"round/{key}"] = [r["summary"][key] for r in curves.rounds if r["summary"].get(key) is not None]
    return diagnose(series)


# ---- charts: Plotly figures as plain dicts, drawn by the plotly.js that Gradio ships ------------------------------

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
                             axis, legend=label not in legend, legendrank=min(_round_order(s.round), 10 ** 6), **dot))
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


def ppo_figure(group: dict[str, list[Segment]], smoothing: float, name: str) -> PlotData:
    legend: set = set()
    traces = {key: round_lines(group.get(key, []), smoothing, False, i + 1, legend) for i, key in enumerate(PPO_PANELS)}
    return figure(PPO_PANELS, traces, 4, "PPO iteration", 210, name)


def rounds_figure(rounds: list[dict], sft_oracle: float | None, name: str) -> PlotData:
    """Per round: labels, reward-model validation accuracy, mean score, KL and oracle score, with chance and the
    SFT policy's oracle score as dotted reference lines."""
    traces = {}
    for i, key in enumerate(ROUND_PANELS):
        points = [(r["round"], r["summary"][key]) for r in rounds if r["summary"].get(key) is not None]
        if not points:
            continue
        x, y = [p[0] for p in points], [p[1] for p in points]
        color = COLORS[2] if key == "oracle_score" else COLORS[0]
        if key == "labels":
            line = {"type": "bar", "x": x, "y": y, "name": ROUND_PANELS[key], "marker": {"color": color},
                    "xaxis": f"x{i + 1}", "yaxis": f"y{i + 1}", "showlegend": False, "hovertemplate": "%{y}"}
        else:
            line = _trace(x, y, ROUND_PANELS[key], color, 2.5, i + 1, mode="lines+markers", marker={"size": 7})
        traces[key] = [line]
        reference = {"reward_val_accuracy": ("chance", 0.5), "oracle_score": ("SFT policy", sft_oracle)}.get(key)
        if reference and reference[1] is not None:
            traces[key].append(_trace([min(x) - 0.2, max(x) + 0.2], [reference[1]] * 2, reference[0], MUTED, 1, i + 1,
                                      line={"color": MUTED, "width": 1.5, "dash": "dot"}))
    return figure(ROUND_PANELS, traces, 5, "round", 230, name, x_axis={"dtick": 1, "tick0": 0})


# ---- text and files -----------------------------------------------------------------------------------------------

def warnings_html(found: list[Finding], has_data: bool) -> str:
    if not found:
        return ('<div class="curves-ok">✓ No known failure pattern in these curves.</div>' if has_data else "")
    cards = "".join(
        f'<div class="curves-warning"><b>⚠ {html.escape(f.title)}.</b> {html.escape(f.detail)}'
        f'<br><span class="advice">{html.escape(f.advice)}</span></div>' for f in found)
    return cards


WARNINGS_CSS = """
.curves-warning { border-left: 4px solid #d97706; background: #fffbeb; color: #451a03; padding: 8px 12px;
                  margin: 4px 0; border-radius: 4px; }
.curves-warning .advice { color: #78350f; }
.curves-ok { border-left: 4px solid #16a34a; background: #f0fdf4; color: #14532d; padding: 6px 12px; border-radius: 4px; }
"""


def status_line(curves: Curves) -> str:
    job = curves.job
    if job is None:
        return "No training job yet: start one in the **Train** tab. The rounds chart fills in as rounds finish."
    parts = [f"**Job {job.id}** · {job.kind} · **{job.status.value}**", f"{curves.points:,} metric points"]
    if job.phase and job.status.active:
        parts.append(html.escape(job.phase))
    if job.status.active:
        parts.append(f"live: refreshes every {LIVE_REFRESH_S:.0f} s")
    return " · ".join(parts)


def write_exports(curves: Curves, choice: str) -> list[str]:
    """The shown metrics (long format, raw values) and every round's summary as CSV files in a new folder."""
    folder = Path(tempfile.mkdtemp(prefix="studio-curves-"))
    stem = f"job{curves.job.id}" if curves.job else "studio"
    if choice != ALL:
        stem += f"-round-{choice}"
    paths = [folder / f"{stem}-metrics.csv", folder / "rounds.csv"]
    with paths[0].open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["job_id", "round", "step", "name", "value"])
        for group in (curves.select(curves.reward, choice), curves.select(curves.ppo, choice)):
            for name, segs in sorted(group.items()):
                for s in segs:
                    writer.writerows((curves.job.id, s.round, int(step), name, repr(float(value)))
                                     for step, value in zip(s.steps, s.values))
    with paths[1].open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["round", "job_id", "policy_id", *ROUND_PANELS])
        writer.writerows([r["round"], r["job_id"], r["policy_id"], *(r["summary"].get(k) for k in ROUND_PANELS)]
                         for r in curves.rounds)
    return [str(p) for p in paths]


def job_choices(studio: Studio) -> list[tuple[str, int]]:
    return [(f"Job {j.id} · {j.kind} · {j.status.value}", j.id) for j in job_rows.list_jobs(studio.store)]


# ---- the tab ------------------------------------------------------------------------------------------------------

def build(studio: Studio) -> list:
    store = studio.store

    def metrics(job_id: int, names: str | list[str] = "", request: gr.Request = None) -> list[dict]:
        """Metric rows {job_id, step, name, value} of a job, ordered by name then step. `names`: a comma-separated
        string or a list of exact names (e.g. "ppo/kl,ppo/score"); empty for every metric of the job."""
        studio.annotator(request, None)
        wanted = names.split(",") if isinstance(names, str) else list(names or [])
        wanted = [n.strip() for n in wanted if n and n.strip()]
        with user_errors():
            job_rows.get_job(store, int(job_id))
        return read_metrics(store, int(job_id), names=wanted or None)

    gr.api(metrics, api_name="metrics")

    gr.Markdown("How the reward model and PPO are learning. The **rounds** charts say whether the loop works: the "
                "oracle score (or your own reading of the samples) should rise round after round. Hover to read values, "
                "drag to zoom, click a round in the legend to hide it; the camera button saves a chart as PNG.")
    with gr.Row(equal_height=True):
        job = gr.Dropdown(label="Job", choices=[], scale=3, elem_id="curves-job")
        round_choice = gr.Dropdown(label="Round", choices=[("All rounds", ALL)], value=ALL, scale=2)
        smoothing = gr.Slider(0.0, 0.99, value=DEFAULT_SMOOTHING, step=0.01, label="Smoothing (EMA)", scale=3)
        with gr.Column(scale=1, min_width=170):
            refresh_button = gr.Button("↻ Refresh", size="sm")
            export_button = gr.Button("⬇ Data as CSV", size="sm")
    downloads = gr.File(label="The shown metrics (raw values) and the rounds, as CSV", file_count="multiple",
                        interactive=False, visible=False)
    status = gr.Markdown(elem_id="curves-status")
    warnings = gr.HTML(css_template=WARNINGS_CSS, elem_id="curves-warnings")
    gr.Markdown("### Rounds: is the loop working?")
    rounds_plot = gr.Plot(show_label=False, elem_id="curves-rounds")
    gr.Markdown("### Reward model: one line per round")
    reward_plot = gr.Plot(show_label=False, elem_id="curves-reward")
    gr.Markdown("### PPO: iterations across rounds, colored by round")
    ppo_plot = gr.Plot(show_label=False, elem_id="curves-ppo")
    timer = gr.Timer(LIVE_REFRESH_S, active=False)

    def show(job_id, choice, smoothing_value):
        with user_errors():
            curves = load_curves(studio, job_id)
        choices = curves.round_choices()
        choice = choice if choice in {value for _, value in choices} else ALL
        smoothing_value = float(smoothing_value)
        reward, ppo = curves.select(curves.reward, choice), curves.select(curves.ppo, choice)
        stem = (f"job{curves.job.id}" if curves.job else "studio") + ("" if choice == ALL else f"-round-{choice}")
        return (gr.Dropdown(choices=choices, value=choice), status_line(curves),
                warnings_html(findings(curves, choice), curves.points > 0 or bool(curves.rounds)),
                rounds_figure(curves.rounds, curves.sft_oracle, "rounds"),
                reward_figure(reward, smoothing_value, f"{stem}-reward"), ppo_figure(ppo, smoothing_value, f"{stem}-ppo"),
                gr.Timer(active=bool(curves.job and curves.job.status.active)))

    def reload(job_id, choice, smoothing_value):
        options = job_choices(studio)
        ids = [value for _, value in options]
        job_id = job_id if job_id in ids else (ids[0] if ids else None)
        return (gr.Dropdown(choices=options, value=job_id), *show(job_id, choice, smoothing_value))

    def export(job_id, choice):
        return gr.File(value=write_exports(load_curves(studio, job_id), choice), visible=True)

    shown = [round_choice, status, warnings, rounds_plot, reward_plot, ppo_plot, timer]
    settings = [job, round_choice, smoothing]
    job.input(lambda job_id, s: show(job_id, ALL, s), [job, smoothing], shown, api_visibility="private")
    round_choice.input(show, settings, shown, api_visibility="private")
    smoothing.release(show, settings, shown, api_visibility="private")
    refresh_button.click(reload, settings, [job, *shown], api_visibility="private")
    timer.tick(show, settings, shown, api_visibility="private", show_progress="hidden")
    export_button.click(export, [job, round_choice], downloads, api_visibility="private")
    return [(lambda: reload(None, ALL, DEFAULT_SMOOTHING), [job, *shown])]
