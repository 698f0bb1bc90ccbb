"""Demonstrations written in the Label tab's code path (labeling/demonstrations/demonstrations.py): from nothing or
edited from the side shown, checked as every text, with the time spent; with record_preferences the answer is preferred
to each response by `edits:<author>` labels (never queued), which undo takes back with the demonstration."""

import pytest

from labeling.demonstrations.demonstrations import (
    records_preferences,
    shown_texts,
    undo_demonstration,
    write_demonstration,
)
from labeling.queue.annotation import next_pair
from storage.demonstrations import list_demonstrations
from storage.errors import Conflict, InvalidInput
from storage.labels import list_labels, training_labels
from storage.pairs import get_pair, list_pairs
from storage.settings import set_setting
from storage.types import Outcome


def test_an_edit_keeps_the_response_it_came_from_and_the_time_spent(store, queue_pairs):
    [pair_id] = queue_pairs([("the movie was", " dull .", " fine .")])
    shown = next_pair(store, "ada")
    assert shown_texts(store, "ada", pair_id) == {"left": shown.left, "right": shown.right}
    written = write_demonstration(store, "ada", pair_id, " wonderful .", edited_from="right", seconds=12.0)
    [demo] = list_demonstrations(store)
    pair = get_pair(store, pair_id)
    right_id = pair.second_id if shown.right == " fine ." else pair.first_id
    assert (demo.id, demo.author, demo.source, demo.pair_id) == (written.id, "ada", "label", pair_id)
    assert (demo.generation_id, demo.seconds, demo.text, written.preferences) == (right_id, 12.0, " wonderful .", 0)
    assert list_labels(store) == []  # no preferences unless asked


def test_a_bad_answer_is_refused_in_one_line_and_nothing_is_stored(store, queue_pairs):
    [pair_id] = queue_pairs([("the movie was", " dull .", " fine .")])
    next_pair(store, "ada")
    for text, problem in ((" ", "the demonstration is empty"), ("a\x00b", "holds a NUL"),
                          ("x" * 100_001, "over the limit of 100000")):
        with pytest.raises(InvalidInput, match=f"your answer: .*{problem}"):
            write_demonstration(store, "ada", pair_id, text)
    with pytest.raises(InvalidInput, match="no longer reserved for you"):
        write_demonstration(store, "bob", pair_id, "fine", edited_from="left")
    assert list_demonstrations(store) == []


def test_recorded_preferences_train_and_undo_takes_them_back(store, queue_pairs):
    [pair_id] = queue_pairs([("the movie was", " dull .", " fine .")])
    next_pair(store, "ada")
    assert not records_preferences(store)
    set_setting(store, "demonstration_preferences", True)
    assert records_preferences(store)
    written = write_demonstration(store, "ada", pair_id, " fine .", edited_from="left", record_preferences=True)
    assert written.preferences == 1  # the answer equals one response: preferred to the other only
    [label] = training_labels(store)
    assert (label.annotator, label.outcome, label.first, label.second) == ("edits:ada", Outcome.FIRST, " fine .",
                                                                          " dull .")
    assert sorted(p.selector for p in list_pairs(store)) == ["imported", "random"]  # never queued for people
    assert undo_demonstration(store, "ada").id == written.id
    assert list_demonstrations(store) == [] and training_labels(store) == []
    with pytest.raises(Conflict, match="ada has no demonstration to undo"):
        undo_demonstration(store, "ada")


def test_the_api_writes_and_undoes_a_demonstration(store, queue_pairs, serve_studio):
    from gradio_client import Client

    [pair_id] = queue_pairs([("the movie was", " dull .", " fine .")])
    client = Client(serve_studio(store).local_url, verbose=False)
    shown = client.predict("ada", api_name="/next_pair")
    written = client.predict("ada", pair_id, "A wonderful film.", "left", 9.5, True, api_name="/submit_demonstration")
    assert written == {"demonstration_id": 1, "preferences": 2}
    [demo] = list_demonstrations(store)
    pair = get_pair(store, pair_id)
    assert demo.generation_id == (pair.first_id if shown["left"] == " dull ." else pair.second_id)
    assert demo.seconds == 9.5 and len(training_labels(store)) == 2
    with pytest.raises(Exception, match="the demonstration is empty"):
        client.predict("ada", pair_id, " ", "empty", None, False, api_name="/submit_demonstration")
    assert client.predict("ada", api_name="/undo_demonstration") == {"demonstration_id": 1,
                                                                     "text": "A wonderful film."}
    assert list_demonstrations(store) == [] and training_labels(store) == []


