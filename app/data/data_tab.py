"""Data tab: the project (its model and policy versions), import prompts and preference data sets, export the
labels, see how each annotator labels, and (admins) the audit trail of admin actions.

Imports, exports and the audit trail are for admins under --auth. Exports are written to a fresh temporary folder
and offered as a download; no path is ever typed.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import gradio as gr

from app.audit import HEADERS as AUDIT_HEADERS
from app.audit import audit_rows, write_audit_csv
from app.context import Refresh, Studio, View, bind, markdown_literal, user_errors
from app.data import judge_panel, project_panel, references_panel
from app.data.preferences import import_into_project, import_notes
from labeling.stats.agreement import agreement_summary, annotator_stats
from labeling.stats.reliability import label_alpha
from labeling.transfer.export import export_labels
from labeling.transfer.importing import import_prompt_file
from storage.audit import AuditAction
from storage.votes import current_votes

TITLE = "Data"
AUDIT_SHOWN = 200  # newest actions shown on the tab; the CSV holds them all
STATS_HEADERS = ["annotator", "labels", "skips", "tie rate", "both bad rate", "picks left", "median decision (s)",
                 "pairs shared", "agreement", "Cohen's κ"]


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.0f}%"


def _num(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


@dataclass(frozen=True)
class Stats(View):
    """Per-annotator rows and a one-line agreement summary (numbers only: names go in the table as text)."""

    table: list[list]
    summary: str


def stats_table(studio: Studio) -> Stats:
    votes = current_votes(studio.store)
    rows = [[s.annotator, s.labels, s.skips, _pct(s.tie_rate), _pct(s.both_bad_rate), _pct(s.left_rate),
             _num(None if s.median_decision_ms is None else s.median_decision_ms / 1000, 1),
             s.agreement.pairs, _pct(s.agreement.percent), _num(s.agreement.kappa)]
            for s in annotator_stats(votes)]
    summary = agreement_summary(votes)
    if summary.pairs == 0:
        return Stats(rows, "No pair has been labeled by two annotators yet; raise the overlap to measure agreement.")
    alpha, units = label_alpha(studio.store)  # pairs and ranking comparisons, any number of annotators
    return Stats(rows, f"**{summary.pairs}** pairs labeled by two or more annotators · percent agreement "
                       f"**{_pct(summary.percent)}** · Light's κ (mean pairwise Cohen's κ, ties a class) "
                       f"**{_num(summary.kappa)}** · Krippendorff's α **{_num(alpha)}** over {units} items")


# ---- handlers (the buttons are public API endpoints too) ------------------------------------------------------------

def on_import_prompts(studio: Studio, path: str | None, heldout: bool, request: gr.Request) -> str:
    studio.require_admin(request)
    if not path:
        raise gr.Error("choose a .jsonl, .csv or .txt file of prompts first")
    with user_errors():
        result = import_prompt_file(studio.store, path, heldout=heldout)
        notes = import_notes(studio.store, result.ids)
    studio.record(request, AuditAction.PROMPTS_IMPORTED, file=Path(path).name, heldout=bool(heldout),
                  added=result.added, duplicates=result.duplicates)
    return " ".join([f"Imported {result.added} prompts ({result.duplicates} duplicates skipped)."] +
                    [markdown_literal(note) + "." for note in notes])


def on_import_preferences(studio: Studio, path: str | None, source: str, skip_invalid: bool,
                          request: gr.Request) -> str:
    studio.require_admin(request)
    if not path:
        raise gr.Error("choose a .jsonl, .jsonl.gz or .parquet preference file first")
    with user_errors():
        result = import_into_project(studio.store, path, source, skip_invalid)
        notes = import_notes(studio.store, result.prompt_ids, result.source)
    studio.record(request, AuditAction.PREFERENCES_IMPORTED, file=Path(path).name, source=source,
                  added=result.added, duplicates=result.duplicates, invalid=result.invalid.count)
    return " ".join(markdown_literal(text) for text in [result.summary(), *(note + "." for note in notes)])


@dataclass(frozen=True)
class Export(View):
    """The written file offered as a download, and what it holds."""

    download: gr.DownloadButton
    export_status: str


def on_export(studio: Studio, fmt: str, suffix: str, request: gr.Request) -> Export:
    """Write the labels in `fmt` to a fresh temporary folder and offer the file."""
    studio.require_admin(request)
    folder = Path(tempfile.mkdtemp(prefix="studio-export-"))
    with user_errors():
        result = export_labels(studio.store, fmt, folder / f"labels-{fmt}-{time.strftime('%Y%m%d-%H%M%S')}{suffix}")
    studio.record(request, AuditAction.LABELS_EXPORTED, format=fmt, file=result.path.name, rows=result.rows)
    kept = "left out" if fmt == "trl" else "included"
    return Export(gr.DownloadButton(value=str(result.path), visible=True),
                  f"{result.rows} rows ({kept}: {result.ties} ties, {result.both_bad} both bad, {result.skips} skips).")


def on_stats(studio: Studio, request: gr.Request) -> Stats:
    studio.annotator(request, None)  # signed in, under --auth
    return stats_table(studio)


@dataclass(frozen=True)
class Audit(View):
    """The newest admin actions, shown to admins only."""

    audit_box: gr.Column
    audit_table: list[list]


def on_audit(studio: Studio, request: gr.Request) -> Audit:
    """The audit trail for admins (everyone without --auth); hidden from other users."""
    if studio.users is not None and not studio.users.is_admin(getattr(request, "username", None)):
        return Audit(gr.Column(visible=False), [])
    return Audit(gr.Column(visible=True), audit_rows(studio.store, AUDIT_SHOWN))


def on_export_audit(studio: Studio, request: gr.Request) -> gr.DownloadButton:
    """Write the whole audit trail as CSV to a fresh temporary folder and offer it (the export is recorded too)."""
    studio.require_admin(request)
    path = Path(tempfile.mkdtemp(prefix="studio-audit-")) / f"audit-{time.strftime('%Y%m%d-%H%M%S')}.csv"
    rows = write_audit_csv(studio.store, path)
    studio.record(request, AuditAction.AUDIT_EXPORTED, rows=rows)
    return gr.DownloadButton(value=str(path), visible=True)


# ---- the screen and its wiring --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class DataLayout:
    """The Data tab's components."""

    prompt_file: gr.File
    heldout: gr.Checkbox
    import_prompts: gr.Button
    prompt_status: gr.Markdown
    preference_file: gr.File
    source: gr.Textbox
    skip_invalid: gr.Checkbox
    import_preferences: gr.Button
    preference_status: gr.Markdown
    fmt: gr.Radio
    suffix: gr.Radio
    export: gr.Button
    download: gr.DownloadButton
    export_status: gr.Markdown
    summary: gr.Markdown
    table: gr.Dataframe
    refresh: gr.Button
    audit_box: gr.Column
    audit_table: gr.Dataframe
    refresh_audit: gr.Button
    export_audit: gr.Button
    audit_download: gr.DownloadButton


