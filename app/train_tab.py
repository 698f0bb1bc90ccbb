"""Train tab: loop settings with presets (the policy optimiser among them: PPO, GRPO or DPO), start/stop/resume
buttons, live job status; API start_loop, stop_job, job_status, resume_job. Jobs run in a worker process that
`trainers.jobs.launcher` starts, stops and resumes (under `serve --accelerate-config FILE`, each training phase on the
processes FILE asks for: the tab and the job's status say how many); this tab only reads their state."""

from __future__ import annotations

import html
import time
from dataclasses import dataclass

import gradio as gr

from labeling.selection import Selector
from storage import JobStatus
from storage import jobs as job_rows
from storage.audit import AuditAction
from storage.errors import InvalidInput
from storage.rounds import list_rounds
from storage.types import Job
from trainers.jobs.launch_config import AccelerateLaunch, read_launch_config
from trainers.jobs.launcher import reap_orphans, resume_job, start_job, stop_job
from trainers.jobs.layer import JobKind, job_kind_label
from trainers.loop.config import (
    Annotator,
    LoopConfig,
    OnWarning,
    job_settings,
    policy_job_kind,
    settings_from_json,
)
from trainers.loop.job_summary import job_summary
from trainers.loop.presets import Preset, loop_config, model_preset, project_preset, project_presets
from trainers.loop.prompt_use import check_against_store
from trainers.loop.time_left import time_left
from trainers.loop.waiting import waiting_for_people
from trainers.policy.config import Algorithm

from . import reward_form, root_action
from .code_names import refuse_code_names
from .context import Refresh, Studio, TabLink, View, bind, markdown_literal, user_errors
from .judging import studio_judge_config
from .refusals import refusing
from .train_checks import checked_form, field_label, in_form_words
from .train_form import (
    FORM,
    chosen_line,
    form_presets,
    limits_once_idle,
    on_algorithm,
    on_preset,
    people_default,
    project_form,
    run_now_label,
    schedule_text,
    show_limits,
)
from .train_words import ADVANCED_HEADING, COUNTS, DOCS_DIR, INFO, RESULT_LEGEND, STARTING, advanced_line

TITLE = "Train"
LOG_LINES = 12
POLL_S = 2.0


def job_status_dict(studio: Studio, job: Job | None) -> dict:
    """The job's state in plain fields (what /job_status returns)."""
    if job is None:
        return {"job_id": None, "status": "idle"}
    end = job.finished or time.time()
    error = job.error.strip().splitlines()[-1] if job.error else None
    return {"job_id": job.id, "kind": job.kind, "status": job.status.value, "phase": job.phase,
            "progress": job.progress, "elapsed_s": round(end - (job.started or job.created), 1), "error": error,
            "runs_on": runs_on(job.launch), "logs": job_rows.tail_logs(studio.store, job.id, LOG_LINES)}


def runs_on(launch: dict | None) -> str:
    """How a job's training phases run, in words (the job row keeps its accelerate config, described)."""
    if launch is None:
        return "1 process (the job's worker)"
    return f"{AccelerateLaunch.from_dict(launch).describe()}, accelerate config {launch['config_file']}"


def new_jobs_run_on(studio: Studio) -> str:
    """How jobs started here will run (serve --accelerate-config, read again: the file may have changed)."""
    if studio.accelerate_config is None:
        return runs_on(None)
    try:
        return runs_on(read_launch_config(studio.accelerate_config).to_dict())
    except InvalidInput as exc:
        return f"no processes until the accelerate config is fixed ({exc})"


def config_from_form(presets: dict[str, LoopConfig], preset: str, advanced: str, *values) -> LoopConfig:
    """The preset (of the project's `presets`), then the form's fields (each checked, by its label), then the advanced
    JSON on top; a reward of the functions alone starts from the preset's RLVR settings and reads no label field. A
    reward learning rate changed in the form counts as given when the JSON switches `reward_lora`."""
    on_top = settings_from_json(advanced)
    form, base = reward_form.form_for_reward(dict(zip(FORM, values, strict=True)), presets[preset], on_top)
    settings = {**base.to_dict(), **checked_form(form)}
    settings["label_budget"] = settings["label_budget"] or None  # blank or 0: from N
    try:
        config = LoopConfig.from_dict(settings)
    except InvalidInput as exc:
        raise InvalidInput(in_form_words(str(exc), form)) from None
    if config.reward_model.learning_rate != presets[preset].reward_model.learning_rate:
        on_top = {"reward_lr": config.reward_model.learning_rate, **on_top}
    return config.updated(on_top)


