"""Logging in with a real browser (Playwright driving Debian's Chromium) through the login gate: the login page says
that failed attempts pause sign-ins, a wrong password is shown as such, and an idle session sends the browser back to
the login page (the clock is driven by hand). Fails, never skips, when Chromium is missing."""

import pytest
from playwright.sync_api import expect

from app.door import sessions
from bench.studio_driver import hashed_auth_file
from tests.helpers import FakeTime

pytestmark = pytest.mark.browser
expect.set_options(timeout=20_000)


def log_in(page, name: str, password: str) -> None:
    page.get_by_label("username").fill(name)
    page.get_by_label("password").fill(password)
    page.get_by_role("button", name="Login").click()


def test_an_idle_session_sends_the_browser_back_to_the_login_page(store, queue_pairs, serve_studio, browser, tmp_path,
                                                                   monkeypatch):
    clock = FakeTime()
    monkeypatch.setattr(sessions, "time", clock)
    queue_pairs([("A prompt.", "a", "b")])
    users = hashed_auth_file(tmp_path / "users.txt", {"alice": "secret"})
    page = browser.new_page()
    page.set_default_timeout(20_000)
    page.goto(serve_studio(store, users, idle_timeout_s=60).local_url)
    expect(page.get_by_text("sign-ins pause for a while")).to_be_visible()
    log_in(page, "alice", "wrong")
    expect(page.get_by_text("Incorrect credentials")).to_be_visible()
    log_in(page, "alice", "secret")
    expect(page.locator("#pair-prompt .text-rendered")).to_have_text("A prompt.")
    clock.advance(61)
    page.reload()
    expect(page.get_by_label("username")).to_be_visible()
    expect(page.locator("#pair-prompt .text-rendered")).to_have_count(0)
