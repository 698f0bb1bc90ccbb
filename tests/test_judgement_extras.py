"""The Label tab's strength, rationale and ratings (app/label/judgement_extras.py), called directly with a Store: what
goes with a vote, what a required note missing does, what the screen clears, and when the note fields
show; the ranking panel's rationale."""

import gradio as gr
import pytest
from gradio.utils import get_function_params

from app.context import Studio, bind
from app.label import judgement_extras, label_screen, label_tab, ranking_panel
from labeling.queue.annotation import Choice
from labeling.queue.notes import MAX_RATIONALE_CHARS, update_note_modes
from storage.errors import InvalidInput
from storage.labels import list_labels, training_labels
from storage.notes import list_notes
from storage.rankings import ranking_verdicts
from tests.test_rankings import queue_rankings

SKIPPED = gr.skip()


def start(studio: Studio) -> label_tab.Named:
    return label_tab.start_labeling(studio, "alice", None, None)


def cast(studio, screen, choice, strength="", rationale="", left=None, right=None) -> judgement_extras.Voted:
    return judgement_extras.vote_with_extras(studio, choice, "alice", screen.pair_id, screen.vote_id, strength,
                                             rationale, left, right, None)


def test_a_strength_goes_with_left_or_right_only_and_both_ratings_or_neither(store):
    studio = Studio(store)
    assert judgement_extras.judgement(studio, Choice.LEFT, "much_better", " why ", 6, 2) == {
        "strength": "much_better", "rationale": "why", "ratings": [6, 2]}
    assert judgement_extras.judgement(studio, Choice.TIE, "much_better", "", None, None) == {
        "strength": None, "rationale": None, "ratings": None}
    assert judgement_extras.judgement(studio, Choice.RIGHT, judgement_extras.NO_STRENGTH, None, None, None)[
        "strength"] is None
    with pytest.raises(InvalidInput, match="rate both answers"):
        judgement_extras.judgement(studio, Choice.LEFT, "", "", 3, None)
    with pytest.raises(InvalidInput, match="under 2000"):
        judgement_extras.judgement(studio, Choice.LEFT, "", "x" * (MAX_RATIONALE_CHARS + 1), None, None)


def test_a_graded_vote_stores_its_margin_and_note_and_clears_the_fields(store, queue_pairs):
    queue_pairs([("p1", "a1", "b1"), ("p2", "a2", "b2"), ("p3", "a3", "b3")])
    studio = Studio(store)
    first = start(studio)
    voted = cast(studio, first, Choice.RIGHT, "slightly_better", "  the right one is <b>kind</b> ", 2, 6)
    assert voted.pair_id not in (first.pair_id, None) and voted.status.startswith("Saved: right (slightly better).")
    assert (voted.strength, voted.rationale, voted.left_rating, voted.right_rating) == ("", "", None, None)
    [note] = list_notes(store)
    assert (note.rationale, sorted(note.ratings.values())) == ("the right one is <b>kind</b>", [2, 6])
    cast(studio, voted, Choice.TIE, "much_better")  # a tie takes no strength: stored without one
    assert [lp.margin for lp in training_labels(store)] == pytest.approx([1 / 3, None])
    assert [label.outcome.value for label in list_labels(store)][-1] == "tie"


def test_a_required_rationale_missing_refuses_the_vote_with_one_hint_and_keeps_the_fields(store, queue_pairs):
    queue_pairs([("p1", "a1", "b1")])
    update_note_modes(store, rationale="required")
    studio = Studio(store)
    first = start(studio)
    refused = cast(studio, first, Choice.LEFT, "better", "", 5, 5)
    assert refused.status == "this project asks a rationale with every judgement; add one"
    assert refused.pair_id == SKIPPED and refused.strength == SKIPPED and refused.left_rating == SKIPPED
    assert list_labels(store) == []
    cast(studio, first, Choice.SKIP)  # a skip needs none
    assert [label.outcome.value for label in list_labels(store)] == ["skip"]


def test_the_note_fields_show_as_the_settings_ask(store):
    studio = Studio(store)
    rationale, left, right = judgement_extras.note_fields(studio)
    assert rationale["visible"] and left["visible"] and right["visible"]  # optional by default
    update_note_modes(store, rationale="required", ratings="off")
    rationale, left, right = judgement_extras.note_fields(studio)
    assert rationale["visible"] and "required" in rationale["label"] and not left["visible"] and not right["visible"]
    update_note_modes(store, rationale="off", ratings="required")
    rationale, left, _ = judgement_extras.note_fields(studio)
    assert not rationale["visible"] and left["visible"] and "required" in left["label"]


