"""Train tab: loop settings with presets, start/stop/resume buttons, live job status; API start_loop,
stop_job, job_status. Jobs run in a worker process; this tab only writes job rows and reads their state."""

from __future__ import annotations

import html
import time

import gradio as gr

from labeling.selection import Selector
from labeling.synthetic import DEFAULT_ORACLE
from storage import jobs as job_rows
from storage.errors import InvalidInput
from storage.policies import latest_policy
from storage.prompts import list_prompts
from storage.types import Job
from trainers.launcher import reap_orphans, resume_job, start_job
from trainers.loop_config import PRESETS, LoopConfig, check_against_store, job_settings, settings_from_json

from .context import Studio, user_errors

TITLE = "Train"
FORM = ("rounds", "samples_per_prompt", "labels_per_round", "ppo_iterations", "selector", "ensemble", "kl_coef",
        "reward_lr", "ppo_lr", "reward_epochs", "annotator")
LOG_LINES = 12


def job_status_dict(studio: Studio, job: Job | None) -> dict:
    """The job's state in plain fields (what /job_status returns)."""
    if job is None:
        return {"job_id": None, "status": "idle"}
    end = job.finished or time.time()
    error = job.error.strip().splitlines()[-1] if job.error else None
    return {"job_id": job.id, "kind": job.kind, "status": job.status.value, "phase": job.phase,
            "progress": job.progress, "elapsed_s": round(end - (job.started or job.created), 1), "error": error,
            "logs": job_rows.tail_logs(studio.store, job.id, LOG_LINES)}


def config_from_form(preset: str, advanced: str, *values) -> LoopConfig:
    """Preset, then the form's fields, then the advanced JSON on top."""
    settings = PRESETS[preset].to_dict()
    settings.update({name: value for name, value in zip(FORM, values)})
    for name in ("rounds", "samples_per_prompt", "labels_per_round", "ppo_iterations", "ensemble", "reward_epochs"):
        settings[name] = int(settings[name])
    settings.update(settings_from_json(advanced))
    return LoopConfig.from_dict(settings)


