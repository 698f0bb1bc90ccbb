"""Curves tab: the rounds, reward-model and PPO (or GRPO, or DPO; an sft job: SFT) charts of a job, warnings in plain
words, live refresh while the job runs, the shown data as CSV (each chart exports itself as PNG); API
`/metrics(job_id, names)`.

The charts themselves are built in `app.curves.charts`. Opening the tab shows the newest job with data (or the one
picked by hand).
"""

from __future__ import annotations

import csv
import html
import tempfile
from dataclasses import dataclass
from pathlib import Path

import gradio as gr
import numpy as np
from gradio.components.plot import PlotData

from app.context import Refresh, Studio, View, bind, markdown_literal, user_errors
from app.curves.charts import (
    ROUND_PANELS,
    STEP_NAME,
    Segment,
    align_rounds,
    optimiser_figure,
    reward_figure,
    round_order,
    rounds_figure,
    segments,
    sft_figure,
)
from labeling.versions.winrate import WinrateReport, winrate_report
from storage import jobs as job_rows
from storage.curves import metric_series
from storage.generations import eval_samples
from storage.job_warnings import list_warnings
from storage.metrics import jobs_with_metrics, read_metrics
from storage.rounds import list_rounds
from storage.types import Job
from trainers.jobs.launcher import reap_orphans
from trainers.jobs.layer import JobKind, job_algorithm, job_kind_label
from trainers.loop.diagnostics import Finding, diagnose
from trainers.policy.config import Algorithm

TITLE = "Curves"
ALL, IN_PROGRESS = "all", "current"
LIVE_REFRESH_S = 3.0
DEFAULT_SMOOTHING = 0.6


@dataclass(frozen=True)
class Curves:
    """Everything the tab shows for one job (job None: no job yet)."""

    job: Job | None
    reward: dict[str, list[Segment]]
    optimiser: dict[str, list[Segment]]  # the policy optimiser's series: `ppo/...`, or a GRPO, DPO or SFT job's own
    algorithm: Algorithm
    rounds: list[dict]  # a loop job's rounds (any other job, or none: every round of the store), with summaries
    others: list[dict]  # the store's rounds a loop job's charts leave out (other jobs')
    sft_oracle: float | None  # mean oracle score of the round-0 policy's held-out samples
    fired: list[Finding]  # the warnings the job recorded when they fired, with their round and step

    @property
    def points(self) -> int:
        return sum(len(s.steps) for group in (self.reward, self.optimiser) for segs in group.values() for s in segs)

    def round_choices(self) -> list[tuple[str, str]]:
        seen = sorted({(s.round, s.label) for group in (self.reward, self.optimiser) for segs in group.values()
                       for s in segs}, key=lambda pair: round_order(pair[0]))
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
    algorithm = (job_algorithm(job) if job else None) or Algorithm.PPO
    prefixes = ("reward/", "sft/" if is_sft(job) else f"{algorithm.value}/")
    by_prefix = {p: metric_series(store, job_id, prefix=p) if job else {} for p in prefixes}
    reward, optimiser = (align_rounds({name: segments(s, open_label) for name, s in by_prefix[p].items()})
                         for p in prefixes)
    sft = [s["oracle"] for s in eval_samples(store) if s["round"] == 0 and "oracle" in s]
    fired = [Finding(w.rule, w.title, w.detail, w.advice, w.round, w.step) for w in list_warnings(store, job.id)
             ] if job else []
    every, loop = list_rounds(store), job is not None and job.kind == JobKind.LOOP
    shown = [r for r in every if r["job_id"] == job.id] if loop else every  # a loop job's own rounds
    rounds = with_win_rates(shown, winrate_report(store, rounds=0))
    others = [r for r in every if r not in shown]
    return Curves(job, reward, optimiser, algorithm, rounds, others, float(np.mean(sft)) if sft else None, fired)


