"""The Data tab's judges section: each judge model's verdicts by status (timeouts, refusals, unparseable answers
counted) and its agreement with people on the items both judged (agreement, Cohen's κ, 95% intervals, by round),
and when the Label tab shows a judge's verdict, read from the store whenever the section fills (so a reload or another
browser shows the setting in force, not the one the server started with). Its refresh button is the public API
endpoint `/judge_agreement`."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from app.context import Refresh, Studio, View, bind, user_errors
from app.label.label_suggestions import SuggestionTiming, set_timing, timing
from labeling.judges.judge_agreement import store_agreement
from storage.judge_verdicts import STATUSES, status_counts

HEADERS = ["judge", "round", "items", "agreement", "95% interval", "Cohen's κ", "κ 95% interval"]


def _interval(low: float | None, high: float | None) -> str:
    return "—" if low is None else f"[{low:.2f}, {high:.2f}]"


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


@dataclass(frozen=True)
class Judges(View):
    """The judges' verdict counts (a line) and their agreement with people (a table)."""

    judge_summary: str
    judge_table: list[list]


def judges_view(studio: Studio) -> Judges:
    counts = status_counts(studio.store)
    if not counts:
        return Judges("No judge model has answered yet (`python app.py label --annotator judge`, docs/judges.md).", [])
    summary = " · ".join(f"**{judge}**: {row['ok']} verdicts ({row['trains']} train)"
                         + "".join(f", {row[s]} {s}" for s in STATUSES[1:] if row[s]) for judge, row in counts.items())
    rows = [[f.judge, "all" if f.round is None else f.round, f.items, _num(f.agreement),
             _interval(f.agreement_low, f.agreement_high), _num(f.kappa), _interval(f.kappa_low, f.kappa_high)]
            for f in store_agreement(studio.store)]
    return Judges(summary, rows)


def on_judges(studio: Studio, request: gr.Request) -> Judges:
    studio.annotator(request, None)  # signed in, under --auth
    return judges_view(studio)


def shown_timing(studio: Studio) -> str:
    """When the Label tab shows a judge's verdict, as the store holds it now."""
    return timing(studio.store).value


def on_section(studio: Studio, request: gr.Request) -> tuple:
    """The whole section as the tab fills it: the judges, then the suggestion setting."""
    return (*on_judges(studio, request).values(), shown_timing(studio))


def on_timing(studio: Studio, value: str, request: gr.Request) -> str:
    """Admins: when the Label tab shows a judge's verdict on a pair (after the vote, before it, never)."""
    studio.require_admin(request)
    with user_errors():
        return set_timing(studio.store, value).value


def build(studio: Studio) -> Refresh:
    """The section's components, wired; returns its refresh for the tab's load."""
    gr.Markdown("### Judges\nA judge model's verdicts are kept apart from people's labels; here is how it agrees with "
                "people on the items both judged.")
    ui = Judges(gr.Markdown(), gr.Dataframe(headers=HEADERS, datatype="str", interactive=False, wrap=True))
    with gr.Row():
        refresh = gr.Button("Refresh judges", size="sm")
        shown = gr.Radio([t.value for t in SuggestionTiming], label="Label tab: show the judge's verdict on a pair "
                         "(admins)", elem_id="judge-suggestions")  # its value: the store's, whenever the section fills
    refresh.click(bind(on_judges, studio), None, Judges.components(ui), api_name="judge_agreement").then(
        bind(shown_timing, studio), None, shown, api_visibility="private")
    shown.input(bind(on_timing, studio), shown, shown, api_visibility="private").failure(
        bind(shown_timing, studio), None, shown, api_visibility="private")  # refused: back to the setting in force
    return Refresh(bind(on_section, studio), [], [*Judges.components(ui), shown])
