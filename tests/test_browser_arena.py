"""The Arena tab in a real browser (Playwright driving Debian's Chromium): a prompt typed, two answers sampled by the
worker, a vote with the Label tab's key, the versions named only after it, the label stored on a prompt of source
`arena`. Fails, never skips, when Chromium is missing."""

import re

import pytest
from playwright.sync_api import expect

from storage.arena import ARENA_SOURCE
from storage.labels import list_labels
from storage.pairs import get_pair
from storage.policies import add_policy, list_policies
from storage.prompts import get_prompt
from storage.types import Selector

pytestmark = pytest.mark.browser

expect.set_options(timeout=20_000)
PROMPT = "the movie was <img src=x onerror=alert(1)>"


def test_an_arena_vote_with_a_key_names_the_versions_after_it(demo_store, serve_studio, browser):
    root = list_policies(demo_store)[0]
    add_policy(demo_store, root.path, parent_id=root.id, round=1, note="arena test version")
    dialogs = []
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.set_default_timeout(20_000)
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(serve_studio(demo_store).local_url)
    page.get_by_role("tab", name="Arena").click()
    page.locator("#arena-user textarea, #arena-user input").first.fill("ada")
    page.locator("#arena-prompt textarea").fill(PROMPT)
    page.locator("#arena-ask").click()
    expect(page.locator("#arena-first-answer")).to_have_count(1, timeout=240_000)  # the worker loads and samples
    expect(page.locator("#arena-second-answer")).to_have_count(1)
    assert not re.search(r"\bv[01]\b", page.locator("#arena-tab").inner_text())  # blind before the vote
    expect(page.locator("#arena-vote-left")).to_be_enabled()

    page.evaluate("document.activeElement.blur()")  # keys typed into a box are not votes
    page.keyboard.press("1")  # the Label tab's key for the first (left) answer
    expect(page.locator("#arena-reveal")).to_contain_text("The first answer was")
    revealed = page.locator("#arena-reveal").inner_text()
    assert re.search(r"first answer was v[01], the second v[01]", revealed), revealed

    label = list_labels(demo_store)[-1]
    pair = get_pair(demo_store, label.pair_id)
    prompt = get_prompt(demo_store, pair.prompt_id)
    assert (label.annotator, label.outcome.value, pair.selector) == ("ada", "first", Selector.ARENA)
    assert (prompt.source, prompt.text) == (ARENA_SOURCE, PROMPT)
    assert dialogs == []  # nothing anyone typed ran