def rounds_title(curves: Curves) -> str:
    """The rounds charts' title, saying whose rounds they show: a loop job's own (and how many of the store's it
    leaves out), or every round of the store."""
    title = "### Rounds: is the loop working?"
    job = curves.job
    if job is None or job.kind != JobKind.LOOP:
        return f"{title}\n\nEvery round of the store{'' if job is None else ' (this job runs no rounds)'}."
    numbers = [r["round"] for r in curves.rounds]
    shown = (f"store round{'s' * (len(numbers) != 1)} {span(numbers)}" if numbers else "none finished yet")
    line = f"Job {job.id}'s rounds ({shown})"
    if curves.others:
        n, jobs = len(curves.others), sorted({r["job_id"] for r in curves.others if r["job_id"] is not None})
        whose = f" (job{'s' * (len(jobs) != 1)} {', '.join(map(str, jobs))})" if jobs else ""
        line += (f"; the store's {n} other round{'s' * (n != 1)}{whose} {'are' if n != 1 else 'is'} left out: pick "
                 f"{'their' if n != 1 else 'its'} job in the list above to see {'them' if n != 1 else 'it'}")
    return f"{title}\n\n{line}."


def span(numbers: list[int]) -> str:
    """`4`, `4–6`, or `1, 3` for round numbers."""
    ordered = sorted(set(numbers))
    if len(ordered) > 1 and ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"{ordered[0]}–{ordered[-1]}"
    return ", ".join(map(str, ordered))


def with_win_rates(rounds: list[dict], report: WinrateReport) -> list[dict]:
    """The rounds with their version's win rates against the SFT policy (as people's labels stand now) added to
    each summary: `winrate`, `lc_winrate` and their `_low` and `_high` 95% bounds."""
    figures = {v.policy_id: v for v in report.versions if v.rate is not None}
    out = []
    for r in rounds:
        v = figures.get(r["policy_id"])
        added = {} if v is None else {"winrate": v.rate, "winrate_low": v.low, "winrate_high": v.high,
                                      "lc_winrate": v.lc_rate, "lc_winrate_low": v.lc_low, "lc_winrate_high": v.lc_high}
        out.append({**r, "summary": {**r["summary"], **added}})
    return out


def findings(curves: Curves, choice: str) -> list[Finding]:
    """The warnings the job recorded (of the chosen round, or all). A loop checks its rules after each phase and
    records what fires, so its warnings are those alone: the one set of rules that `status`, the loop's pause and
    `bench/failure_warnings.py` read. A PPO, GRPO or DPO job run alone records none: the whole-job rules judge its
    shown curves, the finished rounds' reward-model validation accuracy and the rounds' scores."""
    optimiser = curves.select(curves.optimiser, choice)
    series = {name: np.concatenate([s.values for s in segs]) for name, segs in optimiser.items() if segs}
    finished = [s.values[-1] for s in curves.select(curves.reward, choice).get("reward/val_accuracy", [])
                if s.round is not None or not (curves.job and curves.job.status.active)]
    series["reward/val_accuracy"] = finished
    for key in ("score", "oracle_score"):
        series[f"round/{key}"] = [r["summary"][key] for r in curves.rounds if r["summary"].get(key) is not None]
    fired = [f for f in curves.fired if choice in (ALL, str(f.round))]
    if curves.job is not None and curves.job.kind in (JobKind.LOOP, JobKind.SFT):  # no rule reads SFT's curves
        return fired
    return fired + [f for f in diagnose(series) if f.rule not in {w.rule for w in fired}]


# ---- text and files -----------------------------------------------------------------------------------------------

def warnings_html(found: list[Finding], has_data: bool) -> str:
    if not found:
        return ('<div class="curves-ok">✓ No known failure pattern in these curves.</div>' if has_data else "")
    cards = "".join(
        f'<div class="curves-warning"><b>⚠ {html.escape(f.title)}.</b> {where(f)}{html.escape(f.detail)}'
        f'<br><span class="advice">{html.escape(f.advice)}</span></div>' for f in found)
    return cards