def start(studio: Studio, kind: JobKind, config: LoopConfig, request: gr.Request | None) -> dict:
    """Admins: check the settings against the store, then start a job of `kind`; returns its status."""
    studio.require_admin(request)
    refuse_code_names(studio, config.to_dict())  # `module:function` in any setting: code to run, command line only
    config = studio_judge_config(config, studio.judge)  # a judge's path or URL only from the command line
    store = studio.store
    check_against_store(config, store)
    kind = policy_job_kind(config) if kind == JobKind.POLICY else kind  # "Run DPO now" starts a dpo job
    reap_orphans(store)
    job_id = start_job(store, kind, job_settings(kind, config), studio.accelerate_config)
    defaults = LoopConfig().to_dict()
    studio.record(request, AuditAction.JOB_STARTED, job_id=job_id, kind=kind,
                  settings={name: value for name, value in config.to_dict().items() if value != defaults[name]})
    return job_status_dict(studio, job_rows.get_job(store, job_id))


def stop(studio: Studio, job_id: int, request: gr.Request | None) -> Job:
    """Admins: ask a job to stop (recorded in the audit trail)."""
    studio.require_admin(request)
    job = stop_job(studio.store, job_id)
    studio.record(request, AuditAction.JOB_STOPPED, job_id=job_id, status=job.status.value)
    return job


def resume(studio: Studio, job_id: int, request: gr.Request | None) -> Job:
    """Admins: offer a stopped, failed or interrupted job to a new worker (recorded in the audit trail)."""
    studio.require_admin(request)
    job = resume_job(studio.store, job_id)
    studio.record(request, AuditAction.JOB_RESUMED, job_id=job_id)
    return job


# ---- the public API -----------------------------------------------------------------------------------------------

def api_start_loop(studio: Studio, config_json: str, request: gr.Request) -> dict:
    """Start the human-preference loop with a JSON object of settings on top of the project's preset (the demo's
    settings, or the real-model ones chosen from its model: see the Train tab); returns the job status."""
    with user_errors():
        config = loop_config(project_preset(studio.store).config, settings_from_json(config_json))
        return start(studio, JobKind.LOOP, config, request)


def api_stop_job(studio: Studio, job_id: int, request: gr.Request) -> dict:
    """Ask a running job to stop; it ends `cancelled` within one step and leaves a consistent store."""
    with user_errors():
        return job_status_dict(studio, stop(studio, int(job_id), request))


def api_job_status(studio: Studio, job_id: int, request: gr.Request) -> dict:
    """Status, phase, progress, elapsed time, last log lines and error (in plain words) of a job."""
    studio.annotator(request, None)
    reap_orphans(studio.store)
    with user_errors():
        return job_status_dict(studio, job_rows.get_job(studio.store, int(job_id)))


def api_resume_job(studio: Studio, job_id: int, request: gr.Request) -> dict:
    """Continue a cancelled, failed or interrupted job from its last completed step."""
    with user_errors():
        return job_status_dict(studio, resume(studio, int(job_id), request))


# ---- the screen ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TrainLayout:
    """The Train tab's components; the form's fields are named as LoopConfig's (FORM)."""

    preset: gr.Dropdown
    annotator: gr.Radio
    selector: gr.Radio
    algorithm: gr.Radio
    rounds: gr.Number
    samples_per_prompt: gr.Number
    labels_per_round: gr.Number
    label_budget: gr.Number
    policy_iterations: gr.Number
    ensemble: gr.Number
    kl_coef: gr.Number
    reward_lr: gr.Number
    policy_lr: gr.Number
    reward_epochs: gr.Number
    group_size: gr.Number
    dpo_beta: gr.Number
    label_decay: gr.Number
    audit_share: gr.Number
    reward_patience: gr.Number
    reward_warm_start: gr.Checkbox
    on_warning: gr.Radio
    sft_first: gr.Checkbox
    advanced: gr.Code
    start_loop: gr.Button
    train_reward: gr.Button
    run_policy: gr.Button
    run_sft: gr.Button
    stop: gr.Button
    resume: gr.Button
    limits: gr.Markdown
    status: gr.Markdown
    progress: gr.HTML
    logs: gr.Textbox
    timer: gr.Timer  # on while the shown job is active
    chosen: gr.Markdown  # which preset the project's model gets, and why
    schedule: gr.Markdown  # the labels each round collects with the form's counts
    to_leaderboard: gr.Button  # under a finished job's result card: opens the Leaderboard tab (app.ui wires it)
    rank_k: gr.Number  # answers per judgement: 2 queues pairs, 3-6 rankings

    @property
    def form(self) -> list:
        return [getattr(self, name) for name in FORM]


def number(defaults: LoopConfig, name: str, **options) -> gr.Number:
    """A number field of the form: its value, its label and its sentence."""
    return gr.Number(defaults.setting(name), label=field_label(name, defaults.algorithm), info=INFO[name], **options)


