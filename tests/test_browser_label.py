"""The Label tab in a real browser (Playwright driving Debian's Chromium): clicks, keys, undo, and model output
that tries to run script shows up as plain text. Fails, never skips, when Chromium is missing."""

import pytest
from playwright.sync_api import expect

from app import label_tab
from storage.labels import list_labels
from storage.pairs import get_pair
from storage.types import Outcome
from tests.helpers import hashed_auth_file

pytestmark = pytest.mark.browser

XSS = ["<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "[link](javascript:alert(1))"]
PAIRS = [(f"Prompt {i}: review the film.", XSS[i] if i < 3 else f"A fine film, number {i}.", f"A dull film, number {i}.")
         for i in range(6)]


@pytest.fixture
def serve(store, serve_studio):
    """`serve(users=None)`: the studio on `store` (as `python app.py serve` runs it); returns its URL."""
    return lambda users=None: serve_studio(store, users).local_url


expect.set_options(timeout=20_000)  # a loaded CI machine answers slowly; nothing here waits for a timeout


def open_page(browser, url, dialogs):
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.set_default_timeout(20_000)
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(url)
    return page


def shown(page) -> tuple[str, str, str]:
    return tuple(page.locator(f"#{elem} textarea").input_value() for elem in ("pair-prompt", "response-left", "response-right"))


def act(page, action):
    """Do a click or key press and wait until a different pair is on screen; returns (before, after)."""
    before = shown(page)
    action()
    page.wait_for_function("prompt => document.querySelector('#pair-prompt textarea').value !== prompt", arg=before[0])
    return before, shown(page)


def expected_outcome(store, pair_prompt, screen, choice):
    """The outcome a choice on this screen means, relative to the stored pair's first/second."""
    index = next(i for i, (prompt, _, _) in enumerate(PAIRS) if prompt == pair_prompt)
    first_text = PAIRS[index][1]
    if choice in ("left", "right"):
        picked = screen[1] if choice == "left" else screen[2]
        return index, Outcome.FIRST if picked == first_text else Outcome.SECOND
    return index, Outcome(choice)


def test_label_with_clicks_and_keys_including_tie_and_undo(store, queue_pairs, serve, browser, tmp_path):
    pair_ids = queue_pairs(PAIRS)
    dialogs = []
    page = open_page(browser, serve(), dialogs)
    page.get_by_label("Your name").fill("alice")
    page.get_by_label("Your name").press("Enter")
    expect(page.locator("#pair-prompt textarea")).not_to_have_value("")
    page.evaluate("document.activeElement.blur()")  # keys typed into the name box are not shortcuts

    votes = []  # (screen, choice) of each vote that should stay
    screen, _ = act(page, lambda: page.get_by_role("button", name="Left is better").click())
    votes.append((screen, "left"))
    screen, _ = act(page, lambda: page.keyboard.press("2"))
    votes.append((screen, "right"))
    tie_screen, _ = act(page, lambda: page.keyboard.press("3"))
    _, back = act(page, lambda: page.keyboard.press("u"))
    assert back == tie_screen  # undo shows the tied pair again, same sides
    screen, _ = act(page, lambda: page.keyboard.press("4"))
    votes.append((screen, "both_bad"))
    screen, _ = act(page, lambda: page.get_by_role("button", name="Skip").click())
    votes.append((screen, "skip"))
    screen, _ = act(page, lambda: page.keyboard.press("ArrowLeft"))
    votes.append((screen, "left"))
    expect(page.locator("#label-progress")).to_contain_text("5 labeled today")
    page.screenshot(path=str(tmp_path / "label.png"), full_page=True)

    labels = list_labels(store, include_undone=True)
    current = {label.pair_id: label for label in list_labels(store)}
    assert len(labels) == 6 and len(current) == 5
    (undone,) = [label for label in labels if label.id not in {c.id for c in current.values()}]
    assert (undone.outcome, undone.pair_id) == (Outcome.TIE, current[undone.pair_id].pair_id)
    for screen, choice in votes:
        index, outcome = expected_outcome(store, screen[0], screen, choice)
        label = current[pair_ids[index]]
        assert (label.annotator, label.outcome) == ("alice", outcome)
        pair = get_pair(store, label.pair_id)
        assert label.left_id == (pair.first_id if screen[1] == PAIRS[index][1] else pair.second_id)
        assert label.decision_ms is not None and label.decision_ms >= 0
    assert dialogs == []


def test_model_output_renders_as_literal_text_and_runs_nothing(store, queue_pairs, serve, browser, monkeypatch):
    monkeypatch.setattr(label_tab, "POLL_S", 0.5)
    queue_pairs(PAIRS[:3])
    dialogs = []
    page = open_page(browser, serve(), dialogs)
    page.get_by_label("Your name").fill("<img src=x onerror=alert(2)>")  # a hostile name is text too
    page.get_by_label("Your name").press("Enter")
    expect(page.locator("#label-status")).to_contain_text("Labeling as <img src=x onerror=alert(2)>")
    page.get_by_role("button", name="Undo last").click()  # an error message that names the hostile name
    expect(page.get_by_text("has no label to undo")).to_be_visible()
    seen = set()
    for _ in range(3):
        screen, _ = act(page, lambda: page.get_by_role("button", name="Tie").click())
        seen.update(screen[1:])
    assert set(XSS) <= seen  # each payload reached the screen, verbatim
    assert page.locator("img[src='x']").count() == 0
    assert page.locator("a[href^='javascript']").count() == 0
    page.wait_for_timeout(300)
    assert dialogs == []
    assert len(list_labels(store)) == 3
    expect(page.locator("#pair-prompt textarea")).to_have_value(label_tab.EMPTY)
    queue_pairs([("A late prompt.", "late a", "late b")])  # the empty queue is polled: new pairs show up
    expect(page.locator("#pair-prompt textarea")).to_have_value("A late prompt.", timeout=15_000)

def test_signed_in_annotators_label_as_themselves(store, queue_pairs, serve, browser, tmp_path):
    queue_pairs(PAIRS[3:])
    users = hashed_auth_file(tmp_path / "users.txt", {"alice": "secret", "owner": "pw"}, admins={"owner"})
    page = open_page(browser, serve(users), [])
    page.get_by_label("username").fill("alice")
    page.get_by_label("password").fill("secret")
    page.get_by_role("button", name="Login").click()
    expect(page.locator("#pair-prompt textarea")).not_to_have_value("", timeout=15_000)  # no name to type
    expect(page.get_by_label("Your name")).to_have_count(0)
    act(page, lambda: page.keyboard.press("1"))
    assert [label.annotator for label in list_labels(store)] == ["alice"]
