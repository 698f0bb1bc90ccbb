"""The label queue's rules: reservations, overlap, skips, order, sides, votes checked and stored once, undo."""

import random
import threading
import uuid

import pytest

from labeling.queue.annotation import (
    Choice,
    check_annotator,
    next_pair,
    progress,
    submit_and_next,
    submit_label,
    undo_label,
    update_queue_settings,
)
from storage import votes
from storage.errors import Conflict, InvalidInput, NotFound
from storage.labels import list_labels
from storage.pairs import get_pair
from storage.preferences import Preference, import_preferences
from storage.types import Outcome


def vote():
    return str(uuid.uuid4())


def three_pairs(queue_pairs):
    return queue_pairs([("p1", "a1", "b1"), ("p2", "a2", "b2"), ("p3", "a3", "b3")])


def test_choice_maps_screen_sides_to_the_pairs_order():
    assert Choice.LEFT.outcome(first_id=7, left_id=7) is Outcome.FIRST
    assert Choice.LEFT.outcome(first_id=7, left_id=8) is Outcome.SECOND
    assert Choice.RIGHT.outcome(first_id=7, left_id=7) is Outcome.SECOND
    assert Choice.RIGHT.outcome(first_id=7, left_id=8) is Outcome.FIRST
    assert Choice.TIE.outcome(7, 8) is Outcome.TIE and Choice.BOTH_BAD.outcome(7, 7) is Outcome.BOTH_BAD
    assert Choice.SKIP.outcome(7, 8) is Outcome.SKIP


def test_two_annotators_never_get_the_same_pair_and_asking_again_returns_your_own(store, queue_pairs):
    three_pairs(queue_pairs)
    alice = next_pair(store, "alice")
    bob = next_pair(store, "bob")
    assert alice.pair_id != bob.pair_id
    again = next_pair(store, "alice", rng=random.Random(1))
    assert again == alice  # same pair, same sides
    carol = next_pair(store, "carol")
    assert carol.pair_id not in (alice.pair_id, bob.pair_id)
    assert next_pair(store, "dave") is None  # every pair reserved, overlap 1


def test_shown_texts_are_the_pairs_responses_on_a_random_side(store, queue_pairs):
    (pair_id,) = queue_pairs([("prompt", "first text", "second text")])
    sides = set()
    for seed in range(20):
        shown = next_pair(store, f"annotator{seed}", rng=random.Random(seed))
        if shown:
            sides.add((shown.left, shown.right))
            submit_label(store, f"annotator{seed}", pair_id, "skip", vote())  # frees it for the next one
    assert sides == {("first text", "second text"), ("second text", "first text")}


def test_a_conversation_prompt_comes_with_its_turns_and_a_text_prompt_without(store, queue_pairs):
    turns = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi?"}]
    chat, text = queue_pairs([(turns, "a", "b"), ("plain", "c", "d")], scores=[2.0, 1.0])
    shown = next_pair(store, "alice")
    assert (shown.pair_id, shown.prompt, shown.messages) == (chat, "System: Be brief.\n\nHuman: Hi?", turns)
    assert next_pair(store, "alice").messages == turns  # her reservation, asked again
    submit_label(store, "alice", chat, "tie", vote())
    assert (next_pair(store, "alice").pair_id, next_pair(store, "alice").messages) == (text, None)
    assert undo_label(store, "alice").messages == turns  # undo shows the conversation again


def test_newest_round_first_then_highest_score(store, queue_pairs):
    old = queue_pairs([("old", "a", "b")], round=0, scores=[0.99])
    low, high = queue_pairs([("low", "a", "b"), ("high", "a", "b")], round=1, scores=[0.1, 0.9])
    order = []
    for _ in range(3):
        shown = next_pair(store, "alice")
        order.append(shown.pair_id)
        submit_label(store, "alice", shown.pair_id, "tie", vote())
    assert order == [high, low, old[0]]


def test_overlap_two_gives_a_pair_to_two_distinct_annotators(store, queue_pairs):
    first, second = queue_pairs([("p1", "a", "b"), ("p2", "a", "b")])
    update_queue_settings(store, overlap=2)
    assert next_pair(store, "alice").pair_id == first
    assert next_pair(store, "bob").pair_id == first
    assert next_pair(store, "carol").pair_id == second
    submit_label(store, "alice", first, "left", vote())
    assert next_pair(store, "alice").pair_id == second  # never the same pair twice for alice
    assert next_pair(store, "dave") is None  # first: alice's label + bob's hold; second: carol + alice


def test_a_skip_goes_to_others_never_back_and_does_not_count(store, queue_pairs):
    (pair_id,) = queue_pairs([("p", "a", "b")])
    next_pair(store, "alice")
    submit_label(store, "alice", pair_id, "skip", vote())
    assert next_pair(store, "alice") is None
    assert next_pair(store, "bob").pair_id == pair_id
    submit_label(store, "bob", pair_id, "right", vote())
    assert next_pair(store, "carol") is None  # bob's vote filled the pair; alice's skip did not


