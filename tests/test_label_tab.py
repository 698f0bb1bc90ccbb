"""The Label tab's handlers, called directly with a Store (no server, no browser): the public API, the screen each
action leaves, the empty-queue poll, --auth names, queue settings; and how `bind` hands them to Gradio."""

import os
from types import SimpleNamespace

import gradio as gr
import pytest
from gradio.utils import get_function_params

from app.auth import Users
from app.context import Studio, bind
from app.label import label_screen, label_tab
from labeling.queue.annotation import ShownPair
from storage import jobs as job_rows
from storage.labels import list_labels
from storage.pairs import NewPair, get_pair
from storage.policies import add_policy
from storage.types import JobStatus, Selector
from storage.votes import release_reservations
from storage.winrate import WinrateMark, queue_winrate_pairs
from trainers.loop.ranking_round import round_judgements
from trainers.loop.waiting import waiting_phase

USERS = Users({"alice": "a", "owner": "o"}, frozenset({"owner"}))
Choice = label_tab.Choice


def prompt_pane(text: str) -> str:
    """The prompt pane of a pair whose prompt is this plain text."""
    return label_screen.prompt_html(ShownPair(1, text, "left", "right"))


def signed_in(name: str) -> SimpleNamespace:
    """What Gradio's request carries that the handlers read: the logged-in user."""
    return SimpleNamespace(username=name)


def test_the_api_handlers_reserve_store_and_undo(store, queue_pairs):
    first, second = queue_pairs([("p1", "a1", "b1"), ("p2", "a2", "b2")])
    studio = Studio(store)
    shown = label_tab.api_next_pair(studio, "alice", None)
    assert shown["pair_id"] in (first, second) and shown["left_in_queue"] == 2 and shown["labeled_today"] == 0
    answer = label_tab.api_submit_label(studio, "alice", shown["pair_id"], "tie", "vote-1", None)
    assert [label.id for label in list_labels(store)] == [answer["label_id"]]
    assert answer["next"]["pair_id"] == ({first, second} - {shown["pair_id"]}).pop()
    assert answer["next"]["labeled_today"] == 1
    again = label_tab.api_undo_label(studio, "alice", None)
    assert again["pair_id"] == shown["pair_id"] and list_labels(store) == []
    with pytest.raises(gr.Error, match="not reserved for bob"):
        label_tab.api_submit_label(studio, "bob", shown["pair_id"], "left", "vote-2", None)


def test_a_skip_is_not_counted_as_labeled_today(store, queue_pairs):
    queue_pairs([("p1", "a1", "b1"), ("p2", "a2", "b2")])
    studio = Studio(store)
    shown = label_tab.api_next_pair(studio, "alice", None)
    skipped = label_tab.api_submit_label(studio, "alice", shown["pair_id"], "skip", "vote-1", None)
    assert skipped["next"]["labeled_today"] == 0
    voted = label_tab.api_submit_label(studio, "alice", skipped["next"]["pair_id"], "left", "vote-2", None)
    assert voted["next"]["labeled_today"] == 1
    assert label_screen.counts_line(studio, "alice", None).startswith("**1** labeled today")


def test_the_key_legend_names_every_key_w_included():
    with gr.Blocks() as blocks:
        label_tab.layout(signed_in=False)
    [legend] = [block.value for block in blocks.blocks.values() if getattr(block, "elem_id", None) == "label-keys"]
    for key in ("1", "2", "3", "4", "S", "U", "W"):
        assert f"<kbd>{key}</kbd>" in legend
    assert "<kbd>W</kbd> write a better answer" in legend


