"""The Label tab's serving order, its handlers called directly with a Store (no server, no browser): a waiting loop's
ranking comes before the people's pairs (after a vote on a pair, no next pair is reserved), the ranking panel shows it
in the pair's place, and once it is sent the pair comes back; the waiting line counts rankings as rankings."""

import os

from app.context import Studio
from app.label import label_screen, label_tab, ranking_panel
from labeling.queue.annotation import next_pair
from storage import jobs as job_rows
from storage.rankings import ranking_verdicts
from storage.votes import release_reservations
from tests.test_rankings import queue_rankings
from trainers.loop.waiting import waiting_phase

Choice = label_tab.Choice


def test_a_waiting_loops_ranking_comes_after_a_vote_on_a_pair_and_the_pairs_come_back_once_it_is_sent(
        store, queue_pairs):
    first, second = queue_pairs([("Pair prompt 1.", "a", "b"), ("Pair prompt 2.", "c", "d")])
    studio = Studio(store)
    started = label_tab.start_labeling(studio, "newbie", None, None)
    assert (started.pair_id, started.pair_shown) == (first, True)  # no loop waits: the pair queue

    job_id = job_rows.create_job(store, "loop", {})
    job_rows.claim_job(store, job_id, os.getpid())
    [ranking] = queue_rankings(store, [("Review.", ["Great.", "Dull.", "Fine."])], round=1, job_id=job_id)  # round 1
    job_rows.heartbeat(store, job_id, phase=f"round 1/1: {waiting_phase(0, 1, 'rankings')}")
    voted = label_screen.vote(studio, Choice.LEFT, "newbie", started.pair_id, started.vote_id, None)
    assert (voted.pair_id, voted.pair_shown, voted.status) == (None, False, "Saved: left.") and voted.ranking_turn
    assert voted.counts.endswith(f"round 1 of 1 needs 1 more ranking (loop job {job_id})")
    assert release_reservations(store, "newbie") == 0  # the ranking comes next: no pair was reserved

    turn = ranking_panel.take_turn(studio, "newbie", None)  # the panel answers the ranking's turn
    assert (turn.ranking.ranking_id, turn.ranking.panel["visible"], turn.pair.pair_shown) == (ranking, True, False)
    again = label_tab.start_labeling(studio, "newbie", "newbie", None)  # a reload: still the ranking, not a pair
    assert (again.pair_id, again.pair_shown) == (None, False)
    assert ranking_panel.take_turn(studio, "newbie", None).ranking.ranking_id == ranking

    sent = ranking_panel.send(studio, "CAB", "newbie", ranking, turn.ranking.vote_id, "", None)
    [verdict] = ranking_verdicts(store)
    assert (verdict.ranking_id, verdict.annotator, verdict.tiers) == (ranking, "newbie", [[2], [0], [1]])
    assert (sent.ranking.ranking_id, sent.ranking.status) == (None, "Saved: CAB.")
    assert (sent.pair.pair_id, sent.pair.pair_shown) == (second, True)  # none left for them: the pairs again
    assert f"round 1 of 1 has the 1 ranking it waits for (loop job {job_id}" in sent.pair.counts


def test_a_pair_held_from_before_the_loop_is_given_back_when_its_ranking_shows_in_the_pairs_place(store, queue_pairs):
    [pair] = queue_pairs([("Pair prompt.", "a", "b")])
    studio = Studio(store)
    assert label_tab.start_labeling(studio, "newbie", None, None).pair_id == pair  # held by newbie
    [ranking] = queue_rankings(store, [("Review.", ["Great.", "Dull.", "Fine."])], round=1)
    reloaded = label_tab.start_labeling(studio, "newbie", "newbie", None)  # a reload once the loop waits
    assert (reloaded.pair_id, reloaded.pair_shown) == (None, False)
    assert ranking_panel.take_turn(studio, "newbie", None).ranking.ranking_id == ranking
    assert next_pair(store, "alice").pair_id == pair  # given back: another annotator may take it
