"""The Data tab's gold panel: each annotator's gold accuracy (with its count of gold comparisons, and who is
flagged), marking a labelled pair or a ranking verdict's ranking as gold, lifting a flag, and the gold settings (see
`storage.gold`).

Public API: `/gold_accuracy()` (every annotator's `{annotator, judged, correct, accuracy, flagged, left_out}`), and for
admins `/mark_gold(label_id)`, `/mark_gold_ranking(label_id)` (a ranking verdict's id), `/lift_gold_flag(annotator,
lifted)` and `/gold_settings(settings_json)` (an object of the settings to change; returns them all).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import gradio as gr

from app.context import Refresh, Studio, bind, markdown_literal, user_errors
from labeling.gold.gold import gold_scores, lift_flag, mark_gold, mark_gold_ranking, update_gold_settings
from storage.audit import AuditAction
from storage.errors import InvalidInput
from storage.gold_items import count_gold
from storage.gold_rankings import count_gold_rankings

HEADERS = "| annotator | gold comparisons | correct | accuracy | flagged |\n|---|---|---|---|---|\n"


def api_gold_accuracy(studio: Studio) -> list[dict]:
    """Every annotator's gold comparisons (a gold pair is one, a gold ranking those its order makes), how many were
    right, the accuracy and whether they are flagged (`left_out`: their labels are left out of training)."""
    return [{"annotator": s.annotator, "judged": s.judged, "correct": s.correct, "accuracy": s.accuracy,
             "flagged": s.flagged, "left_out": s.left_out} for s in gold_scores(studio.store)]


def gold_table(studio: Studio) -> str:
    """How many gold items the store holds, then each annotator's accuracy on them (none until someone other than
    the label a gold item was marked from judges one)."""
    pairs, rankings = count_gold(studio.store), count_gold_rankings(studio.store)
    if not pairs + rankings:
        return ("No gold items yet (import gold pairs or rankings with `python app.py import-gold`, or mark a label "
                "below).")
    held = (f"**{pairs} gold pair{'s' * (pairs != 1)}, {rankings} gold ranking{'s' * (rankings != 1)}**; the Label "
            "tab serves them among the pairs.")
    scores = gold_scores(studio.store)
    if not scores:
        return f"{held} No annotator has judged one yet (the label a gold item was marked from does not count)."
    rows = "".join(f"| {markdown_literal(s.annotator)} | {s.judged} | {s.correct} | {s.accuracy:.0%} | "
                   f"{'yes' + (', left out of training' if s.left_out else '') if s.flagged else ''} |\n"
                   for s in scores)
    return f"{held}\n\n{HEADERS}{rows}"


def api_mark_gold(studio: Studio, label_id: float, request: gr.Request) -> str:
    """Admins: make the pair of label `label_id` a gold pair, that label's outcome its answer."""
    studio.require_admin(request)
    with user_errors():
        pair_id = mark_gold(studio.store, _label_id(label_id))
    studio.record(request, AuditAction.GOLD_CHANGED, marked_label=int(label_id), pair=pair_id)
    return f"Label {int(label_id)} is gold now: its pair ({pair_id}) is a gold pair, that label's choice its answer."


def api_mark_gold_ranking(studio: Studio, label_id: float, request: gr.Request) -> str:
    """Admins: make the ranking of verdict `label_id` a gold ranking, that verdict's order its gold order."""
    studio.require_admin(request)
    with user_errors():
        ranking_id = mark_gold_ranking(studio.store, _label_id(label_id))
    studio.record(request, AuditAction.GOLD_CHANGED, marked_ranking_label=int(label_id), ranking=ranking_id)
    return (f"Ranking order {int(label_id)} is gold now: its ranking ({ranking_id}) is a gold ranking, that "
            "order its answer.")


def _label_id(label_id: float | None) -> int:
    if label_id is None or not float(label_id).is_integer() or label_id < 1:
        raise InvalidInput("the label id must be a positive whole number from the annotators' labels")
    return int(label_id)


def api_lift_gold_flag(studio: Studio, annotator: str, lifted: bool, request: gr.Request) -> list[str]:
    """Admins: lift an annotator's gold flag (their labels train again), or put it back; returns who is lifted."""
    studio.require_admin(request)
    with user_errors():
        names = lift_flag(studio.store, annotator, bool(lifted))
    studio.record(request, AuditAction.GOLD_CHANGED, annotator=annotator, lifted=bool(lifted))
    return names


def api_gold_settings(studio: Studio, settings_json: str, request: gr.Request) -> dict:
    """Admins: change gold settings (gold_every, gold_min_accuracy, gold_min_judgements, gold_exclude_flagged)."""
    studio.require_admin(request)
    with user_errors():
        try:
            values = json.loads(settings_json or "{}")
        except json.JSONDecodeError:
            raise InvalidInput("the gold settings must be a JSON object, such as {\"gold_every\": 5}") from None
        if not isinstance(values, dict):
            raise InvalidInput("the gold settings must be a JSON object, such as {\"gold_every\": 5}")
        saved = update_gold_settings(studio.store, **values)
    if values:
        studio.record(request, AuditAction.GOLD_CHANGED, **values)
    return saved


@dataclass(frozen=True)
class GoldLayout:
    table: gr.Markdown
    label_id: gr.Number
    mark: gr.Button
    mark_ranking: gr.Button
    status: gr.Markdown


def layout() -> GoldLayout:
    with gr.Accordion("Gold items: annotators' accuracy", open=False, elem_id="gold-panel"):
        table = gr.Markdown(elem_id="gold-table")
        with gr.Row():
            label_id = gr.Number(label="Label id to mark as gold (its label, or a ranking's order, is the "
                                 "answer)", precision=0, minimum=1)
            mark = gr.Button("Mark pair as gold", elem_id="gold-mark")
            mark_ranking = gr.Button("Mark ranking as gold", elem_id="gold-mark-ranking")
        status = gr.Markdown()
    return GoldLayout(table, label_id, mark, mark_ranking, status)


def on_mark(studio: Studio, label_id: float, request: gr.Request) -> tuple[str, str]:
    return api_mark_gold(studio, label_id, request), gold_table(studio)


def on_mark_ranking(studio: Studio, label_id: float, request: gr.Request) -> tuple[str, str]:
    return api_mark_gold_ranking(studio, label_id, request), gold_table(studio)


def build(studio: Studio) -> Refresh:
    """The panel and its endpoints; returns the refresh that fills the table when the tab opens."""
    gr.api(bind(api_gold_accuracy, studio), api_name="gold_accuracy")
    gr.api(bind(api_lift_gold_flag, studio), api_name="lift_gold_flag")
    gr.api(bind(api_gold_settings, studio), api_name="gold_settings")
    ui = layout()
    ui.mark.click(bind(on_mark, studio), ui.label_id, [ui.status, ui.table], api_name="mark_gold")
    ui.mark_ranking.click(bind(on_mark_ranking, studio), ui.label_id, [ui.status, ui.table],
                          api_name="mark_gold_ranking")
    return Refresh(bind(gold_table, studio), [], [ui.table])
