"""The Data tab's Prompt references section: the prompts that carry a reference (the fields a prompt file gave
beside the prompt, such as `answer`, which reward functions check against), the first REFERENCES_SHOWN of them.
Admins only (everyone without --auth): a reference is the verifiable answer, and an annotator who saw it would label
with it; others read how many prompts carry one."""

from __future__ import annotations

import json
from dataclasses import dataclass

import gradio as gr

from app.context import Refresh, Studio, View, bind
from storage.prompts import count_with_reference, prompts_with_reference

REFERENCE_HEADERS = ["id", "split", "prompt", "reference"]
REFERENCES_SHOWN = 50
PROMPT_SHOWN_CHARS = 160


@dataclass(frozen=True)
class References(View):
    """How many prompts carry a reference, and the first of them, one row each."""

    reference_summary: str
    references: list[list]


def show_references(studio: Studio, request: gr.Request) -> References:
    total = count_with_reference(studio.store)
    if total and not studio.is_admin(request):
        return References(f"**{total}** prompts carry a reference (the answer reward functions check); only admins "
                          "read them, so that no one labels with the answer in mind.", [])
    if not total:
        return References("No prompt carries a reference: import a file whose rows hold fields beside `prompt` "
                          "(e.g. `{\"prompt\": \"What is 2 + 3?\", \"answer\": \"5\"}`).", [])
    shown = prompts_with_reference(studio.store, limit=REFERENCES_SHOWN)
    rows = [[p.id, "held out" if p.heldout else "training", p.text[:PROMPT_SHOWN_CHARS],
             json.dumps(p.reference, ensure_ascii=False)] for p in shown]
    more = f" (the first {len(shown)} shown)" if total > len(shown) else ""
    return References(f"**{total}** prompts carry a reference{more}.", rows)


@dataclass(frozen=True)
class ReferencesLayout:
    reference_summary: gr.Markdown
    references: gr.Dataframe


def build(studio: Studio) -> Refresh:
    """Lay the section out; returns the refresh that fills it when the tab opens."""
    with gr.Accordion("Prompt references", open=False):
        ui = ReferencesLayout(gr.Markdown(), gr.Dataframe(headers=REFERENCE_HEADERS, datatype="str",
                                                          interactive=False, wrap=True))
    return Refresh(bind(show_references, studio), [], References.components(ui))
