"""The Leaderboard's **Take a version out** panel (admins): export a version as a Hugging Face folder with its model
card, optionally with a GGUF file and an Ollama Modelfile, as an `export` job in the worker's process (the serving
process never loads torch); the newest export's state and folder shown beneath. API `/start_export`.
The command line does the same: `python app.py export-model vK --out DIR [--gguf] [--quant q8_0]`.
"""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from app.context import Refresh, Studio, bind, user_message
from labeling.versions.winrate import version_names
from storage import jobs as job_rows
from storage.audit import AuditAction
from storage.policies import list_policies
from trainers.jobs.launcher import start_job
from trainers.jobs.layer import JobKind

NO_GGUF = "folder only"
QUANTS = (NO_GGUF, "f16", "q8_0")


def version_choices(studio: Studio) -> list[str]:
    """Every version's name, newest first."""
    return list(reversed(version_names(list_policies(studio.store)).values()))


def start_export(studio: Studio, version: str, quant: str, request: gr.Request = None) -> str:
    """Admins: start an export job for `version` (`vK`), with a GGUF of `quant` unless `folder only`."""
    studio.require_admin(request)
    if version not in version_choices(studio):
        raise gr.Error(user_message(f"no version {version!r}; choose one of the list"), print_exception=False)
    if quant not in QUANTS:
        raise gr.Error(user_message(f"GGUF {quant!r} is not one of {', '.join(QUANTS)}"), print_exception=False)
    config = {"version": version, "quant": None if quant == NO_GGUF else quant}
    job_id = start_job(studio.store, JobKind.EXPORT, config)
    studio.record(request, AuditAction.JOB_STARTED, job_id=job_id, kind=JobKind.EXPORT.value, **config)
    return f"export job {job_id} started: {version}" + (f" with a {quant} GGUF" if config["quant"] else "")


def newest_export(studio: Studio, request: gr.Request = None) -> str:
    """The newest export job's state: its folder once done (to admins: folders on this machine are theirs to read),
    its error if it failed."""
    job = next((j for j in job_rows.list_jobs(studio.store) if j.kind == JobKind.EXPORT), None)
    if job is None:
        return "No export yet."
    if not studio.is_admin(request):
        return f"export job {job.id} {job.status.value} (admins see its folder)"
    if job.error:
        return f"export job {job.id} {job.status.value}: {job.error.splitlines()[-1]}"
    return f"export job {job.id} {job.status.value}: " + "; ".join(job_rows.tail_logs(studio.store, job.id) or
                                                                   [job.phase or "waiting for the worker"])


@dataclass(frozen=True)
class ExportLayout:
    version: gr.Dropdown
    quant: gr.Radio
    export: gr.Button
    state: gr.Textbox


def layout() -> ExportLayout:
    with gr.Accordion("Take a version out (admins)", open=False, elem_id="export-panel"):
        gr.Markdown("A version as a Hugging Face folder with its model card (lineage, judgements, win rate), written "
                    "into the store's data folder under `exports/`; optionally a GGUF file for llama.cpp and Ollama "
                    "with a Modelfile. See docs/export.md.")
        with gr.Row():
            version = gr.Dropdown([], label="Version", info="the version to export, as the leaderboard names it")
            quant = gr.Radio(list(QUANTS), value=NO_GGUF, label="GGUF",
                             info="folder only, or also a GGUF: f16 keeps the weights, q8_0 is about half the size")
        export = gr.Button("Export", variant="secondary")
        state = gr.Textbox(label="Newest export", interactive=False, lines=2)
    return ExportLayout(version, quant, export, state)


def show_exports(studio: Studio, request: gr.Request) -> tuple:
    choices = version_choices(studio)
    return gr.update(choices=choices, value=choices[0] if choices else None), newest_export(studio, request)


def build(studio: Studio, ui: ExportLayout) -> list[Refresh]:
    ui.export.click(bind(start_export, studio), [ui.version, ui.quant], ui.state, api_name="start_export")
    return [Refresh(bind(show_exports, studio), [], [ui.version, ui.state])]