def where(finding: Finding) -> str:
    """`Round 2, step 14: ` for a warning that names where it fired."""
    if finding.round is None:
        return ""
    step = f", step {finding.step}" if finding.step is not None else ""
    return f"<i>Round {finding.round}{step}:</i> "


WARNINGS_CSS = """
.curves-warning { border-left: 4px solid #d97706; background: #fffbeb; color: #451a03; padding: 8px 12px;
                  margin: 4px 0; border-radius: 4px; }
.curves-warning .advice { color: #78350f; }
.curves-ok { border-left: 4px solid #16a34a; background: #f0fdf4; color: #14532d; padding: 6px 12px;
             border-radius: 4px; }
"""


def status_line(curves: Curves) -> str:
    job = curves.job
    if job is None:
        return "No training job yet: start one in the **Train** tab. The rounds chart fills in as rounds finish."
    parts = [f"**Job {job.id}** · {job_kind_label(job)} · **{job.status.value}**", f"{curves.points:,} metric points"]
    if job.phase and job.status.active:
        parts.append(markdown_literal(job.phase))
    if job.status.active:
        parts.append(f"live: refreshes every {LIVE_REFRESH_S:.0f} s")
    return " · ".join(parts)


def write_exports(curves: Curves, choice: str) -> list[str]:
    """The shown metrics (long format, raw values) and the shown rounds' summaries as CSV files in a new folder."""
    folder = Path(tempfile.mkdtemp(prefix="studio-curves-"))
    stem = f"job{curves.job.id}" if curves.job else "studio"
    if choice != ALL:
        stem += f"-round-{choice}"
    paths = [folder / f"{stem}-metrics.csv", folder / "rounds.csv"]
    with paths[0].open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["job_id", "round", "step", "name", "value"])
        for group in (curves.select(curves.reward, choice), curves.select(curves.optimiser, choice)):
            for name, segs in sorted(group.items()):
                for s in segs:
                    writer.writerows((curves.job.id, s.round, int(step), name, repr(float(value)))
                                     for step, value in zip(s.steps, s.values, strict=True))
    with paths[1].open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["round", "job_id", "policy_id", *ROUND_PANELS])
        writer.writerows([r["round"], r["job_id"], r["policy_id"], *(r["summary"].get(k) for k in ROUND_PANELS)]
                         for r in curves.rounds)
    return [str(p) for p in paths]


def opening_job(studio: Studio) -> int | None:
    """The job the tab opens on: the newest that runs or has data to show (metrics or rounds), not a newer one
    cancelled or failed before its first step; the newest when none has any."""
    jobs = job_rows.list_jobs(studio.store)
    with_data = jobs_with_metrics(studio.store) | {row["job_id"] for row in list_rounds(studio.store)}
    return next((job.id for job in jobs if job.status.active or job.id in with_data), jobs[0].id if jobs else None)


def job_choices(studio: Studio) -> list[tuple[str, int]]:
    reap_orphans(studio.store)  # a job whose process is gone reads as interrupted, never as running
    return [(f"Job {j.id} · {job_kind_label(j)} · {j.status.value}", j.id) for j in job_rows.list_jobs(studio.store)]




# ---- the public API -----------------------------------------------------------------------------------------------

def api_metrics(studio: Studio, job_id: int, names: str | list[str] = "", request: gr.Request = None) -> list[dict]:
    """Metric rows {job_id, step, name, value} of a job, ordered by name then step. `names`: a comma-separated
    string or a list of exact names (e.g. "ppo/kl,ppo/score"); empty for every metric of the job."""
    studio.annotator(request, None)
    wanted = names.split(",") if isinstance(names, str) else list(names or [])
    wanted = [n.strip() for n in wanted if n and n.strip()]
    with user_errors():
        job_rows.get_job(studio.store, int(job_id))
    return read_metrics(studio.store, int(job_id), names=wanted or None)