def layout() -> DataLayout:
    """Three columns (import prompts, import preferences, export labels), the annotators' statistics, then the
    audit trail (hidden until an admin's page loads)."""
    with gr.Row(equal_height=False):
        with gr.Column():
            gr.Markdown("### Import prompts\n`.jsonl`, `.jsonl.gz`, `.parquet` (a `prompt` field: text, or "
                        "`{role, content}` turns ending with a user turn; or `messages`), `.csv` (a `prompt` column) "
                        "or `.txt` (one per line). Duplicates are skipped; a prompt longer than the policy can read "
                        "is refused by line.")
            prompts = [gr.File(label="Prompt file", file_types=[".jsonl", ".gz", ".parquet", ".csv", ".txt"],
                               type="filepath"),
                       gr.Checkbox(label="Held out (evaluation only)"), gr.Button("Import prompts"), gr.Markdown()]
        with gr.Column():
            gr.Markdown("### Import preference data\nTRL's formats: `prompt`, `chosen`, `rejected` as text or turns, "
                        "or whole dialogues sharing the prompt (hh-rlhf); optional `margin` (`.jsonl`, `.jsonl.gz`, "
                        "`.parquet`). Rows become labels by the source name.")
            preferences = [gr.File(label="Preference file", file_types=[".jsonl", ".gz", ".parquet"], type="filepath"),
                           gr.Textbox(label="Source name", placeholder="e.g. hh-rlhf", max_length=64),
                           gr.Checkbox(label="Skip invalid rows (counted and listed)"),
                           gr.Button("Import preferences"), gr.Markdown()]
        with gr.Column():
            gr.Markdown("### Export labels\n**trl**: `prompt, chosen, rejected` (ties, both bad and skips left out). "
                        "**soft**: every label with outcome, target (1, 0, 0.5) and annotator.")
            export = [gr.Radio(["trl", "soft"], value="trl", label="Format"),
                      gr.Radio([".jsonl", ".parquet"], value=".jsonl", label="File type"), gr.Button("Export"),
                      gr.DownloadButton("Download export", visible=False), gr.Markdown()]
    gr.Markdown("### Annotators")
    stats = [gr.Markdown(), gr.Dataframe(headers=STATS_HEADERS, datatype="str", interactive=False, wrap=True),
             gr.Button("Refresh statistics", size="sm")]
    with gr.Column(visible=False) as audit_box:
        gr.Markdown(f"### Audit trail\nWho started, stopped or resumed jobs, changed the queue settings, imported or "
                    f"exported, and when; the newest {AUDIT_SHOWN} here, all of them in the CSV.")
        audit = [gr.Dataframe(headers=AUDIT_HEADERS, datatype="str", interactive=False, wrap=True)]
        with gr.Row():
            audit += [gr.Button("Refresh audit trail", size="sm"), gr.Button("Export audit trail (CSV)", size="sm"),
                      gr.DownloadButton("Download audit CSV", visible=False, size="sm")]
    return DataLayout(*prompts, *preferences, *export, *stats, audit_box, *audit)


def build(studio: Studio) -> list[Refresh]:
    project = project_panel.build(studio)
    ui = layout()
    ui.import_prompts.click(bind(on_import_prompts, studio), [ui.prompt_file, ui.heldout], ui.prompt_status,
                            api_name="import_prompts")
    ui.import_preferences.click(bind(on_import_preferences, studio), [ui.preference_file, ui.source, ui.skip_invalid],
                                ui.preference_status, api_name="import_preferences")
    ui.export.click(bind(on_export, studio), [ui.fmt, ui.suffix], Export.components(ui), api_name="export_labels")
    ui.refresh.click(bind(on_stats, studio), None, Stats.components(ui), api_name="annotator_stats")
    ui.refresh_audit.click(bind(on_audit, studio), None, Audit.components(ui), api_visibility="private")
    ui.export_audit.click(bind(on_export_audit, studio), None, ui.audit_download, api_name="export_audit")
    from app.data import gold_panel, notes_panel  # gold items: each annotator's accuracy; rationales and ratings

    panels = [references_panel.build(studio), judge_panel.build(studio), gold_panel.build(studio),
              notes_panel.build(studio)]
    return [project, *panels, Refresh(bind(on_stats, studio), [], Stats.components(ui)),
            Refresh(bind(on_audit, studio), [], Audit.components(ui))]