def test_a_conversation_shows_as_turns_and_the_api_adds_its_messages(store, queue_pairs):
    turns = [{"role": "system", "content": "Answer in *markdown*."}, {"role": "user", "content": "<b>Sort</b> this."}]
    queue_pairs([(turns, "```py\nsorted(x)\n```", "| a |\n|---|\n| 1 |")])
    studio = Studio(store)
    shown = label_tab.api_next_pair(studio, "alice", None)
    assert (shown["prompt"], shown["messages"]) == ("System: Answer in *markdown*.\n\nHuman: <b>Sort</b> this.", turns)
    screen = label_tab.start_labeling(studio, "alice", None, None)
    assert '<div class="turn turn-system" data-role="system"><div class="turn-role">System</div>' in screen.prompt
    assert "<em>markdown</em>" in screen.prompt and "&lt;b&gt;Sort&lt;/b&gt; this." in screen.prompt
    assert "<b>" not in screen.prompt
    assert screen.responses == label_screen.responses_html(ShownPair(1, "", shown["left"], shown["right"]))
    assert '<pre><code class="language-py">sorted(x)' in screen.responses and "<td>1</td>" in screen.responses
    queue_pairs([("plain", "a", "b")])
    label_tab.api_submit_label(studio, "alice", shown["pair_id"], "tie", "v1", None)
    assert label_tab.api_next_pair(studio, "alice", None)["messages"] is None
    label_tab.api_submit_label(studio, "alice", label_tab.api_next_pair(studio, "alice", None)["pair_id"], "tie", "v2",
                               None)
    assert label_tab.api_next_pair(studio, "alice", None) == {"pair_id": None, "prompt": None, "messages": None,
                                                               "left": None, "right": None, "labeled_today": 2,
                                                               "left_in_queue": 0}


def test_under_auth_the_annotator_is_the_signed_in_user(store, queue_pairs):
    queue_pairs([("p", "a", "b")])
    studio = Studio(store, USERS)
    assert label_tab.api_next_pair(studio, "", signed_in("alice"))["pair_id"] is not None
    with pytest.raises(gr.Error, match="you are signed in as alice; you cannot label as someone else"):
        label_tab.api_next_pair(studio, "bob", signed_in("alice"))
    with pytest.raises(gr.Error, match="log in first"):
        label_tab.api_next_pair(studio, "alice", None)


def test_a_vote_shows_the_next_pair_with_a_new_vote_id(store, queue_pairs):
    queue_pairs([("p1", "a1", "b1"), ("p2", "a2", "b2")])
    studio = Studio(store)
    start = label_tab.start_labeling(studio, "alice", None, None)
    assert start.prompt in (prompt_pane("p1"), prompt_pane("p2"))
    assert start.vote_id and start.labeling_as == "Labeling as **alice**" and start.annotator == "alice"
    assert start.counts == "**0** labeled today · **2** left in the queue" and start.poll.active is False
    after = label_screen.vote(studio, Choice.BOTH_BAD, "alice", start.pair_id, start.vote_id, None)
    assert after.pair_id != start.pair_id and after.vote_id != start.vote_id and after.status == "Saved: both bad."
    [label] = list_labels(store)
    assert (label.pair_id, label.vote_id, label.outcome.value) == (start.pair_id, start.vote_id, "both_bad")
    back = label_tab.undo(studio, "alice", None)
    assert back.pair_id == start.pair_id and back.status == "Undone: the pair is back; vote again."


def test_a_vote_on_a_pair_that_left_the_annotator_warns_and_moves_on(store, queue_pairs):
    queue_pairs([("p1", "a1", "b1")])
    studio = Studio(store)
    start = label_tab.start_labeling(studio, "alice", None, None)
    label_tab.api_submit_label(studio, "alice", start.pair_id, "left", "elsewhere", None)  # another tab of alice's
    with pytest.warns(UserWarning, match="not reserved for alice"):  # gr.Warning outside a request is a warning
        after = label_screen.vote(studio, Choice.LEFT, "alice", start.pair_id, start.vote_id, None)
    assert after.pair_id is None and after.prompt == label_screen.EMPTY_HTML and len(list_labels(store)) == 1


