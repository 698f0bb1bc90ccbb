"""The judge's suggestion on the Label tab (app.label.label_suggestions): after the vote by default, before it when the
project says so, never when it says never; said in the annotator's own screen sides."""

from app.context import Studio
from app.label import label_screen, label_tab
from app.label.label_suggestions import SuggestionTiming, set_timing
from labeling.queue.annotation import Choice
from storage.judge_verdicts import NewVerdict, add_verdicts
from storage.pairs import get_pair
from storage.types import Outcome


def first_side(store, shown_pair_id, start) -> str:
    """Which side the pair's first response is on, on this screen."""
    first = get_pair(store, shown_pair_id).first_id
    left_first = store.db().execute("SELECT left_id FROM reservations WHERE pair_id = ?",
                                    [shown_pair_id]).fetchone()[0] == first
    return "left" if left_first else "right"


def test_the_judges_verdict_shows_after_the_vote_in_screen_sides(store, queue_pairs):
    ids = queue_pairs([("p1", "a1", "b1"), ("p2", "a2", "b2")])
    add_verdicts(store, [NewVerdict(i, "qwen", "ok", Outcome.FIRST, 0.9) for i in ids])
    studio = Studio(store)
    start = label_tab.start_labeling(studio, "alice", None, None)
    assert "Judge" not in start.status  # not before the vote: no anchoring
    side = first_side(store, start.pair_id, start)
    after = label_screen.vote(studio, Choice.TIE, "alice", start.pair_id, start.vote_id, None)
    assert f"Judge qwen said **{side}** (confidence 90%)." in after.status and "Judge qwen suggests" not in after.status


def test_before_the_vote_when_the_project_says_so_and_never_when_never(store, queue_pairs):
    ids = queue_pairs([("p1", "a1", "b1"), ("p2", "a2", "b2"), ("p3", "a3", "b3")])
    add_verdicts(store, [NewVerdict(i, "qwen", "ok", Outcome.TIE, 1.0) for i in ids])
    studio = Studio(store)
    assert set_timing(store, "before") is SuggestionTiming.BEFORE
    start = label_tab.start_labeling(studio, "alice", None, None)
    assert "Judge qwen suggests a tie (confidence 100%)." in start.status
    after = label_screen.vote(studio, Choice.LEFT, "alice", start.pair_id, start.vote_id, None)
    assert "said" not in after.status and "suggests a tie" in after.status  # the next pair's, before its vote
    set_timing(store, "never")
    last = label_screen.vote(studio, Choice.LEFT, "alice", after.pair_id, after.vote_id, None)
    assert "Judge" not in last.status


def test_a_failed_verdict_or_none_shows_nothing(store, queue_pairs):
    ids = queue_pairs([("p1", "a1", "b1")])
    add_verdicts(store, [NewVerdict(ids[0], "qwen", "timeout")])
    studio = Studio(store)
    start = label_tab.start_labeling(studio, "alice", None, None)
    after = label_screen.vote(studio, Choice.LEFT, "alice", start.pair_id, start.vote_id, None)
    assert after.status == "Saved: left."


def test_the_data_tabs_setting_shows_the_stored_value_whenever_the_section_fills(store):
    from types import SimpleNamespace

    import gradio as gr
    import pytest

    from app.auth import Users
    from app.data import judge_panel

    studio = Studio(store, Users({"alice": "a", "owner": "o"}, frozenset({"owner"})))
    owner, alice = SimpleNamespace(username="owner"), SimpleNamespace(username="alice")
    with gr.Blocks():
        refresh = judge_panel.build(studio)
    assert refresh.fn(owner)[-1] == "after" and refresh.outputs[-1].elem_id == "judge-suggestions"
    assert judge_panel.on_timing(studio, "before", owner) == "before"
    assert refresh.fn(alice)[-1] == "before"  # a reload or another browser: the setting in force, not the start's
    with pytest.raises(gr.Error, match="only an admin"):
        judge_panel.on_timing(studio, "never", alice)
    assert judge_panel.shown_timing(studio) == "before"  # what the radio goes back to after the refusal
