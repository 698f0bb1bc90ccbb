"""Curves tab: the rounds, reward-model and PPO charts of a job, warnings in plain words, live refresh while the
job runs, export as CSV + PNG; API `/metrics(job_id, names)`.

Charts are matplotlib PNGs drawn here (no torch in this process). Long series are smoothed on every point, then
downsampled (min/max per bucket) before plotting, and a chart whose data and settings did not change is not drawn
again, so a page stays responsive with 100 000 metric rows.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import html
import io
import math
import tempfile
from collections import OrderedDict
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path

import gradio as gr
import numpy as np
from gradio.components.plot import PlotData
from matplotlib.figure import Figure

from storage import jobs as job_rows
from storage.curves import Series, metric_series
from storage.errors import StudioError
from storage.generations import eval_samples
from storage.metrics import read_metrics
from storage.rounds import list_rounds
from storage.types import Job
from trainers.diagnostics import Finding, diagnose, downsample, ema

from .context import Studio

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
MAX_POINTS = 800  # per line, after smoothing
LIVE_REFRESH_S = 3.0
DEFAULT_SMOOTHING = 0.6
PANEL_INCHES, DPI = (3.5, 2.3), 100
COLORS = ["#2563eb", "#ea580c", "#16a34a", "#9333ea", "#dc2626", "#0891b2", "#ca8a04", "#db2777"]
INK, MUTED = "#1f2937", "#6b7280"


@dataclass(frozen=True)
class Segment:
    """The points of one metric in one round; `offset` turns job steps into steps within the round."""

    round: int | None
    steps: np.ndarray
    values: np.ndarray
    offset: int


def segments(series: Series) -> list[Segment]:
    """Consecutive runs of points belonging to one round, in step order."""
    out, start, offset = [], 0, 0
    for round_, run in groupby(series.rounds):
        n = len(list(run))
        steps = np.asarray(series.steps[start:start + n])
        out.append(Segment(round_, steps, np.asarray(series.values[start:start + n], dtype=float), offset))
        start, offset = start + n, int(steps[-1])
    return out


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
        seen = sorted({s.round for group in (self.reward, self.ppo) for segs in group.values() for s in segs},
                      key=lambda r: math.inf if r is None else r)
        return [("All rounds", ALL)] + [("In progress" if r is None else f"Round {r}", IN_PROGRESS if r is None else str(r))
                                        for r in seen]

    def select(self, group: dict[str, list[Segment]], choice: str) -> dict[str, list[Segment]]:
        """Segments of the chosen round only (or all of them)."""
        if choice == ALL:
            return group
        wanted = None if choice == IN_PROGRESS else int(choice)
        return {name: [s for s in segs if s.round == wanted] for name, segs in group.items()}


def load_curves(studio: Studio, job_id: int | None) -> Curves:
    store = studio.store
    job = job_rows.get_job(store, job_id) if job_id is not None else None
    by_prefix = {p: metric_series(store, job_id, prefix=p) if job else {} for p in ("reward/", "ppo/")}
    reward, ppo = ({name: segments(s) for name, s in by_prefix[p].items()} for p in ("reward/", "ppo/"))
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


# ---- charts -------------------------------------------------------------------------------------------------------

def _figure(panels: int, cols: int, height: float = PANEL_INCHES[1]) -> tuple[Figure, list]:
    rows = math.ceil(panels / cols)
    fig = Figure(figsize=(PANEL_INCHES[0] * cols, height * rows), dpi=DPI, layout="constrained")
    axes = list(fig.subplots(rows, cols, squeeze=False).ravel())
    for ax in axes[panels:]:
        ax.set_visible(False)
    return fig, axes[:panels]


def _style(ax, title: str, has_data: bool) -> None:
    ax.set_title(title, loc="left", fontsize=10, color=INK)
    ax.tick_params(labelsize=8, colors=MUTED)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    for side in ("left", "bottom"):
        ax.spines[side].set_color("#d1d5db")
    ax.grid(True, color="#e5e7eb", linewidth=0.8)
    if not has_data:
        ax.text(0.5, 0.5, "no data yet", transform=ax.transAxes, ha="center", va="center", color=MUTED, fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])


def _line(ax, x: np.ndarray, y: np.ndarray, smoothing: float, color: str, label: str | None = None) -> None:
    """The raw series faint and its EMA on top (or the raw series alone without smoothing)."""
    if smoothing > 0:
        ax.plot(*downsample(x, y, MAX_POINTS), color=color, alpha=0.22, linewidth=1)
        ax.plot(*downsample(x, ema(y, smoothing), MAX_POINTS), color=color, linewidth=1.8, label=label)
    else:
        ax.plot(*downsample(x, y, MAX_POINTS), color=color, linewidth=1.5, label=label)
    if len(x) == 1:
        ax.plot(x, y, "o", color=color, markersize=4)


def _png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", facecolor="white")
    return buffer.getvalue()


def _round_label(round_: int | None) -> str:
    return "in progress" if round_ is None else f"round {round_}"


def render_reward(group: dict[str, list[Segment]], smoothing: float) -> bytes:
    """One panel per reward metric, one line per round against the step within that round."""
    fig, axes = _figure(len(REWARD_PANELS), 4)
    rounds = sorted({s.round for segs in group.values() for s in segs}, key=lambda r: math.inf if r is None else r)
    colors = {r: COLORS[i % len(COLORS)] for i, r in enumerate(rounds)}
    for ax, (name, title) in zip(axes, REWARD_PANELS.items()):
        segs = group.get(name, [])
        for s in segs:
            _line(ax, s.steps - s.offset, s.values, smoothing, colors[s.round], _round_label(s.round))
        if name.endswith("accuracy") and segs:
            ax.axhline(0.5, color=MUTED, linestyle=":", linewidth=1)
        ax.set_xlabel("step within round", fontsize=8, color=MUTED)
        _style(ax, title, bool(segs))
    if len(rounds) > 1 or rounds == [None]:
        fig.legend(*axes[0].get_legend_handles_labels(), loc="outside right upper", fontsize=8, frameon=False)
    return _png(fig)


def render_ppo(group: dict[str, list[Segment]], smoothing: float) -> bytes:
    """One panel per PPO metric on one time axis (iterations continue across rounds); dotted lines start rounds."""
    fig, axes = _figure(len(PPO_PANELS), 4)
    for ax, (name, title) in zip(axes, PPO_PANELS.items()):
        segs = group.get(name, [])
        if segs:
            steps = np.concatenate([s.steps for s in segs])
            _line(ax, steps, np.concatenate([s.values for s in segs]), smoothing, COLORS[0])
            for s in segs[1:]:
                ax.axvline(s.steps[0], color=MUTED, linestyle=":", linewidth=1)
            for s in segs if len(segs) > 1 else []:
                ax.text(s.steps[0], 1.0, f" {'now' if s.round is None else s.round}", transform=ax.get_xaxis_transform(),
                        fontsize=7, color=MUTED, va="top")
        ax.set_xlabel("PPO iteration", fontsize=8, color=MUTED)
        _style(ax, title, bool(segs))
    return _png(fig)


def render_rounds(rounds: list[dict], sft_oracle: float | None) -> bytes:
    """Per round: labels, reward-model validation accuracy, mean score, KL and oracle score."""
    fig, axes = _figure(len(ROUND_PANELS), 5, height=2.6)
    for ax, (key, title) in zip(axes, ROUND_PANELS.items()):
        points = [(r["round"], r["summary"][key]) for r in rounds if r["summary"].get(key) is not None]
        x, y = [p[0] for p in points], [p[1] for p in points]
        if key == "labels" and points:
            ax.bar(x, y, color=COLORS[0], width=0.6)
        elif points:
            ax.plot(x, y, "o-", color=COLORS[2 if key == "oracle_score" else 0], linewidth=2, markersize=5)
        if key == "reward_val_accuracy" and points:
            ax.axhline(0.5, color=MUTED, linestyle=":", linewidth=1)
            ax.text(0.99, 0.5, "chance", transform=ax.get_yaxis_transform(), fontsize=8, color=MUTED, ha="right",
                    va="bottom")
        if key == "oracle_score" and sft_oracle is not None:
            ax.axhline(sft_oracle, color=MUTED, linestyle="--", linewidth=1)
            ax.text(0.99, sft_oracle, "SFT policy", transform=ax.get_yaxis_transform(), fontsize=8, color=MUTED,
                    ha="right", va="bottom")
            points = points or [(0, sft_oracle)]
        if points:
            ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set_xlabel("round", fontsize=8, color=MUTED)
        _style(ax, title, bool(points))
    return _png(fig)


class PngCache:
    """The last few charts by a hash of their inputs, so an unchanged chart is not drawn again."""

    def __init__(self, size: int = 48):
        self.size, self.items = size, OrderedDict()

    def get(self, key: str, draw) -> bytes:
        if key in self.items:
            self.items.move_to_end(key)
            return self.items[key]
        png = self.items[key] = draw()
        while len(self.items) > self.size:
            self.items.popitem(last=False)
        return png


def _key(*parts) -> str:
    digest = hashlib.sha1()
    for part in parts:
        if isinstance(part, dict):
            for name, segs in sorted(part.items()):
                digest.update(name.encode())
                for s in segs:
                    digest.update(f"{s.round}:{s.offset}".encode() + s.steps.tobytes() + s.values.tobytes())
        else:
            digest.update(repr(part).encode())
    return digest.hexdigest()


def _plot(png: bytes) -> PlotData:
    return PlotData(type="matplotlib", plot="data:image/png;base64," + base64.b64encode(png).decode())


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


def write_exports(curves: Curves, choice: str, charts: dict[str, bytes]) -> list[str]:
    """The shown metrics (long format, raw values) and the rounds as CSV, and the charts as PNG, in a new folder."""
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
    for chart, png in charts.items():
        path = folder / f"{stem}-{chart}.png"
        path.write_bytes(png)
        paths.append(path)
    return [str(p) for p in paths]


def job_choices(studio: Studio) -> list[tuple[str, int]]:
    return [(f"Job {j.id} · {j.kind} · {j.status.value}", j.id) for j in job_rows.list_jobs(studio.store)]


# ---- the tab ------------------------------------------------------------------------------------------------------

def build(studio: Studio) -> list:
    store, cache = studio.store, PngCache()

    def metrics(job_id: int, names: str | list[str] = "", request: gr.Request = None) -> list[dict]:
        """Metric rows {job_id, step, name, value} of a job, ordered by name then step. `names`: a comma-separated
        string or a list of exact names (e.g. "ppo/kl,ppo/score"); empty for every metric of the job."""
        studio.annotator(request, None)
        wanted = names.split(",") if isinstance(names, str) else list(names or [])
        wanted = [n.strip() for n in wanted if n and n.strip()]
        try:
            job_rows.get_job(store, int(job_id))
        except StudioError as exc:
            raise gr.Error(str(exc)) from None
        return read_metrics(store, int(job_id), names=wanted or None)

    gr.api(metrics, api_name="metrics")

    gr.Markdown("How the reward model and PPO are learning. The **rounds** chart says whether the loop works: "
                "the oracle score (or your own reading of the samples) should rise round after round.")
    with gr.Row(equal_height=True):
        job = gr.Dropdown(label="Job", choices=[], scale=3)
        round_choice = gr.Dropdown(label="Round", choices=[("All rounds", ALL)], value=ALL, scale=2)
        smoothing = gr.Slider(0.0, 0.99, value=DEFAULT_SMOOTHING, step=0.01, label="Smoothing (EMA)", scale=3)
        with gr.Column(scale=1, min_width=170):
            refresh_button = gr.Button("↻ Refresh", size="sm")
            export_button = gr.Button("⬇ Export CSV + PNG", size="sm")
    downloads = gr.File(label="Exported: the shown metrics (raw values), the rounds and the charts",
                        file_count="multiple", interactive=False, visible=False)
    status = gr.Markdown(elem_id="curves-status")
    warnings = gr.HTML(css_template=WARNINGS_CSS, elem_id="curves-warnings")
    gr.Markdown("### Rounds: is the loop working?")
    rounds_plot = gr.Plot(show_label=False, elem_id="curves-rounds", format="png")
    gr.Markdown("### Reward model: one line per round")
    reward_plot = gr.Plot(show_label=False, elem_id="curves-reward", format="png")
    gr.Markdown("### PPO: iterations across rounds (dotted lines start a round)")
    ppo_plot = gr.Plot(show_label=False, elem_id="curves-ppo", format="png")
    timer = gr.Timer(LIVE_REFRESH_S, active=False)

    def charts(curves: Curves, choice: str, smoothing_value: float) -> dict[str, bytes]:
        reward, ppo = curves.select(curves.reward, choice), curves.select(curves.ppo, choice)
        return {
            "rounds": cache.get(_key("rounds", curves.rounds, curves.sft_oracle),
                                lambda: render_rounds(curves.rounds, curves.sft_oracle)),
            "reward": cache.get(_key("reward", smoothing_value, reward), lambda: render_reward(reward, smoothing_value)),
            "ppo": cache.get(_key("ppo", smoothing_value, ppo), lambda: render_ppo(ppo, smoothing_value)),
        }

    def show(job_id, choice, smoothing_value):
        try:
            curves = load_curves(studio, job_id)
        except StudioError as exc:
            raise gr.Error(str(exc)) from None
        choices = curves.round_choices()
        choice = choice if choice in {value for _, value in choices} else ALL
        drawn = charts(curves, choice, float(smoothing_value))
        return (gr.Dropdown(choices=choices, value=choice), status_line(curves),
                warnings_html(findings(curves, choice), curves.points > 0 or bool(curves.rounds)),
                _plot(drawn["rounds"]), _plot(drawn["reward"]), _plot(drawn["ppo"]),
                gr.Timer(active=bool(curves.job and curves.job.status.active)))

    def reload(job_id, choice, smoothing_value):
        options = job_choices(studio)
        ids = [value for _, value in options]
        job_id = job_id if job_id in ids else (ids[0] if ids else None)
        return (gr.Dropdown(choices=options, value=job_id), *show(job_id, choice, smoothing_value))

    def export(job_id, choice, smoothing_value):
        curves = load_curves(studio, job_id)
        return gr.File(value=write_exports(curves, choice, charts(curves, choice, float(smoothing_value))), visible=True)

    shown = [round_choice, status, warnings, rounds_plot, reward_plot, ppo_plot, timer]
    settings = [job, round_choice, smoothing]
    job.input(lambda job_id, s: show(job_id, ALL, s), [job, smoothing], shown, api_visibility="private")
    round_choice.input(show, settings, shown, api_visibility="private")
    smoothing.release(show, settings, shown, api_visibility="private")
    refresh_button.click(reload, settings, [job, *shown], api_visibility="private")
    timer.tick(show, settings, shown, api_visibility="private", show_progress="hidden")
    export_button.click(export, settings, downloads, api_visibility="private")
    return [(lambda: reload(None, ALL, DEFAULT_SMOOTHING), [job, *shown])]