def test_an_empty_queue_polls_until_pairs_arrive(store, queue_pairs):
    studio = Studio(store)
    empty = label_tab.start_labeling(studio, "alice", None, None)
    assert (empty.pair_id, empty.vote_id, empty.prompt, empty.poll.active) == (
        None, None, label_screen.EMPTY_HTML, True)
    assert empty.responses == ""
    assert label_screen.vote(studio, Choice.LEFT, "alice", None, None, None).status == "Nothing to vote on yet."
    assert label_tab.poll_queue(studio, "alice", None, None) == gr.skip()  # nothing new: the screen stays
    queue_pairs([("p", "a", "b")])
    arrived = label_tab.poll_queue(studio, "alice", None, None)
    assert arrived.prompt == prompt_pane("p") and arrived.status == "New pairs arrived."
    assert arrived.poll.active is False
    assert label_tab.poll_queue(studio, "alice", arrived.pair_id, None) == gr.skip()  # a pair on screen: no poll


def test_before_a_name_votes_undo_and_start_show_one_hint_and_change_nothing(store, queue_pairs):
    queue_pairs([("p", "a", "b")])
    studio = Studio(store)
    for screen in (label_screen.vote(studio, Choice.LEFT, "", None, None, None), label_tab.undo(studio, None, None),
                   label_tab.start_labeling(studio, "  ", None, None)):
        assert screen.status == label_screen.NAME_HINT  # a hint in the status line, no error raised
        assert all(value == gr.skip() for name, value in vars(screen).items() if name != "status")
    assert label_tab.poll_queue(studio, "", None, None) == gr.skip()
    too_long = label_tab.start_labeling(studio, "x" * 65, None, None)
    assert too_long.status == "the annotator name has 65 characters; use at most 64" and too_long.pair_id == gr.skip()
    assert list_labels(store) == []


def test_a_started_name_replaces_the_box_and_the_browser_remembers_it(store, queue_pairs):
    queue_pairs([("p", "a", "b")])
    started = label_tab.start_labeling(Studio(store), " zoé ", None, None)
    assert (started.annotator, started.labeling_as) == ("zoé", "Labeling as **zoé**")
    assert started.name_entry["visible"] is False and started.name_shown["visible"] is True
    entry, box, shown = label_tab.change_name("zoé")
    assert (entry["visible"], box["value"], shown["visible"]) == (True, "zoé", False)
    again = label_tab.show_known_annotator(Studio(store), "zoé", None)  # a reload: the same pair, no name typed
    assert again.pair_id == started.pair_id and again.labeling_as == "Labeling as **zoé**"


def test_a_new_name_gives_back_the_old_names_pair_and_votes_as_the_new_one(store, queue_pairs):
    queue_pairs([("p", "a", "b")])  # one pair: alice12 can only get it once alice gives it back
    studio = Studio(store)
    alice = label_tab.start_labeling(studio, "alice", None, None)
    renamed = label_tab.start_labeling(studio, "alice12", "alice", None)
    assert renamed.pair_id == alice.pair_id and release_reservations(store, "alice") == 0
    after = label_screen.vote(studio, Choice.LEFT, renamed.annotator, renamed.pair_id, renamed.vote_id, None)
    assert after.status == "Saved: left." and [label.annotator for label in list_labels(store)] == ["alice12"]


def test_a_loop_waiting_for_people_shows_beside_the_queue_counts(store, queue_pairs):
    job_id = job_rows.create_job(store, "loop", {})
    queue_pairs([("p", "a", "b")], round=2, job_id=job_id)  # no policy before the job: its round 2 is the store's 2
    job_rows.claim_job(store, job_id, os.getpid())
    job_rows.heartbeat(store, job_id, phase="round 2/3: training the reward model")
    started = label_tab.start_labeling(Studio(store), "alice", None, None)
    assert started.counts == "**0** labeled today · **1** left in the queue"  # a loop that waits for nobody
    job_rows.heartbeat(store, job_id, phase=f"round 2/3: {waiting_phase(0, 2)}")
    assert label_tab.show_counts(Studio(store), "alice", started.pair_id, None) == (  # the tab opened again
        f"**0** labeled today · **1** left in the queue · round 2 of 3 needs 2 more labels (loop job {job_id})")
    assert label_tab.show_counts(Studio(store), "", started.pair_id, None) == gr.skip()  # no name yet
    after = label_screen.vote(Studio(store), Choice.LEFT, "alice", started.pair_id, started.vote_id, None)
    assert after.counts == ("**1** labeled today · **0** left in the queue · round 2 of 3 needs 1 more label "
                            f"(loop job {job_id})")  # counted now, not at the loop's next poll
    job_rows.finish_job(store, job_id, JobStatus.CANCELLED)
    assert label_tab.undo(Studio(store), "alice", None).counts == "**0** labeled today · **1** left in the queue"


