"""Train tab: loop settings with presets (the policy optimiser among them: PPO, GRPO or DPO), start/stop/resume
buttons, live job status; API start_loop, stop_job, job_status, resume_job. Jobs run in a worker process that
`trainers.jobs.launcher` starts, stops and resumes (under `serve --accelerate-config FILE`, each training phase on the
processes FILE asks for: the tab and the job's status say how many); this tab only reads their state, shown by
`app.train.job_view`. The form's settings become a run's `LoopConfig` in `app.train.train_checks`; Run SFT is
`app.train.sft_action`."""

from __future__ import annotations

import html
from dataclasses import dataclass

import gradio as gr

from app.context import Refresh, Studio, TabLink, bind, user_errors
from app.refusals import refusing
from app.train import reward_form, root_action
from app.train.code_names import refuse_code_names
from app.train.job_view import LOG_LINES, JobView, job_status_dict, job_view, runs_on
from app.train.judging import studio_judge_config
from app.train.sft_action import api_start_sft, on_start_sft
from app.train.train_checks import config_from_form, field_label
from app.train.train_form import (
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
from app.train.train_words import ADVANCED_HEADING, COUNTS, DOCS_DIR, INFO, advanced_line
from storage import jobs as job_rows
from storage.audit import AuditAction
from storage.errors import InvalidInput
from storage.types import ROUND_SELECTORS, Job
from trainers.jobs.launch_config import read_launch_config
from trainers.jobs.launcher import reap_orphans, resume_job, start_job, stop_job
from trainers.jobs.layer import JobKind
from trainers.loop.config import (
    Annotator,
    LoopConfig,
    OnWarning,
    job_settings,
    policy_job_kind,
    settings_from_json,
)
from trainers.loop.presets import Preset, loop_config, model_preset, project_preset, project_presets
from trainers.loop.prompt_use import check_against_store
from trainers.policy.config import Algorithm

TITLE = "Train"
POLL_S = 2.0


def new_jobs_run_on(studio: Studio) -> str:
    """How jobs started here will run (serve --accelerate-config, read again: the file may have changed)."""
    if studio.accelerate_config is None:
        return runs_on(None)
    try:
        return runs_on(read_launch_config(studio.accelerate_config).to_dict())
    except InvalidInput as exc:
        return f"no processes until the accelerate config is fixed ({exc})"


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
        return job_status_dict(studio, job_rows.get_job(studio.store, int(job_id)), studio.is_admin(request))


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
    check_share: gr.Number
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
    to_leaderboard: gr.Button  # under a finished job's result card: opens the Leaderboard tab (app.door.ui wires it)
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
            selector = gr.Radio([s.value for s in ROUND_SELECTORS], value=defaults.selector, label="Pair selector",
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
            label_decay, check_share = number(defaults, "label_decay"), number(defaults, "check_share")
            reward_patience = number(defaults, "reward_patience", precision=0)
            reward_warm_start = gr.Checkbox(defaults.reward_model.warm_start, info=INFO["reward_warm_start"],
                                            label=field_label("reward_warm_start", ""))
        gr.Markdown(INFO["advanced"], elem_id="train-advanced-json-info")
        advanced = gr.Code("{}", language="json", label="Advanced settings as JSON")
        reward_form.build(advanced, schedule, dict(
            zip(COUNTS, counts, strict=True), ensemble=ensemble, annotator=annotator, selector=selector,
            algorithm=algorithm, kl_coef=kl_coef, reward_lr=reward_lr, policy_lr=policy_lr,
            reward_epochs=reward_epochs, group_size=group_size, dpo_beta=dpo_beta, label_decay=label_decay,
            check_share=check_share, reward_patience=reward_patience, reward_warm_start=reward_warm_start))
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
                       reward_epochs, group_size, dpo_beta, label_decay, check_share, reward_patience,
                       reward_warm_start, on_warning, sft_first, advanced, *buttons, limits, status, progress, logs,
                       gr.Timer(POLL_S, active=False), chosen, schedule, to_leaderboard, rank_k)


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
    gr.api(bind(api_start_loop, studio), api_name="start_loop")
    gr.api(bind(api_stop_job, studio), api_name="stop_job")
    gr.api(bind(api_resume_job, studio), api_name="resume_job")
    gr.api(bind(api_job_status, studio), api_name="job_status")
    gr.api(bind(api_start_sft, studio), api_name="start_sft")
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
    ui.run_sft.click(bind(on_start_sft, studio), settings, shown, **private)
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
