"""The Label tab's strength, rationale and ratings in a real browser (Playwright driving Debian's Chromium): a strength
picked by key goes with the next left/right key into `labels.margin`, pressing it again clears it; a required
rationale missing is one hint, then the written one is stored as typed and runs nothing; ratings clicked go with a
key's vote; the ranking panel's rationale and ratings go with its order. Fails, never skips, when
Chromium is missing."""

import pytest
from playwright.sync_api import expect

from labeling.queue.notes import update_note_modes
from storage.labels import list_labels, training_labels
from storage.notes import list_notes
from storage.rankings import ranking_verdicts
from storage.types import Outcome
from tests.test_browser_label import act, open_page
from tests.test_rankings import queue_rankings

pytestmark = pytest.mark.browser
PAIRS = [(f"Prompt {i}: review the film.", f"A fine film, number {i}.", f"A dull film, number {i}.") for i in range(4)]


def start(page, name="alice"):
    page.get_by_label("Your name").fill(name)
    page.get_by_label("Your name").press("Enter")
    expect(page.locator("#pair-prompt .text-rendered")).to_have_count(1)
    page.evaluate("document.activeElement.blur()")  # keys typed into the name box are not shortcuts


def picked(page) -> str:
    """The strength radio's checked label ('' when none is)."""
    return page.evaluate("""() => [...document.querySelectorAll('#vote-strength input[type=radio]')]
        .find((input) => input.checked)?.closest('label')?.textContent.trim() ?? ''""")


def test_a_strength_by_key_goes_with_the_next_vote_into_the_margin(store, queue_pairs, serve_studio, browser):
    queue_pairs(PAIRS)
    dialogs = []
    page = open_page(browser, serve_studio(store).local_url, dialogs)
    start(page)
    expect(page.locator("#label-keys")).to_contain_text("5–8 then 1/2")
    page.keyboard.press("5")
    expect(page.locator("#vote-strength input:checked")).to_have_count(1)
    assert picked(page) == "much better (5)"
    first, _ = act(page, lambda: page.keyboard.press("1"))
    expect(page.locator("#label-status")).to_contain_text("Saved: left (much better).")
    assert picked(page) == "no strength"  # a new pair starts without one
    page.keyboard.press("7")
    page.keyboard.press("7")  # the same key again clears it
    assert picked(page) == "no strength"
    act(page, lambda: page.keyboard.press("2"))
    page.keyboard.press("7")
    act(page, lambda: page.keyboard.press("3"))  # a tie takes no strength

    labels = list_labels(store)
    assert [label.outcome.value for label in labels][2] == "tie"
    winner = Outcome.FIRST if first[1] == next(a for p, a, _ in PAIRS if p == first[0]) else Outcome.SECOND
    assert labels[0].outcome == winner
    assert [lp.margin for lp in training_labels(store)] == pytest.approx([1.0, None, None])
    assert dialogs == []


def test_a_required_rationale_is_asked_once_then_stored_as_typed(store, queue_pairs, serve_studio, browser):
    queue_pairs(PAIRS[:2])
    update_note_modes(store, rationale="required", ratings="off")
    dialogs = []
    page = open_page(browser, serve_studio(store).local_url, dialogs)
    start(page)
    expect(page.locator("#vote-rationale")).to_be_visible()
    expect(page.locator("#rating-left")).to_be_hidden()
    page.keyboard.press("1")
    expect(page.locator("#label-status")).to_contain_text("asks a rationale with every judgement")
    assert list_labels(store) == []
    why = "Left is <img src=x onerror=alert(1)> kinder"
    page.locator("#vote-rationale textarea").fill(why)
    page.evaluate("document.activeElement.blur()")
    act(page, lambda: page.keyboard.press("1"))
    expect(page.locator("#vote-rationale textarea")).to_have_value("")
    [note] = list_notes(store)
    assert (note.rationale, note.label_id) == (why, list_labels(store)[0].id)
    assert dialogs == []


