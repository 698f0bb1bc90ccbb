"""The Label tab's ranking panel in a real browser (app/label/ranking_panel.py): 4 answers ranked with the keys, two of
them tied, the verdict undone and sent again; a loop's ranking served next to a newcomer who has just voted on a pair
(and again after a reload), ranked with the keys, then the pair queue back; and the ranking API through
gradio_client."""

import os

import pytest
from gradio_client import Client
from playwright.sync_api import expect

from labeling.queue.annotation import update_queue_settings
from storage import jobs as job_rows
from storage.labels import list_labels
from storage.rankings import ranking_verdicts
from tests.test_rankings import queue_rankings
from trainers.loop.waiting import waiting_phase

pytestmark = pytest.mark.browser
expect.set_options(timeout=20_000)

ANSWERS = ["A great film.", "A dull film.", "A fine film.", "An awful film."]


def answer_letters(page) -> str:
    return page.locator("#rank-answers [data-letters]").get_attribute("data-letters")


def test_rank_four_answers_with_the_keys_tie_two_and_undo(store, serve_studio, browser):
    first, second = queue_rankings(store, [("Review 1.", ANSWERS), ("Review 2.", [a + " 2" for a in ANSWERS])])
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.set_default_timeout(20_000)
    page.goto(serve_studio(store).local_url)
    page.get_by_label("Your name").fill("alice")
    page.get_by_label("Your name").press("Enter")
    expect(page.locator("#rank-answer-D")).to_contain_text("An awful film.")
    assert answer_letters(page) == "ABCD"
    page.evaluate("document.activeElement.blur()")
    for key in ("b", "a", "=", "c"):
        page.keyboard.press(key)
    expect(page.locator("#rank-order textarea, #rank-order input").first).to_have_value("BA=C")
    page.keyboard.press("d")  # the last answer: the order goes out by itself
    expect(page.locator("#rank-prompt")).to_contain_text("Review 2.")
    [verdict] = ranking_verdicts(store)
    assert (verdict.ranking_id, verdict.tiers, verdict.annotator) == (first, [[1], [0, 2], [3]], "alice")

    page.keyboard.press("z")  # undo: the first ranking comes back, its verdict undone (kept)
    expect(page.locator("#rank-prompt")).to_contain_text("Review 1.")
    assert ranking_verdicts(store) == [] and len(ranking_verdicts(store, include_undone=True)) == 1
    for key in ("d", "c", "b", "a"):
        page.keyboard.press(key)
    expect(page.locator("#rank-prompt")).to_contain_text("Review 2.")
    page.keyboard.press("0")  # all bad
    expect(page.locator("#rank-answers")).to_contain_text("No rankings are queued")
    got = [(v.ranking_id, v.outcome, v.tiers) for v in ranking_verdicts(store)]
    assert got == [(first, "ranked", [[3], [2], [1], [0]]), (second, "all_bad", None)]


def test_a_newcomer_who_just_voted_on_a_pair_is_served_the_waiting_loops_ranking_and_ranks_it_with_the_keys(
        store, queue_pairs, serve_studio, browser):
    queue_pairs([("Pair prompt 1.", "A fine film.", "A dull film."), ("Pair prompt 2.", "Good.", "Bad.")])
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.set_default_timeout(20_000)
    page.goto(serve_studio(store).local_url)
    page.get_by_label("Your name").fill("newbie")
    page.get_by_label("Your name").press("Enter")
    expect(page.locator("#pair-prompt")).to_contain_text("Pair prompt 1.")  # no loop waits yet: the pair queue

    # a rank_k 4 loop starts waiting for its round's ranking (no policy before it: its round 1 is the store's 1)
    job_id = job_rows.create_job(store, "loop", {})
    job_rows.claim_job(store, job_id, os.getpid())
    [ranking] = queue_rankings(store, [("Review 1.", ANSWERS)], round=1, job_id=job_id)  # the loop's own
    job_rows.heartbeat(store, job_id, phase=f"round 1/1: {waiting_phase(0, 1, 'rankings')}")
    page.evaluate("document.activeElement.blur()")
    page.keyboard.press("1")  # a vote on the pair: the next item is the loop's ranking, in the pair's place
    expect(page.locator("#rank-answer-D")).to_contain_text("An awful film.")
    expect(page.locator("#vote-left")).to_be_hidden()
    assert [(label.annotator, label.pair_id is not None) for label in list_labels(store)] == [("newbie", True)]
    expect(page.locator("#label-progress")).to_contain_text(f"round 1 of 1 needs 1 more ranking (loop job {job_id})")

    page.reload()  # the browser remembers the name: the reserved ranking again, not a pair
    expect(page.locator("#labeling-as")).to_have_text("Labeling as newbie")
    expect(page.locator("#rank-answer-D")).to_contain_text("An awful film.")
    expect(page.locator("#vote-left")).to_be_hidden()
    page.evaluate("document.activeElement.blur()")
    for key in ("c", "a", "b", "d"):  # the last letter sends the order
        page.keyboard.press(key)
    expect(page.locator("#pair-prompt")).to_contain_text("Pair prompt 2.")  # none left: the pair queue is back
    expect(page.locator("#vote-left")).to_be_visible()
    [verdict] = ranking_verdicts(store)
    assert (verdict.ranking_id, verdict.annotator, verdict.tiers) == (ranking, "newbie", [[2], [0], [1], [3]])
    expect(page.locator("#label-progress")).to_contain_text("round 1 of 1 has the 1 ranking it waits for")


def test_the_ranking_api_serves_each_ranking_to_overlap_annotators(store, serve_studio):
    [ranking] = queue_rankings(store, [("Review.", ANSWERS[:3])])
    update_queue_settings(store, overlap=2)
    client = Client(serve_studio(store).local_url, verbose=False)
    for name, order in (("alice", "CBA"), ("bob", "C=BA")):
        shown = client.predict(name, api_name="/next_ranking")
        assert (shown["ranking_id"], shown["letters"], shown["responses"]) == (ranking, "ABC", ANSWERS[:3])
        answer = client.predict(name, ranking, order, f"v-{name}", api_name="/submit_ranking")
        assert answer["next"]["ranking_id"] is None
    assert client.predict("carol", api_name="/next_ranking")["ranking_id"] is None
    assert [v.tiers for v in ranking_verdicts(store)] == [[[2], [1], [0]], [[2, 1], [0]]]
    back = client.predict("bob", api_name="/undo_ranking")
    assert back["ranking_id"] == ranking and len(ranking_verdicts(store)) == 1
