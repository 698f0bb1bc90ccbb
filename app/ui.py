"""The studio's one `gr.Blocks`: a tab per module, each built by that module's `build(studio)`."""

from __future__ import annotations

from pathlib import Path

import gradio as gr

from storage import Store

from .auth import Users
from .context import Studio

TABS: list = []  # modules with TITLE and build(studio), in display order
CSS_PATH = Path(__file__).resolve().parent.parent / "assets" / "studio.css"


def build_app(store: Store, users: Users | None = None) -> gr.Blocks:
    studio = Studio(store, users)
    with gr.Blocks(title="RLHF Studio") as blocks:
        gr.Markdown("# RLHF Studio")
        with gr.Tabs():
            for tab in TABS:
                with gr.Tab(tab.TITLE):
                    tab.build(studio)
    return blocks


def launch_options() -> dict:
    """Options Gradio 6 takes at launch rather than in Blocks (styling)."""
    return {"css_paths": [CSS_PATH]} if CSS_PATH.exists() else {}