def layout(runs_on_line: str = runs_on(None), preset: Preset | None = None,
           presets: dict[str, LoopConfig] | None = None) -> TrainLayout:
    """Preset and settings (the project's `preset`, of its `presets`), advanced JSON, the job buttons, then the job's
    status."""
    gr.Markdown("Launch training. Jobs run in a separate worker process; labeling goes on while they train. "
                f"Training phases run on {html.escape(runs_on_line)}.", elem_id="train-runs-on")
    preset = preset or model_preset(None)
    presets = presets or {preset.name: preset.config}
    defaults = presets[preset.name]
    chosen = gr.Markdown(chosen_line(preset), elem_id="train-preset-chosen")
    with gr.Row():
        preset = gr.Dropdown(list(presets), value=preset.name, label="Preset", info=INFO["preset"])
        annotator = gr.Radio([a.value for a in Annotator], value=defaults.annotator, label="Labels from",
                             info=INFO["annotator"])
        algorithm = gr.Radio([a.value for a in Algorithm], value=defaults.algorithm, label="Policy optimiser",
                             elem_id="train-algorithm", info=INFO["algorithm"])
    with gr.Row():
        # no minimum or maximum on the fields: `train_checks` refuses a value naming the field (Gradio would not)
        counts = [number(defaults, name, precision=0) for name in COUNTS]
        rank_k = gr.Number(defaults.rank_k, label=field_label("rank_k", defaults.algorithm), precision=0,
                           info="2: annotators pick the better of two answers; 3 to 6: they rank that many answers "
                                "to one prompt, best first (at most K).", elem_id="train-rank-k")
        sft_first = gr.Checkbox(defaults.sft.first, label=field_label("sft_first", defaults.algorithm),
                                info=INFO["sft_first"])
    schedule = gr.Markdown(schedule_text(defaults.rounds, defaults.labels_per_round, defaults.label_budget,
                                         defaults.label_decay), elem_id="train-schedule")
    with gr.Accordion(ADVANCED_HEADING, open=False, elem_id="train-advanced"):
        gr.Markdown(advanced_line(), elem_id="train-advanced-docs")
        with gr.Row():
            selector = gr.Radio([s.value for s in Selector], value=defaults.selector, label="Pair selector",
                                info=INFO["selector"])
            ensemble = number(defaults, "ensemble", precision=0)
            on_warning = gr.Radio([w.value for w in OnWarning], value=defaults.on_warning,
                                  label="On a failure warning", info=INFO["on_warning"])
        with gr.Row():
            kl_coef, reward_lr, policy_lr = (number(defaults, name) for name in ("kl_coef", "reward_lr", "policy_lr"))
            reward_epochs = number(defaults, "reward_epochs", precision=0)
            group_size = number(defaults, "group_size", precision=0, elem_id="train-group-size")
            dpo_beta = number(defaults, "dpo_beta", elem_id="train-dpo-beta")
        with gr.Row():
            label_decay, audit_share = number(defaults, "label_decay"), number(defaults, "audit_share")
            reward_patience = number(defaults, "reward_patience", precision=0)
            reward_warm_start = gr.Checkbox(defaults.reward_model.warm_start, info=INFO["reward_warm_start"],
                                            label=field_label("reward_warm_start", ""))
        gr.Markdown(INFO["advanced"], elem_id="train-advanced-json-info")
        advanced = gr.Code("{}", language="json", label="Advanced settings as JSON")
        reward_form.build(advanced, schedule, dict(
            zip(COUNTS, counts, strict=True), ensemble=ensemble, annotator=annotator, selector=selector,
            algorithm=algorithm, kl_coef=kl_coef, reward_lr=reward_lr, policy_lr=policy_lr,
            reward_epochs=reward_epochs, group_size=group_size, dpo_beta=dpo_beta, label_decay=label_decay,
            audit_share=audit_share, reward_patience=reward_patience, reward_warm_start=reward_warm_start))
    with gr.Row():
        buttons = [gr.Button("Start loop", variant="primary"), gr.Button("Train reward model now"),
                   gr.Button(run_now_label(defaults.algorithm)), gr.Button("Run SFT on the demonstrations"),
                   gr.Button("Stop", variant="stop", interactive=False),
                   gr.Button("Resume", interactive=False)]  # until a job is shown: `JobView` sets them
    limits, status = gr.Markdown(), gr.Markdown(elem_id="train-status")
    to_leaderboard = gr.Button("Open the Leaderboard →", size="sm", visible=False, elem_id="train-to-leaderboard")
    progress = gr.HTML()  # the link right under the result card, above the bar
    logs = gr.Textbox(label="Worker log (last lines)", lines=LOG_LINES, interactive=False, autoscroll=True)
    return TrainLayout(preset, annotator, selector, algorithm, *counts, ensemble, kl_coef, reward_lr, policy_lr,
                       reward_epochs, group_size, dpo_beta, label_decay, audit_share, reward_patience,
                       reward_warm_start, on_warning, sft_first, advanced, *buttons, limits, status, progress, logs,
                       gr.Timer(POLL_S, active=False), chosen, schedule, to_leaderboard, rank_k)


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


