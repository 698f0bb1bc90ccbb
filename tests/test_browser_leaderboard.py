"""The Leaderboard tab in a real browser (Playwright + Debian's Chromium): every version's win rate against the SFT
policy with its interval, and the leaderboard in rank order with intervals, as the store's judgements give them; the
same figures from the `/leaderboard` API; new labels show when the tab is opened again."""

import pytest
from gradio_client import Client
from playwright.sync_api import expect

from labeling.queue.synthetic import OracleAnnotator
from labeling.versions.winrate import winrate_report
from storage.policies import get_policy
from tests.winrate_helpers import by_version, versions
from trainers.loop.config import LoopConfig
from trainers.loop.winrate_pairs import queue_version_pairs

pytestmark = pytest.mark.browser


def test_the_leaderboard_renders_every_version_with_intervals(store, serve_studio, browser, tmp_path):
    sft, v1, v2 = versions(store)
    config = LoopConfig(winrate_previous=8)
    for version in (v1, v2):
        queue_version_pairs(store, get_policy(store, version), config, within=0, with_oracle=False)
    OracleAnnotator(by_version, noise=0.4, seed=1).label(store, 40)  # v2's 32 pairs come first: 16 of v1's stay open
    report = winrate_report(store)
    studio = serve_studio(store)

    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    page.set_default_timeout(30_000)
    page.goto(studio.local_url)
    page.get_by_role("tab", name="Leaderboard").click()
    rows = page.locator("#winrate-versions tbody tr")
    expect(rows).to_have_count(len(report.versions))
    for row, figures in zip(rows.all(), report.versions, strict=True):
        cells = [c.inner_text() for c in row.locator("td").all()]
        assert cells[0] == figures.name and cells[2] == str(figures.judgements)
        assert cells[3] == f"{figures.wins} / {figures.ties} / {figures.losses}"
        assert cells[4] == f"{figures.rate:.0%} [{figures.low:.0%}, {figures.high:.0%}]"
        assert cells[6] == f"{figures.lc_rate:.0%} [{figures.lc_low:.0%}, {figures.lc_high:.0%}]"
    assert page.locator("#winrate-versions .ci .span").count() == len(report.versions)  # the interval bars

    board = page.locator("#winrate-leaderboard tbody tr")
    expect(board).to_have_count(3)
    names = [row.locator("td").nth(1).inner_text() for row in board.all()]
    assert names == [s.name for s in report.leaderboard] and sorted(names) == ["v0", "v1", "v2"]
    for row, standing in zip(board.all(), report.leaderboard, strict=True):
        strength = row.locator("td").nth(3).inner_text()
        if standing.anchor:
            assert strength == "0 (the SFT policy)"
        else:
            assert strength == f"{standing.strength:+.2f} [{standing.low:+.2f}, {standing.high:+.2f}]"
    page.screenshot(path=str(tmp_path / "leaderboard.png"), full_page=True)
    assert (tmp_path / "leaderboard.png").stat().st_size > 10_000

    api = Client(studio.local_url, verbose=False).predict(api_name="/leaderboard")
    assert [v["name"] for v in api["versions"]] == ["v1", "v2"] and api["judgements"] == report.judgements
    assert [s["name"] for s in api["leaderboard"]] == names
    assert api["versions"][1]["rate"] == pytest.approx(report.versions[1].rate)

    OracleAnnotator(by_version, seed=2).label(store, 8)  # the rest of v2's pairs: the tab follows the labels
    page.get_by_role("tab", name="Samples").click()
    page.get_by_role("tab", name="Leaderboard").click()
    expect(page.locator("#leaderboard-board")).to_contain_text(f"all {report.judgements + 8} win-rate judgements")