def build(studio: Studio) -> list:
    store = studio.store

    def start(kind: str, config: LoopConfig, request: gr.Request | None) -> dict:
        studio.require_admin(request)
        if config.oracle != DEFAULT_ORACLE:  # `module:function` names code the worker would import and run
            raise InvalidInput(f"the oracle {config.oracle[:80]!r} is not allowed from the studio; it names code to "
                               f"run, so only {DEFAULT_ORACLE} may be used here")
        policy = latest_policy(store)
        check_against_store(config, len(list_prompts(store, heldout=False)), policy.path if policy else None)
        reap_orphans(store)
        return job_status_dict(studio, job_rows.get_job(store, start_job(store, kind, job_settings(kind, config))))

    def start_loop(config_json: str, request: gr.Request) -> dict:
        """Start the human-preference loop with a JSON object of settings (see the Train tab); returns the job status."""
        with user_errors():
            return start("loop", LoopConfig.from_json(config_json), request)

    def stop_job(job_id: int, request: gr.Request) -> dict:
        """Ask a running job to stop; it ends `cancelled` within one step and leaves a consistent store."""
        studio.require_admin(request)
        with user_errors():
            return job_status_dict(studio, job_rows.request_cancel(store, int(job_id)))

    def job_status(job_id: int, request: gr.Request) -> dict:
        """Status, phase, progress, elapsed time, last log lines and error (in plain words) of a job."""
        studio.annotator(request, None)
        reap_orphans(store)
        with user_errors():
            return job_status_dict(studio, job_rows.get_job(store, int(job_id)))

    def resume(job_id: int, request: gr.Request) -> dict:
        """Continue a cancelled, failed or interrupted job from its last completed step."""
        studio.require_admin(request)
        with user_errors():
            return job_status_dict(studio, resume_job(store, int(job_id)))

    gr.api(start_loop, api_name="start_loop")
    gr.api(stop_job, api_name="stop_job")
    gr.api(resume, api_name="resume_job")
    gr.api(job_status, api_name="job_status")

    gr.Markdown("Launch training. Jobs run in a separate worker process; labeling goes on while they train.")
    defaults = PRESETS["demo"]
    with gr.Row():
        preset = gr.Dropdown(list(PRESETS), value="demo", label="Preset")
        annotator = gr.Radio(["oracle", "human"], value=defaults.annotator, label="Labels from")
        selector = gr.Radio([s.value for s in Selector], value=defaults.selector, label="Pair selector")
    with gr.Row():
        rounds = gr.Number(defaults.rounds, label="Rounds", precision=0, minimum=1)
        samples = gr.Number(defaults.samples_per_prompt, label="K: samples per prompt", precision=0, minimum=2)
        labels = gr.Number(defaults.labels_per_round, label="N: labels per round", precision=0, minimum=1)
        iterations = gr.Number(defaults.ppo_iterations, label="M: PPO iterations", precision=0, minimum=1)
        ensemble = gr.Number(defaults.ensemble, label="Reward ensemble size", precision=0, minimum=1)
    with gr.Row():
        kl_coef = gr.Number(defaults.kl_coef, label="β: KL coefficient", minimum=0)
        reward_lr = gr.Number(defaults.reward_lr, label="Reward LR")
        ppo_lr = gr.Number(defaults.ppo_lr, label="PPO LR")
        reward_epochs = gr.Number(defaults.reward_epochs, label="Reward epochs", precision=0, minimum=1)
    with gr.Accordion("Advanced settings (JSON, applied on top)", open=False):
        advanced = gr.Code("{}", language="json", label="Any LoopConfig field, e.g. {\"seed\": 1, \"lora\": true}")
    form = [rounds, samples, labels, iterations, selector, ensemble, kl_coef, reward_lr, ppo_lr, reward_epochs, annotator]
    with gr.Row():
        start_button = gr.Button("Start loop", variant="primary")
        reward_button = gr.Button("Train reward model now")
        ppo_button = gr.Button("Run PPO now")
        stop_button = gr.Button("Stop", variant="stop")
        resume_button = gr.Button("Resume")
    status = gr.Markdown()
    progress = gr.HTML()
    logs = gr.Textbox(label="Worker log (last lines)", lines=LOG_LINES, interactive=False, autoscroll=True)
    timer = gr.Timer(2.0, active=False)

    def render(job: Job | None):
        state = job_status_dict(studio, job)
        if job is None:
            return "No job yet.", "", "", gr.Timer(active=False)
        line = f"**Job {job.id}** ({job.kind}) — **{state['status']}**"
        if state["phase"]:
            line += f" — {html.escape(state['phase'])}"
        line += f" — {state['elapsed_s']:.0f} s"
        if state["error"]:
            line += f"\n\n❌ {html.escape(state['error'])}"
        fraction = state["progress"] or 0.0
        bar = f'<progress max="1" value="{fraction:.3f}" style="width:100%"></progress>'
        return line, bar, "\n".join(state["logs"]), gr.Timer(active=job.status.active)

    def refresh():
        reap_orphans(store)
        newest = job_rows.list_jobs(store, limit=1)
        return render(newest[0] if newest else None)

    def on_start(kind: str):
        # `request` first: Gradio passes the request only to a positional parameter, never to one after *values
        def handler(request: gr.Request, preset_name, advanced_json, *values):
            with user_errors():
                state = start(kind, config_from_form(preset_name, advanced_json, *values), request)
            return render(job_rows.get_job(store, state["job_id"]))
        return handler

    def on_stop(request: gr.Request):
        studio.require_admin(request)
        active = [j for j in job_rows.list_jobs(store, limit=5) if j.status.active]
        if not active:
            raise gr.Error("no job is running")
        return render(job_rows.request_cancel(store, active[0].id))

    def on_resume(request: gr.Request):
        studio.require_admin(request)
        reap_orphans(store)
        newest = job_rows.list_jobs(store, limit=1)
        if not newest:
            raise gr.Error("there is no job to resume; start one first")
        return render(job_rows.get_job(store, resume(newest[0].id, request)["job_id"]))

    def fill_preset(name: str):
        config = PRESETS[name]
        return [getattr(config, field) for field in FORM]

    outputs = [status, progress, logs, timer]
    preset.change(fill_preset, preset, form, api_visibility="private")
    start_button.click(on_start("loop"), [preset, advanced, *form], outputs, api_visibility="private")
    reward_button.click(on_start("reward"), [preset, advanced, *form], outputs, api_visibility="private")
    ppo_button.click(on_start("ppo"), [preset, advanced, *form], outputs, api_visibility="private")
    stop_button.click(on_stop, None, outputs, api_visibility="private")
    resume_button.click(on_resume, None, outputs, api_visibility="private")
    timer.tick(refresh, None, outputs, api_visibility="private")
    return [(refresh, outputs)]