def test_page_load_shows_signed_in_annotators_their_pair_and_others_nothing(store, queue_pairs):
    queue_pairs([("p", "a", "b")])
    assert label_tab.show_known_annotator(Studio(store), "", None) == gr.skip()
    shown = label_tab.show_known_annotator(Studio(store, USERS), "", signed_in("alice"))
    assert shown.prompt == prompt_pane("p") and shown.labeling_as == "Labeling as **alice**"


def test_only_admins_save_queue_settings(store):
    studio = Studio(store, USERS)
    with pytest.raises(gr.Error, match="only an admin"):
        label_tab.save_queue_settings(studio, "Be kind.", 2, 60, signed_in("alice"))
    assert label_tab.save_queue_settings(studio, "Be kind.", 2, 60, signed_in("owner")) == "Be kind."
    assert label_tab.current_settings(studio) == label_tab.Settings(label_tab.guidelines_html("Be kind."), "Be kind.",
                                                                    2, 60)
    assert label_tab.on_save_settings(studio, "Be *kind*.", 2, 60, signed_in("owner")) == (
        '<div class="guidelines-text"><p>Be <em>kind</em>.</p>\n</div>')  # the Save button shows them rendered
    with pytest.raises(gr.Error, match="overlap"):
        label_tab.save_queue_settings(studio, "Be kind.", 0, 60, signed_in("owner"))


def test_a_view_fills_the_layout_components_of_its_field_names(store):
    with gr.Blocks():
        ui = label_tab.layout(signed_in=False)
    assert label_screen.Screen.components(ui) == [ui.pair_id, ui.vote_id, ui.prompt, ui.responses, ui.counts,
                                              ui.status, ui.poll, ui.pair_shown, ui.ranking_turn]
    screen = label_screen.Screen(1, "v", "p", "lr", "c", "s", None, True, "t")
    assert screen.values() == (1, "v", "p", "lr", "c", "s", None, True, "t")
    assert list(ui.votes) == list(Choice) and ui.votes[Choice.SKIP].elem_id == "vote-skip"
    assert ui.prompt.value == label_tab.NAME_FIRST_HTML  # a line, not a blank band, where the pair will be
    with gr.Blocks():
        assert label_tab.layout(signed_in=True).prompt.value == ""  # under --auth the pair comes on page load


def test_bind_shows_gradio_the_handler_without_its_leading_arguments(store, queue_pairs):
    """Gradio builds the API from the listener's parameters and passes the request by its type hint; a view comes
    back as values in field order."""
    queue_pairs([("p", "a", "b")])
    studio = Studio(store)
    listener = bind(label_tab.api_next_pair, studio)
    assert [(name, hint) for name, _, _, hint in get_function_params(listener)] == [("annotator", str)]
    assert listener.__name__ == "api_next_pair" and listener.__doc__ == label_tab.api_next_pair.__doc__
    assert listener("alice", None)["prompt"] == "p"
    vote = bind(label_screen.vote, studio, Choice.TIE)
    assert [name for name, *_ in get_function_params(vote)] == ["annotator", "pair_id", "vote_id", "judgement"]
    shown = bind(label_tab.start_labeling, studio)("alice", None, None)
    assert isinstance(shown, tuple) and shown[2] == prompt_pane("p")  # Screen.values(): pair_id, vote_id, prompt, ...


def waiting_loop(store, round_index: int, rounds: int, wanted: int) -> int:
    """A running loop job whose round `round_index` of `rounds` waits for `wanted` labels (its phase as the loop
    writes it); the loop itself is not running, so the phase keeps its first count."""
    job_id = job_rows.create_job(store, "loop", {})
    job_rows.claim_job(store, job_id, os.getpid())
    job_rows.heartbeat(store, job_id, phase=f"round {round_index}/{rounds}: {waiting_phase(0, wanted)}")
    return job_id


