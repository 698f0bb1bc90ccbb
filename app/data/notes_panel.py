"""The Data tab's notes panel: the newest rationales and 1-7 ratings annotators gave with their judgements (shown as
plain text in a table: nothing in them runs or renders), and the project's settings for asking them.

Public API: `/judgement_notes()` (the newest notes: `{kind, label_id, annotator, rationale, ratings}`, ratings by
generation id) and for admins `/note_settings(rationale, ratings)` (each `off`, `optional` or `required`) and
`/overlap_training(mode)` (`each` or `majority`: how overlapped pair labels train, `labeling.stats.overlap`).
"""

from __future__ import annotations

from dataclasses import asdict

import gradio as gr

from app.context import Refresh, Studio, bind, user_errors
from labeling.queue.notes import note_modes, update_note_modes
from labeling.stats.overlap import set_overlap_training
from storage.audit import AuditAction
from storage.notes import list_notes

SHOWN = 100
HEADERS = ["kind", "label id", "annotator", "ratings (generation: 1-7)", "rationale"]


def api_judgement_notes(studio: Studio) -> list[dict]:
    """The newest notes (at most SHOWN): kind (pair or ranking), label id, annotator, rationale, ratings."""
    return [{**asdict(note), "ratings": {str(g): r for g, r in note.ratings.items()} if note.ratings else None}
            for note in list_notes(studio.store, SHOWN)]


def api_note_settings(studio: Studio, rationale: str, ratings: str, request: gr.Request) -> dict:
    """Admins: ask a rationale and ratings `off`, `optional` or `required`; returns both settings."""
    studio.require_admin(request)
    with user_errors():
        saved = update_note_modes(studio.store, rationale or None, ratings or None)
    studio.record(request, AuditAction.QUEUE_SETTINGS_CHANGED, **saved)
    return saved


def api_overlap_training(studio: Studio, mode: str, request: gr.Request) -> str:
    """Admins: how overlapped pair labels train, `each` or `majority` (one example per pair); returns the mode."""
    studio.require_admin(request)
    with user_errors():
        saved = set_overlap_training(studio.store, mode)
    studio.record(request, AuditAction.QUEUE_SETTINGS_CHANGED, overlap_training=saved)
    return saved


def notes_rows(studio: Studio) -> list[list]:
    return [[note.kind, note.label_id, note.annotator,
             ", ".join(f"{g}: {r}" for g, r in (note.ratings or {}).items()), note.rationale or ""]
            for note in list_notes(studio.store, SHOWN)]


def show_notes(studio: Studio) -> tuple[str, list[list]]:
    """The project's note settings and the newest notes, when the Data tab opens."""
    now = note_modes(studio.store)
    return f"Rationale: **{now['rationale']}** · ratings: **{now['ratings']}**", notes_rows(studio)


def build(studio: Studio) -> Refresh:
    """The panel and its endpoints; returns the refresh that fills its table when the tab opens."""
    gr.api(bind(api_judgement_notes, studio), api_name="judgement_notes")
    gr.api(bind(api_note_settings, studio), api_name="note_settings")
    gr.api(bind(api_overlap_training, studio), api_name="overlap_training")
    with gr.Accordion("Rationales and ratings", open=False, elem_id="notes-panel"):
        modes = gr.Markdown()
        table = gr.Dataframe(headers=HEADERS, datatype=["str", "number", "str", "str", "str"], interactive=False,
                             wrap=True, elem_id="notes-table")
    return Refresh(bind(show_notes, studio), [], [modes, table])
