"""The Label tab's demonstration editor: when both answers fall short, the annotator writes a better one.

The **Better answer (W)** button (or the W key) opens an editor under the pair, prefilled with the left response
(the radio starts it from the right one, or empty); **Save answer** stores it as a demonstration of the prompt, with
its author, the pair, the response it was edited from and the seconds since the editor opened
(`labeling.demonstrations.demonstrations`); **Undo answer** takes the annotator's newest one back. The checkbox records
the answer as preferred to each response too (labels that train the reward model and DPO); it starts from the project's
setting `demonstration_preferences` (off unless set). The pair stays on screen to be voted on; a new pair closes the
editor. Texts are checked as every other text (size, NUL); the editor is a plain text box, so nothing in it renders.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import gradio as gr

from app.context import Studio, View, bind, markdown_literal, user_errors
from labeling.demonstrations.demonstration_formats import MAX_DEMONSTRATION_CHARS
from labeling.demonstrations.demonstrations import (
    SIDES,
    records_preferences,
    shown_texts,
    undo_demonstration,
    write_demonstration,
)
from storage.demonstrations import MAX_SECONDS

EMPTY = "empty"
START_FROM = [("Left response", "left"), ("Right response", "right"), ("Empty", EMPTY)]
KEYS_JS = """
if (!window.studioDemonstrationKeys) {
  window.studioDemonstrationKeys = true;
  document.addEventListener("keydown", (event) => {
    if (event.ctrlKey || event.altKey || event.metaKey || event.repeat || !["w", "W"].includes(event.key)) return;
    const target = event.target;
    const typing = target && (target.isContentEditable || ["TEXTAREA", "SELECT"].includes(target.tagName)
                              || (target.tagName === "INPUT" && target.type !== "checkbox"));
    if (typing) return;
    const button = document.getElementById("demo-open");
    if (!button || button.offsetParent === null || button.disabled) return;
    event.preventDefault();
    button.click();
  });
}
"""
Namer = Callable[[Studio, gr.Request | None, str | None], str]  # label_screen.annotator_name


@dataclass(frozen=True)
class EditorLayout:
    """The editor's components."""

    open: gr.Button
    panel: gr.Group
    start_from: gr.Radio
    text: gr.Textbox
    preferences: gr.Checkbox
    save: gr.Button
    cancel: gr.Button
    undo: gr.Button
    status: gr.Markdown
    texts: gr.State  # the pair's responses as shown: {"left", "right"}
    opened: gr.State  # when the editor opened (time spent = save - opened)


def layout() -> EditorLayout:
    """The open button and undo beside it, and the editor panel (hidden until opened)."""
    with gr.Row(elem_id="demo-tools"):
        open_button = gr.Button("✎ Better answer (W)", size="sm", elem_id="demo-open", scale=0, min_width=180)
        undo = gr.Button("↶ Undo answer", size="sm", elem_id="demo-undo", scale=0, min_width=140)
        status = gr.Markdown(elem_id="demo-status")
    with gr.Group(visible=False, elem_id="demo-editor") as panel:
        start_from = gr.Radio(START_FROM, value="left", label="Start from", elem_id="demo-from")
        text = gr.Textbox(label="Your answer", lines=6, max_length=MAX_DEMONSTRATION_CHARS, elem_id="demo-text")
        preferences = gr.Checkbox(label="Also record: my answer is better than each response shown",
                                  elem_id="demo-preferences")
        with gr.Row():
            save = gr.Button("Save answer", variant="primary", elem_id="demo-save")
            cancel = gr.Button("Cancel", elem_id="demo-cancel")
    gr.HTML("", js_on_load=KEYS_JS, elem_id="demo-keys")
    return EditorLayout(open_button, panel, start_from, text, preferences, save, cancel, undo, status, gr.State(None),
                        gr.State(None))


@dataclass(frozen=True)
class Opened(View):
    panel: dict
    start_from: str
    text: str
    preferences: bool
    texts: dict
    opened: float
    status: str


@dataclass(frozen=True)
class Closed(View):
    panel: dict
    status: str