def test_votes_are_stored_relative_to_the_pair_with_the_side_shown(store, queue_pairs):
    (pair_id,) = queue_pairs([("p", "alpha", "beta")])
    pair = get_pair(store, pair_id)
    shown = next_pair(store, "alice")
    label_id = submit_label(store, "alice", pair_id, "left", vote(), decision_ms=1234)
    (label,) = list_labels(store)
    left_id = pair.first_id if shown.left == "alpha" else pair.second_id
    assert (label.id, label.left_id, label.decision_ms) == (label_id, left_id, 1234)
    assert label.outcome is (Outcome.FIRST if shown.left == "alpha" else Outcome.SECOND)


def test_decision_time_defaults_to_time_since_shown(store, queue_pairs):
    (pair_id,) = queue_pairs([("p", "a", "b")])
    reserved = votes.reserve_next_pair(store, "alice", 1, 600, True, now=1000.0)
    votes.submit_vote(store, "alice", pair_id, Choice.TIE.outcome, "v1", overlap=1, now=1002.5)
    assert list_labels(store)[0].decision_ms == 2500 and reserved.left == "a"


def test_submit_and_next_stores_the_vote_and_reserves_the_next_pair_together(store, queue_pairs):
    first, second = queue_pairs([("p1", "a", "b"), ("p2", "a", "b")])
    next_pair(store, "alice")
    label_id, shown = submit_and_next(store, "alice", first, "both_bad", "v1")
    assert shown.pair_id == second and list_labels(store)[0].id == label_id
    assert submit_and_next(store, "alice", first, "both_bad", "v1") == (label_id, shown)  # replay: same answer
    with pytest.raises(Conflict):
        submit_and_next(store, "alice", first, "left", "v2")  # first is no longer hers
    assert len(list_labels(store, include_undone=True)) == 1 and next_pair(store, "alice") == shown
    label_id, shown = submit_and_next(store, "alice", second, "right", "v3")
    assert shown is None and len(list_labels(store)) == 2


def test_a_replayed_vote_id_is_stored_once_and_returns_the_same_label(store, queue_pairs):
    (pair_id,) = queue_pairs([("p", "a", "b")])
    next_pair(store, "alice")
    first = submit_label(store, "alice", pair_id, "left", "vote-1")
    assert submit_label(store, "alice", pair_id, "left", "vote-1") == first
    assert len(list_labels(store, include_undone=True)) == 1
    with pytest.raises(Conflict, match="already used"):
        submit_label(store, "bob", pair_id, "left", "vote-1")


def test_bad_votes_are_refused_and_store_nothing(store, queue_pairs):
    mine, other = queue_pairs([("p1", "a", "b"), ("p2", "a", "b")])
    next_pair(store, "alice")
    next_pair(store, "bob")
    with pytest.raises(NotFound, match="does not exist"):
        submit_label(store, "alice", 999, "left", vote())
    with pytest.raises(Conflict, match="not reserved for alice"):
        submit_label(store, "alice", other, "left", vote())  # bob's pair: alice cannot vote on it
    for choice in ("LEFT", "first", "", None, "left " * 2000):
        with pytest.raises(InvalidInput, match="choice must be one of"):
            submit_label(store, "alice", mine, choice, vote())
    for pair_id in ("x", -1, 0, True, 1.5, None):
        with pytest.raises(InvalidInput, match="pair id"):
            submit_label(store, "alice", pair_id, "left", vote())
    for vote_id in ("", None, "v" * 129, "a\nb", 12):
        with pytest.raises(InvalidInput, match="vote id"):
            submit_label(store, "alice", mine, "left", vote_id)
    with pytest.raises(InvalidInput, match="decision time"):
        submit_label(store, "alice", mine, "left", vote(), decision_ms=-5)
    assert list_labels(store, include_undone=True) == []
    assert next_pair(store, "alice").pair_id == mine  # her reservation survived the bad attempts


@pytest.mark.parametrize("name", ["", "   ", None, "a" * 10_000, "bad\x00name", "tab\tname", "line\nbreak",
                                  "zero\u200bwidth", "rtl\u202eoverride", "bell\x07"])
def test_bad_annotator_names_are_refused_without_echo(store, queue_pairs, name):
    queue_pairs([("p", "a", "b")])
    with pytest.raises(InvalidInput) as error:
        next_pair(store, name)
    assert len(str(error.value)) < 200 and "\n" not in str(error.value)
    reservations = store.db().execute("SELECT count(*) FROM reservations").fetchone()[0]
    assert votes.open_pairs(store, "x", 1) == 1 and reservations == 0


def test_annotator_names_are_trimmed_and_normalised():
    assert check_annotator("  Zoë  ") == "Zoë"
    assert check_annotator("Zoe\u0308") == "Zoë"  # combining diaeresis -> one code point
    assert check_annotator("a" * 64) == "a" * 64