@pytest.fixture
def two_annotators(store, queue_pairs, serve_studio, tmp_path):
    """Two pairs queued and a studio under --auth: ada and bob annotate; returns (ada's client, bob's, pair ids)."""
    from gradio_client import Client

    from bench.studio_driver import hashed_auth_file

    pair_ids = queue_pairs([("the movie was", " dull .", " fine ."), ("the meal was", " cold .", " warm .")])
    users = hashed_auth_file(tmp_path / "users.txt", {"ada": "ada-pw", "bob": "bob-pw"})
    url = serve_studio(store, users).local_url
    return (Client(url, auth=("ada", "ada-pw"), verbose=False), Client(url, auth=("bob", "bob-pw"), verbose=False),
            pair_ids)


def test_a_demonstration_from_nothing_needs_the_pair_reserved_for_its_author(store, two_annotators):
    ada, bob, _ = two_annotators
    adas = ada.predict("ada", api_name="/next_pair")["pair_id"]
    for answer in ("empty", "left"):  # another's pair: refused whether written from nothing or edited
        with pytest.raises(Exception, match=f"pair {adas} is no longer reserved for you"):
            bob.predict("bob", adas, "A better answer.", answer, 5.0, True, api_name="/submit_demonstration")
    ada.predict("ada", adas, "left", "vote-1", api_name="/submit_label")
    with pytest.raises(Exception, match=f"pair {adas} is no longer reserved for you"):  # labelled: no longer hers
        ada.predict("ada", adas, "A better answer.", "empty", 5.0, True, api_name="/submit_demonstration")
    assert list_demonstrations(store) == []
    assert [label.annotator for label in list_labels(store)] == ["ada"]  # no `edits:` preference either


def test_one_annotators_same_answer_to_one_prompt_is_stored_once(store, two_annotators):
    _, bob, _ = two_annotators
    bobs = bob.predict("bob", api_name="/next_pair")["pair_id"]
    first = bob.predict("bob", bobs, "A better answer.", "empty", 5.0, True, api_name="/submit_demonstration")
    assert first == {"demonstration_id": 1, "preferences": 2}
    for _ in range(3):
        with pytest.raises(Exception, match="bob saved this answer to the prompt already \\(demonstration 1\\)"):
            bob.predict("bob", bobs, "A better answer.", "empty", 5.0, True, api_name="/submit_demonstration")
    assert [d.id for d in list_demonstrations(store)] == [1] and len(training_labels(store)) == 2
    other = bob.predict("bob", bobs, "Another answer.", "empty", 5.0, False, api_name="/submit_demonstration")
    assert other["demonstration_id"] == 2  # a different answer is another demonstration
    bob.predict("bob", api_name="/undo_demonstration")
    bob.predict("bob", api_name="/undo_demonstration")
    assert bob.predict("bob", bobs, "A better answer.", "empty", 5.0, False,
                       api_name="/submit_demonstration")["demonstration_id"] == 3  # undone: may be written again


def test_the_time_spent_is_what_a_person_spends(store, queue_pairs, serve_studio):
    from gradio_client import Client

    [pair_id] = queue_pairs([("the movie was", " dull .", " fine .")])
    client = Client(serve_studio(store).local_url, verbose=False)
    client.predict("ada", api_name="/next_pair")
    with pytest.raises(Exception, match="must be from 0 to 86400 seconds \\(a day\\), not 1e\\+308"):
        client.predict("ada", pair_id, "A better answer.", "empty", 1e308, False, api_name="/submit_demonstration")
    for seconds in (float("inf"), float("nan"), 86_400.5, -1.0, "12"):
        with pytest.raises(InvalidInput, match="must be from 0 to 86400 seconds"):
            write_demonstration(store, "ada", pair_id, "A better answer.", seconds=seconds)
    assert list_demonstrations(store) == []
    assert write_demonstration(store, "ada", pair_id, "A better answer.", seconds=86_400.0).id == 1