def open_editor(studio: Studio, namer: Namer, typed: str, pair_id: int | None, request: gr.Request) -> Opened:
    """The editor, prefilled with the left response of the pair on screen."""
    with user_errors():
        name = namer(studio, request, typed)
        if pair_id is None:
            raise gr.Error("no pair is on screen; start labeling first", print_exception=False)
        texts = shown_texts(studio.store, name, pair_id)
        return Opened(gr.update(visible=True), "left", texts["left"], records_preferences(studio.store), texts,
                      time.time(), "")


def start_from(texts: dict | None, side: str) -> str:
    """The text the editor starts from: a response as shown, or nothing."""
    return (texts or {}).get(side, "") if side in SIDES else ""


def save(studio: Studio, namer: Namer, typed: str, pair_id: int | None, text: str, side: str, preferences: bool,
         opened: float | None, request: gr.Request) -> Closed:
    """Store the answer as a demonstration (and, when ticked, as preferred to each response); close the editor."""
    with user_errors():
        name = namer(studio, request, typed)
        if pair_id is None:
            raise gr.Error("no pair is on screen; start labeling first", print_exception=False)
        spent = round(time.time() - opened, 1) if opened is not None else None
        seconds = spent if spent is not None and spent <= MAX_SECONDS else None  # an editor left open overnight
        written = write_demonstration(studio.store, name, pair_id, text or "", None if side == EMPTY else side,
                                      seconds, bool(preferences))
    also = f" and {written.preferences} preference{'s' * (written.preferences != 1)}" if written.preferences else ""
    return Closed(gr.update(visible=False), f"Saved your answer (demonstration {written.id}){also}; now vote on "
                                            "the pair.")


def undo(studio: Studio, namer: Namer, typed: str, request: gr.Request) -> str:
    """Take back the annotator's newest demonstration."""
    with user_errors():
        demo = undo_demonstration(studio.store, namer(studio, request, typed))
    shown = demo.text if len(demo.text) <= 60 else demo.text[:59] + "…"
    return f"Took back demonstration {demo.id}: “{markdown_literal(shown)}”."


def api_submit_demonstration(studio: Studio, namer: Namer, annotator: str, pair_id: int, text: str,
                             edited_from: str, seconds: float | None, record_preferences: bool,
                             request: gr.Request) -> dict:
    """Store `annotator`'s better answer to the prompt of the pair reserved for them (refused for any other pair):
    `edited_from` is `left` or `right` (the response as shown) or `empty`; `seconds` the time spent (0 to 86400, or
    null); with `record_preferences` the answer is also preferred to each response. The same answer to one prompt is
    refused the second time. Returns `demonstration_id` and `preferences` (labels recorded)."""
    with user_errors():
        written = write_demonstration(studio.store, namer(studio, request, annotator), pair_id, text,
                                      None if edited_from == EMPTY else edited_from, seconds, bool(record_preferences))
    return {"demonstration_id": written.id, "preferences": written.preferences}


def api_undo_demonstration(studio: Studio, namer: Namer, annotator: str, request: gr.Request) -> dict:
    """Take back `annotator`'s newest demonstration (and the preferences it recorded); returns its id and text."""
    with user_errors():
        demo = undo_demonstration(studio.store, namer(studio, request, annotator))
    return {"demonstration_id": demo.id, "text": demo.text}


def close() -> Closed:
    return Closed(gr.update(visible=False), "")


def build(studio: Studio, ui: EditorLayout, name_box: gr.components.Component, pair_id: gr.State, namer: Namer) -> None:
    """Wire the editor to the Label tab's name box and the pair on screen (a new pair closes it); the public API
    endpoints `/submit_demonstration` and `/undo_demonstration`."""
    gr.api(bind(api_submit_demonstration, studio, namer), api_name="submit_demonstration")
    gr.api(bind(api_undo_demonstration, studio, namer), api_name="undo_demonstration")
    private = {"api_visibility": "private"}
    ui.open.click(bind(open_editor, studio, namer), [name_box, pair_id], Opened.components(ui), **private)
    ui.start_from.input(start_from, [ui.texts, ui.start_from], ui.text, **private)
    ui.save.click(bind(save, studio, namer), [name_box, pair_id, ui.text, ui.start_from, ui.preferences, ui.opened],
                  Closed.components(ui), **private)
    ui.cancel.click(bind(close), None, Closed.components(ui), **private)
    ui.undo.click(bind(undo, studio, namer), name_box, ui.status, **private)
    pair_id.change(bind(close), None, Closed.components(ui), **private)