def test_an_expired_reservation_goes_to_others_and_the_late_vote_is_refused(store, queue_pairs):
    (pair_id,) = queue_pairs([("p", "a", "b")])
    votes.reserve_next_pair(store, "alice", 1, ttl_s=10, first_on_left=True, now=0.0)
    assert votes.reserve_next_pair(store, "bob", 1, 10, True, now=5.0) is None  # still alice's
    assert votes.reserve_next_pair(store, "bob", 1, 10, True, now=11.0).pair_id == pair_id
    with pytest.raises(Conflict, match="expired"):
        votes.submit_vote(store, "alice", pair_id, Choice.LEFT.outcome, "late", overlap=1, now=12.0)
    assert list_labels(store) == []


def test_an_expired_reservation_nobody_took_still_accepts_the_vote(store, queue_pairs):
    (pair_id,) = queue_pairs([("p", "a", "b")])
    votes.reserve_next_pair(store, "alice", 1, ttl_s=10, first_on_left=False, now=0.0)
    votes.submit_vote(store, "alice", pair_id, Choice.LEFT.outcome, "late", overlap=1, now=50.0)
    assert list_labels(store)[0].outcome is Outcome.SECOND  # second was on the left


def test_undo_reverts_the_last_label_and_shows_that_pair_again_with_the_same_sides(store, queue_pairs):
    three_pairs(queue_pairs)
    shown_1 = next_pair(store, "alice")
    submit_label(store, "alice", shown_1.pair_id, "left", vote())
    shown_2 = next_pair(store, "alice")
    submit_label(store, "alice", shown_2.pair_id, "tie", vote())
    assert undo_label(store, "alice") == shown_2
    assert [label.pair_id for label in list_labels(store)] == [shown_1.pair_id]
    assert len(list_labels(store, include_undone=True)) == 2  # kept, flagged undone
    assert next_pair(store, "alice") == shown_2
    assert undo_label(store, "alice") == shown_1  # a second undo walks further back
    assert list_labels(store) == []
    submit_label(store, "alice", shown_1.pair_id, "right", vote())
    first_id, left_id = get_pair(store, shown_1.pair_id).first_id, list_labels(store)[0].left_id
    assert [label.outcome for label in list_labels(store)] == [Choice.RIGHT.outcome(first_id, left_id)]
    with pytest.raises(Conflict, match="no label to undo"):
        undo_label(store, "bob")


def test_undoing_a_skip_after_someone_else_took_the_pair_shows_the_next_pair(store, queue_pairs):
    first, second = queue_pairs([("p1", "a", "b"), ("p2", "a", "b")])
    next_pair(store, "alice")
    submit_label(store, "alice", first, "skip", vote())
    assert next_pair(store, "bob").pair_id == first
    assert undo_label(store, "alice").pair_id == second
    assert list_labels(store) == []


def test_imported_preferences_never_enter_the_queue(store, queue_pairs):
    import_preferences(store, [Preference("q", "good", "bad")], source="hh-rlhf", now=0.0)
    update_queue_settings(store, overlap=3)
    assert next_pair(store, "alice") is None


def test_progress_counts_todays_labels_and_open_pairs(store, queue_pairs):
    three_pairs(queue_pairs)
    assert progress(store, "alice") == progress(store, "alice").__class__(0, 3)
    shown = next_pair(store, "alice")
    submit_label(store, "alice", shown.pair_id, "skip", vote())
    shown = next_pair(store, "alice")
    submit_label(store, "alice", shown.pair_id, "left", vote())
    assert (progress(store, "alice").labeled_today, progress(store, "alice").left_in_queue) == (1, 1)  # no skip
    assert progress(store, "bob").left_in_queue == 2  # alice's skipped pair is still open for bob


def test_settings_are_checked_before_any_is_stored(store):
    for bad in ({"overlap": 0}, {"overlap": 1.5}, {"overlap": "2"}, {"reservation_ttl_s": 1},
                {"reservation_ttl_s": float("nan")}, {"guidelines": "x" * 20_001}, {"guidelines": "nul\x00"}):
        with pytest.raises(InvalidInput):
            update_queue_settings(store, **{"guidelines": "changed", **bad})
    settings = update_queue_settings(store, overlap=3, reservation_ttl_s=60)
    assert (settings.overlap, settings.reservation_ttl_s) == (3, 60.0) and "changed" not in settings.guidelines


def test_eight_threads_never_share_a_pair_and_lose_no_vote(store, queue_pairs):
    pair_ids = queue_pairs([(f"p{i}", f"a{i}", f"b{i}") for i in range(40)])
    acknowledged, errors = {}, []

    def work(name):
        try:
            rng = random.Random(name)
            while (shown := next_pair(store, name, rng)) is not None:
                vote_id = vote()
                label_id = submit_label(store, name, shown.pair_id, rng.choice(["left", "right", "tie"]), vote_id)
                assert submit_label(store, name, shown.pair_id, "left", vote_id) == label_id  # replay
                acknowledged[vote_id] = (label_id, shown.pair_id, name)
        except Exception as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(f"annotator{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    labels = list_labels(store, include_undone=True)
    assert sorted(label.pair_id for label in labels) == sorted(pair_ids)  # each pair exactly once
    assert {label.vote_id: (label.id, label.pair_id, label.annotator) for label in labels} == acknowledged
