"""The Label tab's demonstration editor in a real browser (Playwright driving Debian's Chromium): W opens it
prefilled with the left response, an edit and an answer written from nothing are saved with the pair, the response
edited and the time spent, a vote closes it, and Undo answer takes the newest back. Fails, never skips, when Chromium
is missing."""

import pytest
from playwright.sync_api import expect

from storage.demonstrations import list_demonstrations
from storage.pairs import get_pair
from tests.test_browser_label import PLAIN_TEXT, open_page, shown

pytestmark = pytest.mark.browser
expect.set_options(timeout=20_000)

PAIRS = [(f"Prompt {i}: review the film.", f"A fine film, number {i}.", f"A dull film, number {i}.")
         for i in range(3)]


def test_write_and_edit_answers_with_the_key_and_undo_one(store, queue_pairs, serve_studio, browser):
    pair_ids = queue_pairs(PAIRS)
    dialogs = []
    page = open_page(browser, serve_studio(store).local_url, dialogs)
    page.get_by_label("Your name").fill("alice")
    page.get_by_label("Your name").press("Enter")
    expect(page.locator("#pair-prompt .text-rendered")).to_have_count(1)
    page.evaluate("document.activeElement.blur()")

    first_screen = shown(page)
    page.keyboard.press("w")
    editor = page.locator("#demo-text textarea")
    expect(editor).to_be_visible()
    expect(editor).to_have_value(first_screen[1])  # prefilled with the left response
    editor.fill(first_screen[1] + " Wonderful and moving, too.")
    page.locator("#demo-save").click()
    expect(page.locator("#demo-status")).to_contain_text("Saved your answer (demonstration 1)")
    expect(page.locator("#demo-editor")).to_be_hidden()

    page.evaluate("document.activeElement.blur()")
    page.keyboard.press("1")  # the pair is still on screen: vote on it, and the next pair comes
    page.wait_for_function(f"prompt => ({PLAIN_TEXT})('pair-prompt') !== prompt", arg=first_screen[0])
    page.locator("#demo-open").click()
    page.get_by_label("Empty").check()
    expect(editor).to_have_value("")
    editor.fill("Brilliant, witty and heartfelt.")
    page.locator("#demo-save").click()
    expect(page.locator("#demo-status")).to_contain_text("Saved your answer (demonstration 2)")

    page.locator("#demo-undo").click()
    expect(page.locator("#demo-status")).to_contain_text("Took back demonstration 2")

    [current] = list_demonstrations(store)
    index = next(i for i, (prompt, _, _) in enumerate(PAIRS) if prompt == first_screen[0])
    pair = get_pair(store, pair_ids[index])
    left_id = pair.first_id if first_screen[1] == PAIRS[index][1] else pair.second_id
    assert (current.id, current.author, current.pair_id, current.generation_id) == (1, "alice", pair.id, left_id)
    assert current.text == first_screen[1] + " Wonderful and moving, too." and current.seconds >= 0
    undone = [d for d in list_demonstrations(store, include_undone=True) if d.undone is not None]
    assert [(d.id, d.generation_id, d.text) for d in undone] == [(2, None, "Brilliant, witty and heartfelt.")]
    assert dialogs == []
