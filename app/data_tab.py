"""Data tab: import prompts and preference data sets, export the labels, and see how each annotator labels.

Imports and exports are for admins under --auth. Exports are written to a fresh temporary folder and offered
as a download; no path is ever typed.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import gradio as gr

from labeling.agreement import agreement_summary, annotator_stats
from labeling.export import export_labels
from labeling.importing import import_prompt_file
from labeling.preference_import import import_preference_file
from storage.votes import current_votes

from .context import Studio, user_errors

TITLE = "Data"
STATS_HEADERS = ["annotator", "labels", "skips", "tie rate", "both bad rate", "picks left", "median decision (s)",
                 "pairs shared", "agreement", "Cohen's κ"]


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.0f}%"


def _num(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def stats_table(studio: Studio) -> tuple[list[list], str]:
    """Per-annotator rows and a one-line agreement summary (numbers only: names go in the table as text)."""
    votes = current_votes(studio.store)
    rows = [[s.annotator, s.labels, s.skips, _pct(s.tie_rate), _pct(s.both_bad_rate), _pct(s.left_rate),
             _num(None if s.median_decision_ms is None else s.median_decision_ms / 1000, 1),
             s.agreement.pairs, _pct(s.agreement.percent), _num(s.agreement.kappa)]
            for s in annotator_stats(votes)]
    summary = agreement_summary(votes)
    if summary.pairs == 0:
        return rows, "No pair has been labeled by two annotators yet; raise the overlap to measure agreement."
    return rows, (f"**{summary.pairs}** pairs labeled by two or more annotators · percent agreement "
                  f"**{_pct(summary.percent)}** · Light's κ (mean pairwise Cohen's κ, ties a class) "
                  f"**{_num(summary.kappa)}**")


def build(studio: Studio) -> list:
    store = studio.store

    def on_import_prompts(path: str | None, heldout: bool, request: gr.Request) -> str:
        studio.require_admin(request)
        if not path:
            raise gr.Error("choose a .jsonl, .csv or .txt file of prompts first")
        with user_errors():
            result = import_prompt_file(store, path, heldout=heldout)
        return f"Imported {result.added} prompts ({result.duplicates} duplicates skipped)."

    def on_import_preferences(path: str | None, source: str, request: gr.Request) -> str:
        studio.require_admin(request)
        if not path:
            raise gr.Error("choose a .jsonl or .parquet preference file first")
        with user_errors():
            result = import_preference_file(store, path, source)
        return f"Imported {result.added} labeled pairs ({result.duplicates} already there)."

    def on_export(fmt: str, suffix: str, request: gr.Request):
        studio.require_admin(request)
        folder = Path(tempfile.mkdtemp(prefix="studio-export-"))
        with user_errors():
            result = export_labels(store, fmt, folder / f"labels-{fmt}-{time.strftime('%Y%m%d-%H%M%S')}{suffix}")
        kept = "left out" if fmt == "trl" else "included"
        message = f"{result.rows} rows ({kept}: {result.ties} ties, {result.both_bad} both bad, {result.skips} skips)."
        return gr.DownloadButton(value=str(result.path), visible=True), message

    def on_stats(request: gr.Request):
        studio.annotator(request, None)  # signed in, under --auth
        return stats_table(studio)

    with gr.Row(equal_height=False):
        with gr.Column():
            gr.Markdown("### Import prompts\n`.jsonl` (a `prompt` field), `.csv` (a `prompt` column) or `.txt` "
                        "(one per line). Duplicates are skipped.")
            prompt_file = gr.File(label="Prompt file", file_types=[".jsonl", ".csv", ".txt"], type="filepath")
            heldout = gr.Checkbox(label="Held out (evaluation only)")
            import_prompts = gr.Button("Import prompts")
            prompt_status = gr.Markdown()
        with gr.Column():
            gr.Markdown("### Import preference data\nTRL's format: `prompt`, `chosen`, `rejected`, optional `margin` "
                        "(`.jsonl` or `.parquet`). Rows become labels by the source name.")
            preference_file = gr.File(label="Preference file", file_types=[".jsonl", ".parquet"], type="filepath")
            source = gr.Textbox(label="Source name", placeholder="e.g. hh-rlhf", max_length=64)
            import_preferences = gr.Button("Import preferences")
            preference_status = gr.Markdown()
        with gr.Column():
            gr.Markdown("### Export labels\n**trl**: `prompt, chosen, rejected` (ties, both bad and skips left out). "
                        "**soft**: every label with outcome, target (1, 0, 0.5) and annotator.")
            fmt = gr.Radio(["trl", "soft"], value="trl", label="Format")
            suffix = gr.Radio([".jsonl", ".parquet"], value=".jsonl", label="File type")
            export = gr.Button("Export")
            download = gr.DownloadButton("Download export", visible=False)
            export_status = gr.Markdown()
    gr.Markdown("### Annotators")
    summary = gr.Markdown()
    table = gr.Dataframe(headers=STATS_HEADERS, datatype="str", interactive=False, wrap=True)
    refresh = gr.Button("Refresh statistics", size="sm")

    import_prompts.click(on_import_prompts, [prompt_file, heldout], prompt_status, api_name="import_prompts")
    import_preferences.click(on_import_preferences, [preference_file, source], preference_status,
                             api_name="import_preferences")
    export.click(on_export, [fmt, suffix], [download, export_status], api_name="export_labels")
    refresh.click(on_stats, None, [table, summary], api_name="annotator_stats")
    return [(on_stats, [table, summary])]