# ---- the screen ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CurvesLayout:
    """The Curves tab's components."""

    job: gr.Dropdown
    picked_job: gr.State  # the job chosen by hand in this page (None: show the newest when the tab opens)
    round_choice: gr.Dropdown
    smoothing: gr.Slider
    refresh: gr.Button
    export: gr.Button
    downloads: gr.File
    status: gr.Markdown
    warnings: gr.HTML
    rounds_title: gr.Markdown  # whose rounds the rounds charts show
    rounds_plot: gr.Plot
    reward_plot: gr.Plot
    optimiser_title: gr.Markdown  # names the job's policy optimiser, PPO or GRPO
    optimiser_plot: gr.Plot
    timer: gr.Timer  # on while the shown job is active
    charts: gr.Column  # the three charts and their titles, hidden before any job (the status says how to start one)


def is_sft(job: Job | None) -> bool:
    """An sft job: its third chart is SFT's, in place of a policy optimiser's."""
    return job is not None and job.kind == JobKind.SFT


def optimiser_title(algorithm: Algorithm) -> str:
    return f"### {algorithm.value.upper()}: {STEP_NAME.get(algorithm, 'iteration')}s across rounds, colored by round"


def layout() -> CurvesLayout:
    """Job, round and smoothing choices, the buttons, then warnings and the rounds, reward-model and PPO (or GRPO)
    charts."""
    gr.Markdown("How the reward model and PPO (or GRPO) are learning. The **rounds** charts say whether the loop "
                "works: the oracle score (or your own reading of the samples) should rise round after round. Hover to "
                "read values, drag to zoom, click a round in the legend to hide it; the camera button saves a chart "
                "as PNG.")
    with gr.Row(equal_height=True):
        job = gr.Dropdown(label="Job", choices=[], scale=3, elem_id="curves-job")
        round_choice = gr.Dropdown(label="Round", choices=[("All rounds", ALL)], value=ALL, scale=2)
        smoothing = gr.Slider(0.0, 0.99, value=DEFAULT_SMOOTHING, step=0.01, label="Smoothing (EMA)", scale=3)
        with gr.Column(scale=1, min_width=170):
            refresh = gr.Button("↻ Refresh", size="sm")
            export = gr.Button("⬇ Data as CSV", size="sm")
    downloads = gr.File(label="The shown metrics (raw values) and the rounds, as CSV", file_count="multiple",
                        interactive=False, visible=False)
    status = gr.Markdown(elem_id="curves-status")
    warnings = gr.HTML(css_template=WARNINGS_CSS, elem_id="curves-warnings")
    with gr.Column(visible=False, elem_id="curves-charts") as charts:  # shown once there is a job
        rounds_title = gr.Markdown("### Rounds: is the loop working?", elem_id="curves-rounds-title")
        rounds_plot = gr.Plot(show_label=False, elem_id="curves-rounds")
        gr.Markdown("### Reward model: one line per round")
        reward_plot = gr.Plot(show_label=False, elem_id="curves-reward")
        title = gr.Markdown(optimiser_title(Algorithm.PPO), elem_id="curves-optimiser-title")
        optimiser_plot = gr.Plot(show_label=False, elem_id="curves-optimiser")
    return CurvesLayout(job, gr.State(None), round_choice, smoothing, refresh, export, downloads, status, warnings,
                        rounds_title, rounds_plot, reward_plot, title, optimiser_plot,
                        gr.Timer(LIVE_REFRESH_S, active=False), charts)


@dataclass(frozen=True)
class Charts(View):
    """A job's charts as shown: the rounds to choose from, a status line, warnings, three charts (the last titled by
    the job's policy optimiser), live refresh."""

    round_choice: gr.Dropdown
    status: str
    warnings: str
    rounds_title: str
    rounds_plot: PlotData
    reward_plot: PlotData
    optimiser_title: str
    optimiser_plot: PlotData
    timer: gr.Timer
    charts: dict