def test_ratings_clicked_then_a_key_votes_with_them(store, queue_pairs, serve_studio, browser):
    queue_pairs(PAIRS[:2])
    dialogs = []
    page = open_page(browser, serve_studio(store).local_url, dialogs)
    start(page)
    expect(page.locator("#rating-left")).to_be_visible()  # ratings optional by default
    page.locator("#rating-left label", has_text="6").click()
    page.locator("#rating-right label", has_text="2").click()
    shown, _ = act(page, lambda: page.keyboard.press("1"))  # a clicked radio keeps the focus: the key still votes
    expect(page.locator("#rating-left input:checked")).to_have_count(0)
    [note] = list_notes(store)
    [label] = list_labels(store)
    assert (note.label_id, note.ratings[label.left_id], note.rationale) == (label.id, 6, None)
    assert sorted(note.ratings.values()) == [2, 6] and dialogs == []


def test_a_rankings_required_rationale_goes_with_its_order(store, serve_studio, browser):
    [ranking] = queue_rankings(store, [("Review 1.", ["A great film.", "A dull film.", "A fine film."])])
    update_note_modes(store, rationale="required")
    dialogs = []
    page = open_page(browser, serve_studio(store).local_url, dialogs)
    page.get_by_label("Your name").fill("alice")
    page.get_by_label("Your name").press("Enter")
    expect(page.locator("#rank-answer-C")).to_be_visible()
    page.evaluate("document.activeElement.blur()")
    expect(page.locator("#rank-rationale")).to_be_visible()
    for key in ("b", "a", "c"):  # the order goes out by itself, and is refused: no rationale
        page.keyboard.press(key)
    expect(page.get_by_text("asks a rationale with every judgement").first).to_be_visible()
    assert ranking_verdicts(store) == []
    page.locator("#rank-rationale textarea").fill("B is <b>bold</b>")
    page.evaluate("document.activeElement.blur()")
    page.keyboard.press("Enter")
    expect(page.locator("#rank-answers")).to_contain_text("No rankings are queued")
    [verdict] = ranking_verdicts(store)
    [note] = list_notes(store)
    assert (verdict.ranking_id, note.kind, note.label_id, note.rationale) == (ranking, "ranking", verdict.label_id,
                                                                              "B is <b>bold</b>")
    assert dialogs == []


def test_a_rankings_ratings_clicked_go_with_its_order_by_keys(store, serve_studio, browser):
    queue_rankings(store, [("Review 1.", ["A great film.", "A dull film.", "A fine film."]),
                           ("Review 2.", ["Good.", "Bad.", "Fine.", "Awful."])])
    dialogs = []
    page = open_page(browser, serve_studio(store).local_url, dialogs)
    page.get_by_label("Your name").fill("alice")
    page.get_by_label("Your name").press("Enter")
    expect(page.locator("#rank-answer-C")).to_be_visible()
    expect(page.locator("#rank-rating-C")).to_be_visible()  # ratings optional by default, one per answer shown
    expect(page.locator("#rank-rating-D")).to_be_hidden()
    for letter, rating in (("A", "7"), ("B", "1"), ("C", "4")):
        page.locator(f"#rank-rating-{letter} label", has_text=rating).click()
    for key in ("a", "c", "b"):  # a clicked rating keeps the focus: the keys still order, and the order goes out
        page.keyboard.press(key)
    expect(page.locator("#rank-answer-D")).to_be_visible()
    expect(page.locator("#rank-rating-D")).to_be_visible()
    expect(page.locator("#rank-ratings input:checked")).to_have_count(0)  # cleared for the next ranking
    [verdict] = ranking_verdicts(store)
    [note] = list_notes(store)
    assert verdict.tiers == [[0], [2], [1]] and note.label_id == verdict.label_id
    assert [note.ratings[g] for g in verdict.generation_ids] == [7, 1, 4] and dialogs == []
