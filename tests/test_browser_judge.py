"""The judge's suggestion in a real browser (Playwright driving Debian's Chromium): after a vote on the Label tab the
status line says what the judge said about that pair, and not before; the Data tab shows the setting in force and
changes it. Fails, never skips, when Chromium is missing."""

import pytest
from playwright.sync_api import expect

from app.label.label_suggestions import SuggestionTiming, set_timing, timing
from storage.judge_verdicts import NewVerdict, add_verdicts
from storage.types import Outcome

pytestmark = pytest.mark.browser
expect.set_options(timeout=20_000)


def test_the_judges_suggestion_appears_after_a_vote(store, queue_pairs, serve_studio, browser):
    ids = queue_pairs([(f"Prompt {i}: review the film.", f"A fine film {i}.", f"A dull film {i}.") for i in range(3)])
    add_verdicts(store, [NewVerdict(i, "smol-judge", "ok", Outcome.TIE, 0.75) for i in ids])
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.goto(serve_studio(store).local_url)
    page.get_by_label("Your name").fill("alice")
    page.get_by_label("Your name").press("Enter")
    expect(page.locator("#labeling-as")).to_have_text("Labeling as alice")
    status = page.locator("#label-status")
    expect(status).not_to_contain_text("smol-judge")  # nothing before the vote (the default)
    page.get_by_role("button", name="Left is better").click()
    expect(status).to_contain_text("Saved: left. Judge smol-judge said a tie (confidence 75%).")

    set_timing(store, "before")  # changed elsewhere (another admin's browser) after the server started
    page.get_by_role("tab", name="Data").click()
    setting = page.locator("#judge-suggestions")
    expect(setting.get_by_label("before")).to_be_checked()
    setting.get_by_label("never").check()
    expect(setting.get_by_label("never")).to_be_checked()
    for _ in range(100):  # the change reaches the store
        if timing(store) is SuggestionTiming.NEVER:
            break
        page.wait_for_timeout(100)
    assert timing(store) is SuggestionTiming.NEVER