def test_votes_on_the_waiting_rounds_pairs_lower_its_count_at_once(demo_store, queue_pairs):
    """The demo's seed pairs (round 0) stay in the queue while a loop's first round (the store's round 1) waits: the
    pair held from before the loop counts for nothing, the next pairs are the round's and each vote lowers the line
    at once, not when the loop next polls."""
    studio = Studio(demo_store)
    before = label_tab.start_labeling(studio, "alice", None, None)  # a seed pair, held from before the loop
    job_id = waiting_loop(demo_store, 1, 3, 2)
    theirs = set(queue_pairs([("r1", "a1", "b1"), ("r2", "a2", "b2"), ("r3", "a3", "b3")], round=1, job_id=job_id))
    line = f" · round 1 of 3 needs {{}} (loop job {job_id}{{}})"
    opened = label_tab.show_counts(studio, "alice", before.pair_id, None)  # the Label tab opened again
    assert opened.endswith(line.format("2 more labels", "; the pair on screen is not one of its pairs"))
    first = label_screen.vote(studio, Choice.LEFT, "alice", before.pair_id, before.vote_id, None)
    assert before.pair_id not in theirs and first.pair_id in theirs and first.counts.endswith(
        line.format("2 more labels", ""))
    second = label_screen.vote(studio, Choice.RIGHT, "alice", first.pair_id, first.vote_id, None)
    assert second.pair_id in theirs and second.counts.endswith(line.format("1 more label", ""))


def test_the_line_says_which_labels_the_waiting_round_does_not_count(store, queue_pairs):
    """Win-rate pairs among the round's pairs and a pair on screen from another round count for nothing, and the
    line says so; a vote on the round's own pair counts as the loop counts it (`round_judgements`)."""
    sft = add_policy(store, "sft", round=0)
    v1 = add_policy(store, "v1", parent_id=sft, round=1)
    job_id = waiting_loop(store, 1, 2, 1)  # made after v1 (round 1): its round 1 is the store's round 2
    older = queue_pairs([("old", "a0", "b0")], round=1, scores=[9.0])
    own = queue_pairs([("own", "a1", "b1")], round=2, scores=[1.0], job_id=job_id)
    judged = [get_pair(store, pair_id) for pair_id in queue_pairs([("w1", "a", "b"), ("w2", "c", "d")])]
    queue_winrate_pairs(store, [NewPair(p.prompt_id, p.first_id, p.second_id, Selector.WINRATE, 3.0 - i, round=2)
                                for i, p in enumerate(judged)], [WinrateMark(v1, sft)] * 2, job_id)
    studio = Studio(store)
    line = f" · round 1 of 2 {{}} (loop job {job_id}{{}})"
    first = label_tab.start_labeling(studio, "alice", None, None)  # the queue's first: a win-rate pair
    assert first.counts.endswith(line.format("needs 1 more label", "; 2 win-rate pairs among its pairs do not count"))
    elsewhere = label_screen.screen(studio, "alice", ShownPair(older[0], "old", "a0", "b0"))
    assert elsewhere.counts.endswith(line.format("needs 1 more label", "; the pair on screen is not one of its "
                                                 "pairs; 2 win-rate pairs among its pairs do not count"))
    second = label_screen.vote(studio, Choice.LEFT, "alice", first.pair_id, first.vote_id, None)
    assert second.counts.endswith(line.format("needs 1 more label", "; 1 win-rate pair among its pairs does not count"))
    third = label_screen.vote(studio, Choice.LEFT, "alice", second.pair_id, second.vote_id, None)
    assert third.pair_id == own[0] and third.counts.endswith(line.format("needs 1 more label", ""))
    assert round_judgements(store, 2, job_id) == 0
    fourth = label_screen.vote(studio, Choice.TIE, "alice", third.pair_id, third.vote_id, None)
    assert round_judgements(store, 2, job_id) == 1 and fourth.pair_id == older[0]  # then the older rounds' pairs
    assert fourth.counts.endswith(line.format("has the 1 label it waits for",
                                              "; the pair on screen is not one of its pairs"))
