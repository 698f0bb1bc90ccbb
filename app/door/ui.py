"""The studio's one `gr.Blocks`: a tab per module, each built by that module's `build(studio)`.

A tab's `build` returns the `Refresh` listeners that fill it when the page loads and, unless told otherwise, each
time the tab is opened (so a tab never shows a stale list of jobs, samples or labels), and any `TabLink` buttons that
open another tab (which then fills as if opened by hand, and is the tab a reload keeps).
"""

from __future__ import annotations

from pathlib import Path

import gradio as gr

from app.auth import AuthFile, Users
from app.context import Refresh, Studio, TabLink
from app.curves import curves_tab
from app.data import data_tab
from app.door.limits import MAX_UPLOAD_MB
from app.label import label_tab
from app.train import train_tab
from app.versions import arena_tab, leaderboard_tab, samples_tab
from storage import Store

# modules with TITLE and build(studio), in display order
TABS: list = [label_tab, train_tab, curves_tab, samples_tab, leaderboard_tab, arena_tab, data_tab]
CSS_PATH = Path(__file__).resolve().parents[2] / "assets" / "studio.css"
# the tab a browser last opened, kept in its localStorage so a reload reopens it (no secret: a fixed key outlives a
# restart of the server)
OPENED_TAB = {"storage_key": "rlhf-studio-tab", "secret": "rlhf-studio-opened-tab"}


def build_app(store: Store, users: AuthFile | Users | None = None,
              accelerate_config: str | None = None, judge: dict | None = None) -> gr.Blocks:
    studio = Studio(store, users, accelerate_config, judge)
    with gr.Blocks(title="RLHF Studio") as blocks:
        gr.Markdown("# RLHF Studio")
        opened = gr.BrowserState(None, **OPENED_TAB)
        on_open: dict[str, list[Refresh]] = {}
        links: list[TabLink] = []
        with gr.Tabs() as tabs:
            for module in TABS:
                with gr.Tab(module.TITLE, id=module.TITLE) as tab:
                    built = module.build(studio)
                links += [item for item in built if isinstance(item, TabLink)]
                refreshes = [item for item in built if isinstance(item, Refresh)]
                on_open[module.TITLE] = [refresh for refresh in refreshes if refresh.on_open]
                for refresh in refreshes:
                    triggers = [blocks.load, tab.select] if refresh.on_open else [blocks.load]
                    gr.on(triggers, refresh.fn, refresh.inputs, refresh.outputs, api_visibility="private")
        for link in links:
            opening = link.button.click(open_tab(link.tab), None, [tabs, opened], api_visibility="private", queue=False)
            for refresh in on_open[link.tab]:
                opening.then(refresh.fn, refresh.inputs, refresh.outputs, api_visibility="private")
        tabs.select(remember_tab, None, opened, api_visibility="private", queue=False)
        blocks.load(reopen_tab, opened, tabs, api_visibility="private", queue=False)
    return blocks


def remember_tab(event: gr.SelectData) -> str:
    """The tab just opened, for the browser to remember."""
    return event.value


def open_tab(title: str):
    """A link's listener: select the tab `title` and remember it, as a click on the tab would."""

    def opening() -> tuple[gr.Tabs, str]:
        return gr.Tabs(selected=title), title

    return opening


def reopen_tab(opened: str | None) -> gr.Tabs | dict:
    """On page load (a reload): the tab the browser remembers, if it still exists."""
    return gr.Tabs(selected=opened) if opened in {module.TITLE for module in TABS} else gr.skip()


def launch_options(max_upload_mb: float = MAX_UPLOAD_MB) -> dict:
    """Options Gradio 6 takes at launch rather than in Blocks: styling and the upload size cap."""
    options = {"max_file_size": int(max_upload_mb * gr.FileSize.MB)}
    if CSS_PATH.exists():
        options["css_paths"] = [CSS_PATH]
    return options