def newest_job(studio: Studio) -> JobView:
    """The newest job (page load, tab opened, live refresh); workers that died are marked interrupted first."""
    reap_orphans(studio.store)
    newest = job_rows.list_jobs(studio.store, limit=1)
    return job_view(studio, newest[0] if newest else None)


@refusing(JobView)
def on_start(studio: Studio, kind: JobKind, request: gr.Request, preset_name: str, advanced_json: str,
             *values) -> JobView:
    """Start loop / Train reward model now / Run PPO now: a job of `kind` with the form's settings."""
    # `request` before *values: Gradio passes the request only to a positional parameter, never to one after them
    with user_errors():
        config = config_from_form(project_presets(studio.store), preset_name, advanced_json, *values)
        state = start(studio, kind, config, request)
    return job_view(studio, job_rows.get_job(studio.store, state["job_id"]))


@refusing(JobView)
def on_stop(studio: Studio, request: gr.Request) -> JobView:
    """Stop: ask the active job to stop."""
    studio.require_admin(request)
    active = [j for j in job_rows.list_jobs(studio.store, limit=5) if j.status.active]
    if not active:
        raise gr.Error("no job is running")
    with user_errors():
        return job_view(studio, stop(studio, active[0].id, request))


@refusing(JobView)
def on_resume(studio: Studio, request: gr.Request) -> JobView:
    """Resume: continue the newest job from its last completed step."""
    studio.require_admin(request)
    reap_orphans(studio.store)
    newest = job_rows.list_jobs(studio.store, limit=1)
    if not newest:
        raise gr.Error("there is no job to resume; start one first")
    return job_view(studio, job_rows.get_job(studio.store, api_resume_job(studio, newest[0].id, request)["job_id"]))


# ---- wiring -------------------------------------------------------------------------------------------------------

def build(studio: Studio) -> list[Refresh | TabLink]:
    from . import sft_action  # it builds on this module's handlers

    gr.api(bind(api_start_loop, studio), api_name="start_loop")
    gr.api(bind(api_stop_job, studio), api_name="stop_job")
    gr.api(bind(api_resume_job, studio), api_name="resume_job")
    gr.api(bind(api_job_status, studio), api_name="job_status")
    gr.api(bind(sft_action.api_start_sft, studio), api_name="start_sft")
    gr.set_static_paths([DOCS_DIR])  # the advanced heading links to the docs (read-only, behind the login)

    ui = layout(new_jobs_run_on(studio), project_preset(studio.store), form_presets(studio.store))
    shown, settings, private = JobView.components(ui), [ui.preset, ui.advanced, *ui.form], {"api_visibility": "private"}
    ui.preset.change(bind(on_preset, studio), ui.preset, ui.form, **private)
    ui.algorithm.change(on_algorithm, ui.algorithm, [ui.run_policy, ui.policy_iterations, ui.policy_lr], **private)
    counts = [ui.rounds, ui.labels_per_round, ui.label_budget, ui.label_decay]
    limits = [ui.preset, ui.advanced, *counts]  # the labels the loop collects on top of the store's
    for count in counts:
        count.change(schedule_text, counts, ui.schedule, **private)
    for changed in limits:
        changed.change(bind(show_limits, studio), limits, ui.limits, **private)
    job_buttons = ((ui.start_loop, JobKind.LOOP), (ui.train_reward, JobKind.REWARD), (ui.run_policy, JobKind.POLICY))
    for button, kind in job_buttons:
        button.click(bind(on_start, studio, kind), settings, shown, **private)
    ui.run_sft.click(bind(sft_action.on_start_sft, studio), settings, shown, **private)
    root_action.build(studio)  # Make root, under the job buttons
    ui.stop.click(bind(on_stop, studio), None, shown, **private)
    ui.resume.click(bind(on_resume, studio), None, shown, **private)
    ui.timer.tick(bind(newest_job, studio), None, shown, **private).then(
        bind(limits_once_idle, studio), limits, ui.limits, **private)  # the poll that sees a job end
    people_seen = gr.State(False)  # whether this page has seen people's labels in the store
    return [Refresh(bind(newest_job, studio), [], shown),
            Refresh(bind(people_default, studio), [people_seen], [ui.annotator, people_seen]),
            Refresh(bind(project_form, studio), [], [ui.preset, *ui.form, ui.chosen], on_open=False),
            Refresh(bind(show_limits, studio), limits, [ui.limits]),
            TabLink(ui.to_leaderboard, "Leaderboard")]