def test_before_a_name_the_vote_is_the_name_hint_and_the_listener_takes_the_fields_and_the_request(store):
    studio = Studio(store)
    voted = judgement_extras.vote_with_extras(studio, Choice.LEFT, "", None, None, "better", "why", 1, 2, None)
    assert voted.status == label_screen.NAME_HINT and voted.strength == SKIPPED
    listener = bind(judgement_extras.vote_with_extras, studio, Choice.LEFT)
    assert [name for name, *_ in get_function_params(listener)] == [
        "annotator", "pair_id", "vote_id", "strength", "rationale", "left_rating", "right_rating"]  # and the request


def test_the_legend_names_the_strength_keys_and_no_key_clashes():
    assert all(f"<kbd>{n}</kbd>" in judgement_extras.KEYS_LEGEND for n in ("5", "8"))
    strength_keys = {key for _, _, key in judgement_extras.STRENGTHS}
    for taken in ('"1"', '"2"', '"3"', '"4"', '"s"', '"u"'):
        assert taken.strip('"') not in strength_keys and taken in label_tab.SHORTCUTS_JS
    assert strength_keys.isdisjoint({"0", "w", "z", "="})  # the demonstration editor's W, the ranking panel's keys


def test_the_ranking_panel_sends_its_rationale_and_clears_it(store):
    queue_rankings(store, [("Review 1.", ["A great film.", "A dull film.", "A fine film."])])
    studio = Studio(store)
    assert judgement_extras.rationale_field(studio)["visible"]
    update_note_modes(store, rationale="off")
    assert not judgement_extras.rationale_field(studio)["visible"]
    update_note_modes(store, rationale="required")
    shown = ranking_panel.take_turn(studio, "alice", None).ranking
    with pytest.raises(gr.Error, match="asks a rationale"):
        ranking_panel.send(studio, "BAC", "alice", shown.ranking_id, shown.vote_id, "", None)
    after = ranking_panel.send(studio, "BAC", "alice", shown.ranking_id, shown.vote_id, " B is bold ", None).ranking
    assert after.rationale == "" and after.status == "Saved: BAC."
    [note] = list_notes(store)
    assert (note.kind, note.rationale) == ("ranking", "B is bold")


def test_the_ranking_panel_sends_a_rating_per_answer_every_one_or_none_and_clears_them(store):
    queue_rankings(store, [("Review 1.", ["A great film.", "A dull film.", "A fine film."]),
                           ("Review 2.", ["Good.", "Bad.", "Fine.", "Awful."])])
    studio = Studio(store)
    shown = ranking_panel.take_turn(studio, "alice", None).ranking
    assert [field["visible"] for field in shown.ratings] == [True] * 3 + [False] * 3  # K = 3: A, B, C
    with pytest.raises(gr.Error, match="rate every answer .* or none; C not rated"):
        ranking_panel.send(studio, "ABC", "alice", shown.ranking_id, shown.vote_id, "", None, 7, 2)
    assert list_notes(store) == []
    after = ranking_panel.send(studio, "ACB", "alice", shown.ranking_id, shown.vote_id, "", None, 7, 2, 5).ranking
    assert after.status == "Saved: ACB." and [field["visible"] for field in after.ratings] == [True] * 4 + [False] * 2
    assert all(field["value"] is None for field in after.ratings)  # cleared for the next ranking
    [note] = list_notes(store)
    [verdict] = ranking_verdicts(store)
    assert [note.ratings[g] for g in verdict.generation_ids] == [7, 2, 5]  # in the order shown
    update_note_modes(store, ratings="off")
    hidden = ranking_panel.ranking_screen(studio, None)
    assert not any(field["visible"] for field in hidden.ratings)
    with pytest.raises(gr.Error, match="takes no ratings"):
        ranking_panel.send(studio, "ABCD", "alice", after.ranking_id, after.vote_id, "", None, 1, 2, 3, 4)
    listener = bind(ranking_panel.send, studio)
    assert [name for name, *_ in get_function_params(listener)][-6:] == [f"rating_{c}" for c in "abcdef"]
    with gr.Blocks():
        assert len(ranking_panel.RankingScreen.components(ranking_panel.layout())) == len(after.values()) == 14
