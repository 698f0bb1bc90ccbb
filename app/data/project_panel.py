"""The Data tab's Project section: which model each policy version came from, the reward base, the prompts, and (for
admins, in a store with no project yet) starting one on a model folder, as `python app.py init` does. Folders on this
machine (each version's, the reward base, the model a project started from) are shown to admins only.

The folder is checked and registered by `python app.py init` run in a subprocess (no shell): the serving process
never loads torch, and the command's one-line refusal is what the admin sees.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import gradio as gr

from app.audit import ACTOR_VARIABLE, studio_actor
from app.context import Refresh, Studio, View, bind, user_message
from labeling.versions.winrate import version_names
from storage.policies import list_policies
from storage.prompts import list_prompts
from storage.settings import REWARD_BASE_SETTING, get_setting

ROOT = Path(__file__).resolve().parents[2]
POLICY_HEADERS = ["version", "store round", "parent", "made from", "folder"]
FOLDER_HIDDEN = "(admins only)"
INIT_TIMEOUT_S = 1800  # a big model's pickle conversion or pad fix copies its weights


@dataclass(frozen=True)
class Project(View):
    """The project's summary line and its policy versions, one row each."""

    project_summary: str
    policies: list[list]


def show_project(studio: Studio, request: gr.Request) -> Project:
    """The project; to others than admins without the folders: no path, no note of a root (it names the folder the
    project started from)."""
    store = studio.store
    versions = list_policies(store)
    if not versions:
        return Project("No project yet: start one on a model folder below (or `python app.py init`).", [])
    prompts = list_prompts(store)
    heldout = sum(p.heldout for p in prompts)
    conversations = sum(p.messages is not None for p in prompts)
    names = version_names(versions)
    counts = (f"**{len(prompts) - heldout}** training prompts and **{heldout}** held out "
              f"({conversations} conversations)")
    if not studio.is_admin(request):
        rows = [[names[p.id], p.round, names.get(p.parent_id, "—"), "—" if p.parent_id is None else p.note or "",
                 FOLDER_HIDDEN] for p in reversed(versions)]
        return Project(f"**SFT policy**: {names[versions[0].id]} · {counts}", rows)
    reward_base = get_setting(store, REWARD_BASE_SETTING) or f"the SFT policy ({names[versions[0].id]})"
    summary = (f"**SFT policy** ({names[versions[0].id]}): `{versions[0].path}` · **reward base**: `{reward_base}` · "
               f"{counts}")
    rows = [[names[p.id], p.round, names.get(p.parent_id, "—"), p.note or "", p.path] for p in reversed(versions)]
    return Project(summary, rows)


@dataclass(frozen=True)
class Started(View):
    """What `init` said, and the project as it now is."""

    start_status: str
    project_summary: str
    policies: list[list]


def on_start_project(studio: Studio, folder: str, allow_pickle: bool, request: gr.Request) -> Started:
    """Start a project on `folder` in this store (admins): `python app.py init --db <store> --model <folder>`."""
    studio.require_admin(request)
    if not (folder or "").strip():
        raise gr.Error("type the path of a model folder on this machine (a save_pretrained directory, or a GGUF file)")
    command = [sys.executable, str(ROOT / "app.py"), "init", "--db", str(studio.store.path), "--model", folder.strip()]
    actor = {ACTOR_VARIABLE: studio_actor(getattr(request, "username", None))}  # the audit trail's user
    done = subprocess.run(command + (["--allow-pickle"] if allow_pickle else []), cwd=ROOT, capture_output=True,
                          text=True, timeout=INIT_TIMEOUT_S, stdin=subprocess.DEVNULL, env={**os.environ, **actor})
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or ["init failed"]
        raise gr.Error(user_message(lines[-1].removeprefix("error: ")), print_exception=False)
    return Started(done.stdout.strip().replace("\n", "\n\n"), *show_project(studio, request).values())


@dataclass(frozen=True)
class ProjectLayout:
    project_summary: gr.Markdown
    policies: gr.Dataframe
    folder: gr.Textbox
    allow_pickle: gr.Checkbox
    start: gr.Button
    start_status: gr.Markdown


def layout() -> ProjectLayout:
    gr.Markdown("### Project")
    summary = gr.Markdown()
    policies = gr.Dataframe(headers=POLICY_HEADERS, datatype="str", interactive=False, wrap=True)
    with gr.Accordion("Start a project on your model (admins; an empty store)", open=False):
        with gr.Row():
            folder = gr.Textbox(label="Model folder (or GGUF file) on this machine",
                                placeholder="/models/my-instruct-model", scale=3)
            allow_pickle = gr.Checkbox(label="Convert pickle-only weights (--allow-pickle)")
        start = gr.Button("Start project")
        status = gr.Markdown()
    return ProjectLayout(summary, policies, folder, allow_pickle, start, status)


def build(studio: Studio) -> Refresh:
    """Lay the section out and wire it; returns the refresh that shows the project when the tab opens."""
    ui = layout()
    ui.start.click(bind(on_start_project, studio), [ui.folder, ui.allow_pickle], Started.components(ui),
                   api_visibility="private")
    return Refresh(bind(show_project, studio), [], Project.components(ui))
