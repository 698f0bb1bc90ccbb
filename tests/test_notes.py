"""Rationales and 1-7 ratings (labeling/queue/notes.py, storage/notes.py): stored with a pair label or a ranking verdict
through the vote path and the API, checked (limits, settings off/optional/required), listed for the Data tab, and
exported as columns of soft and rankings."""

import json

import pytest
from gradio_client import Client

from labeling.queue.annotation import next_pair, submit_label
from labeling.queue.notes import MAX_RATIONALE_CHARS, update_note_modes
from labeling.queue.ranking import next_ranking, submit_ranking
from labeling.transfer.export import export_labels
from storage.errors import InvalidInput
from storage.labels import list_labels
from storage.notes import list_notes
from storage.pairs import get_pair
from tests.test_rankings import queue_rankings


def test_a_pair_labels_rationale_and_ratings_are_stored_by_generation_and_exported(store, queue_pairs, tmp_path):
    [pair] = queue_pairs([("p", "good", "bad")])
    shown = next_pair(store, "alice")
    label_id = submit_label(store, "alice", pair, "left", "v1", rationale="  <b>vivid</b>\nand kind ",
                            ratings=[6, 2])
    assert submit_label(store, "alice", pair, "left", "v1", rationale="other", ratings=[1, 1]) == label_id  # replay
    [note] = list_notes(store)
    stored = get_pair(store, pair)
    left_id = stored.first_id if shown.left == "good" else stored.second_id
    right_id = stored.second_id if left_id == stored.first_id else stored.first_id
    assert (note.kind, note.label_id, note.rationale, note.ratings) == ("pair", label_id, "<b>vivid</b>\nand kind",
                                                                        {left_id: 6, right_id: 2})
    export_labels(store, "soft", tmp_path / "soft.jsonl")
    [row] = [json.loads(line) for line in (tmp_path / "soft.jsonl").read_text().splitlines()]
    first, second = (6, 2) if left_id == stored.first_id else (2, 6)
    assert (row["rationale"], row["ratings"]) == ("<b>vivid</b>\nand kind", [first, second])


def test_notes_are_checked_and_follow_the_settings(store, queue_pairs):
    [pair, _] = queue_pairs([("p", "a", "b"), ("q", "c", "d")])
    shown = next_pair(store, "alice")
    for rationale, ratings, message in (("x" * (MAX_RATIONALE_CHARS + 1), None, "characters"),
                                        ("bad\x00", None, "control"), (None, [0, 7], "1 \\(worst\\) to 7"),
                                        (None, [3], "2 whole numbers"), (None, [True, 3], "whole numbers")):
        with pytest.raises(InvalidInput, match=message):
            submit_label(store, "alice", shown.pair_id, "left", "v1", rationale=rationale, ratings=ratings)
    update_note_modes(store, rationale="required", ratings="off")
    with pytest.raises(InvalidInput, match="asks a rationale"):
        submit_label(store, "alice", shown.pair_id, "left", "v1")
    with pytest.raises(InvalidInput, match="takes no ratings"):
        submit_label(store, "alice", shown.pair_id, "left", "v1", rationale="why", ratings=[1, 2])
    assert list_labels(store) == []  # nothing stored by a refused vote
    submit_label(store, "alice", shown.pair_id, "skip", "v1")  # a skip needs no rationale
    with pytest.raises(InvalidInput, match="one of off"):
        update_note_modes(store, rationale="sometimes")


def test_a_rankings_note_through_the_api_and_in_the_rankings_export(store, serve_studio, tmp_path):
    [ranking] = queue_rankings(store, [("r", ["x", "y", "z"])])
    client = Client(serve_studio(store).local_url, verbose=False)
    shown = client.predict("alice", api_name="/next_ranking")
    client.predict("alice", ranking, "CAB", "v1", "C says most", [3, 1, 7], api_name="/submit_ranking")
    notes = client.predict(api_name="/judgement_notes")
    assert [(n["kind"], n["rationale"]) for n in notes] == [("ranking", "C says most")]
    export_labels(store, "rankings", tmp_path / "r.jsonl")
    [row] = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert (row["rationale"], row["ratings"], shown["responses"]) == ("C says most", [3, 1, 7], ["x", "y", "z"])
    next_ranking(store, "bob")
    with pytest.raises(InvalidInput, match="3 whole numbers"):
        submit_ranking(store, "bob", ranking, "ABC", "v2", ratings=[1, 2])