@dataclass(frozen=True)
class JobsAndCharts(Charts):
    """The charts plus the list of jobs (refresh, page load, tab opened)."""

    job: gr.Dropdown


@dataclass(frozen=True)
class PickedCharts(Charts):
    """The charts of a job chosen by hand, remembered for when the tab is opened again."""

    picked_job: int | None


def show_charts(studio: Studio, job_id: int | None, choice: str, smoothing: float) -> Charts:
    """The charts of a job, for one round (or all) at the given EMA smoothing."""
    with user_errors():
        curves = load_curves(studio, job_id)
    choices = curves.round_choices()
    choice = choice if choice in {value for _, value in choices} else ALL
    smoothing = float(smoothing)
    reward, optimiser = curves.select(curves.reward, choice), curves.select(curves.optimiser, choice)
    stem = (f"job{curves.job.id}" if curves.job else "studio") + ("" if choice == ALL else f"-round-{choice}")
    algorithm = curves.algorithm
    title, third = (("### SFT: steps on the demonstrations (loss on the answer tokens only)",
                     sft_figure(optimiser, smoothing, f"{stem}-sft")) if is_sft(curves.job) else
                    (optimiser_title(algorithm), optimiser_figure(optimiser, smoothing, f"{stem}-{algorithm.value}",
                                                                  algorithm)))
    return Charts(gr.Dropdown(choices=choices, value=choice), status_line(curves),
                  warnings_html(findings(curves, choice), curves.points > 0 or bool(curves.rounds)),
                  rounds_title(curves), rounds_figure(curves.rounds, curves.sft_oracle, "rounds"),
                  reward_figure(reward, smoothing, f"{stem}-reward"), title, third,
                  gr.Timer(active=bool(curves.job and curves.job.status.active)),
                  gr.update(visible=curves.job is not None or bool(curves.rounds)))


def pick_job(studio: Studio, job_id: int | None, smoothing: float) -> PickedCharts:
    """A job chosen in the list: all its rounds."""
    return PickedCharts(*show_charts(studio, job_id, ALL, smoothing).values(), job_id)


def show_jobs(studio: Studio, job_id: int | None, choice: str, smoothing: float) -> JobsAndCharts:
    """The current list of jobs and the charts of `job_id` (the newest job with data when it is None or gone)."""
    options = job_choices(studio)
    job_id = job_id if job_id in [value for _, value in options] else opening_job(studio)
    return JobsAndCharts(*show_charts(studio, job_id, choice, smoothing).values(),
                         gr.Dropdown(choices=options, value=job_id))


def export_data(studio: Studio, job_id: int | None, choice: str) -> gr.File:
    return gr.File(value=write_exports(load_curves(studio, job_id), choice), visible=True)


# ---- wiring -------------------------------------------------------------------------------------------------------

def build(studio: Studio) -> list[Refresh]:
    gr.api(bind(api_metrics, studio), api_name="metrics")
    ui = layout()
    charts, private = Charts.components(ui), {"api_visibility": "private"}
    settings = [ui.job, ui.round_choice, ui.smoothing]
    ui.job.input(bind(pick_job, studio), [ui.job, ui.smoothing], PickedCharts.components(ui), **private)
    ui.round_choice.input(bind(show_charts, studio), settings, charts, **private)
    ui.smoothing.release(bind(show_charts, studio), settings, charts, **private)
    ui.refresh.click(bind(show_jobs, studio), settings, JobsAndCharts.components(ui), **private)
    ui.timer.tick(bind(show_charts, studio), settings, charts, show_progress="hidden", **private)
    ui.export.click(bind(export_data, studio), [ui.job, ui.round_choice], ui.downloads, **private)
    opened = [ui.picked_job, ui.round_choice, ui.smoothing]
    return [Refresh(bind(show_jobs, studio), opened, JobsAndCharts.components(ui))]
