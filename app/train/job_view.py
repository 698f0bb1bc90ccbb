"""The Train tab's job view: the shown job's status line (its phase, the time elapsed and left, the result card, an
error, a warning), its progress bar, the worker's last log lines and the job buttons as its state allows; and the same
job state in plain fields (`job_status_dict`, what the API's `/job_status` returns). The Train tab and its SFT action
(`app.train.sft_action`) both show a job through it."""

from __future__ import annotations

import time
from dataclasses import dataclass

import gradio as gr

from app.context import Studio, View, markdown_literal
from app.train import root_action
from app.train.train_words import RESULT_LEGEND, STARTING
from storage import JobStatus
from storage import jobs as job_rows
from storage.rounds import list_rounds
from storage.types import Job
from trainers.jobs.launch_config import AccelerateLaunch
from trainers.jobs.layer import JobKind, job_kind_label
from trainers.loop.config import LoopConfig
from trainers.loop.job_summary import job_summary
from trainers.loop.time_left import time_left
from trainers.loop.waiting import waiting_for_people

LOG_LINES = 12


def job_status_dict(studio: Studio, job: Job | None, admin: bool = True) -> dict:
    """The job's state in plain fields (what /job_status returns); `runs_on` names the accelerate config's file only
    to an admin (`admin`), the processes alone to an annotator."""
    if job is None:
        return {"job_id": None, "status": "idle"}
    end = job.finished or time.time()
    error = job.error.strip().splitlines()[-1] if job.error else None
    return {"job_id": job.id, "kind": job.kind, "status": job.status.value, "phase": job.phase,
            "progress": job.progress, "elapsed_s": round(end - (job.started or job.created), 1), "error": error,
            "runs_on": runs_on(job.launch, admin), "logs": job_rows.tail_logs(studio.store, job.id, LOG_LINES)}


def runs_on(launch: dict | None, admin: bool = True) -> str:
    """How a job's training phases run, in words (the job row keeps its accelerate config, described); the config's
    file only for an admin (`admin`): a path on the studio's machine is none of an annotator's business."""
    if launch is None:
        return "1 process (the job's worker)"
    described = AccelerateLaunch.from_dict(launch).describe()
    return f"{described}, accelerate config {launch['config_file']}" if admin else described


@dataclass(frozen=True)
class JobView(View):
    """The shown job: a status line, a progress bar, the worker's last log lines; live refresh while it is active;
    the job buttons as its state allows (starts while none runs, Stop while one does, Resume when it stopped early)."""

    status: str
    progress: str
    logs: str
    timer: gr.Timer
    start_loop: dict
    train_reward: dict
    run_policy: dict
    run_sft: dict
    stop: dict
    resume: dict
    to_leaderboard: dict  # shown with a result card


def job_buttons(job: Job | None) -> tuple[dict, ...]:
    """The start buttons, Stop and Resume, enabled as `job` (the newest) allows."""
    active = job is not None and job.status.active
    resumable = job is not None and job.status.resumable
    return (*[gr.update(interactive=not active)] * 4, gr.update(interactive=active), gr.update(interactive=resumable))


def job_view(studio: Studio, job: Job | None) -> JobView:
    state = job_status_dict(studio, job)
    if job is None:
        return JobView("No job yet.", "", "", gr.Timer(active=False), *job_buttons(None), gr.update(visible=False))
    line = f"**Job {job.id}** ({job_kind_label(job)}) — **{state['status']}**"
    result = None if job.status.active else job_summary(studio.store, job)
    if state["phase"] and result is None:
        line += f" — {markdown_literal(state['phase'])}"
    elif job.status is JobStatus.QUEUED:
        line += f" — {STARTING}"
    paced = job.status.active and waiting_for_people(job) is None  # people's pace is not the job's: no estimate
    left = seconds_left(studio, job, state) if paced else None
    line += f" — {time_line(state['elapsed_s'], state['progress'], paced, left)}"
    line += f"\n\nTrains on {markdown_literal(state['runs_on'])}."
    if result is not None:  # the result card in place of the phase, which ended
        line += f"\n\n**Result:** {markdown_literal(result)}. The **Leaderboard** tab ranks every version:"
        line += f"\n\n{RESULT_LEGEND}" if " vs SFT " in result or "oracle score" in result else ""
    if state["error"]:
        line += f"\n\n❌ {markdown_literal(state['error'])}"
    line += root_action.root_warning_lines(studio.store, job.id)  # an SFT version not made the root
    if job.status is JobStatus.PAUSED:
        line += "\n\n⚠ The loop paused on a failure warning (the Curves tab shows it); **Resume** continues past it."
    bar = f'<progress max="1" value="{state["progress"] or 0.0:.3f}" style="width:100%"></progress>'
    return JobView(line, bar, "\n".join(state["logs"]), gr.Timer(active=job.status.active), *job_buttons(job),
                   gr.update(visible=result is not None))


def duration(seconds: float) -> str:
    """`45 s`, `3 min 05 s`, `1 h 02 min`."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds // 60 % 60:02d} min"


def seconds_left(studio: Studio, job: Job, state: dict) -> float | None:
    """The estimate of the time left (`trainers.loop.time_left`); a loop's from the rounds it has ended."""
    if job.kind != JobKind.LOOP:
        return time_left(state["elapsed_s"], state["progress"])
    start = job.started or job.created
    ends = [row["created"] - start for row in list_rounds(studio.store, job.id)]
    if any(end < 0 for end in ends):  # rounds of a run before a resume (`started` moved on): the pace alone
        return time_left(state["elapsed_s"], state["progress"])
    return time_left(state["elapsed_s"], state["progress"], job.config.get("rounds", LoopConfig().rounds), ends)


def time_line(elapsed_s: float, progress: float | None, active: bool, left_s: float | None = None) -> str:
    """Percent done, time elapsed and, while the job runs, the estimate of the time left (`left_s`; None: too early
    to tell, "estimating…")."""
    if progress is None:
        return f"{duration(elapsed_s)} elapsed"
    line = f"{progress:.0%} · {duration(elapsed_s)} elapsed"
    if active and progress < 1:
        line += f", about {duration(left_s)} left" if left_s is not None else ", estimating the time left…"
    return line
