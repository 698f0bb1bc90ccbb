"""Curves and Samples tabs in a real browser (Playwright + Debian's Chromium) on a store holding a finished loop.

The `loop_store` fixture is the only place that knows how the store was filled: replace its body with a short
headless loop and the assertions, which read what to expect from the store, stay as they are.
"""

import io
import os
from pathlib import Path

import pytest
from PIL import Image
from playwright.sync_api import expect, sync_playwright

from storage import Store
from storage import jobs as job_rows
from storage.metrics import log_metrics
from storage.policies import list_policies
from storage.rounds import list_rounds

from test_curves_tab import fill_synthetic_run

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
CHARTS = {"curves-rounds": 5, "curves-reward": 4, "curves-ppo": 12}  # chart -> panels

pytestmark = pytest.mark.browser


@pytest.fixture
def loop_store(tmp_path):
    """A store after a 3-round loop (synthetic traces written with storage functions)."""
    store = Store(tmp_path / "studio.db")
    fill_synthetic_run(store, rounds=3, reward_steps=16, ppo_iterations=30)
    yield store
    store.close()


@pytest.fixture
def page_url(loop_store):
    from app.ui import build_app, launch_options

    blocks = build_app(loop_store)
    blocks.launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True, **launch_options())
    try:
        yield blocks.local_url
    finally:
        blocks.close()


@pytest.fixture
def browser():
    assert CHROMIUM.exists(), f"{CHROMIUM} is missing: install Debian's chromium (apt-get install -y chromium)"

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def job_id_of(store) -> int:
    """The loop job whose curves the page shows first (the newest job)."""
    return job_rows.list_jobs(store, limit=1)[0].id


def colored_pixels(png: bytes) -> int:
    """Pixels with a clear hue: plotted lines and bars (axes, grid and text are grey)."""
    image = Image.open(io.BytesIO(png)).convert("RGB")
    return sum(1 for r, g, b in image.getdata() if max(r, g, b) - min(r, g, b) > 80)


def test_curves_and_samples_in_the_browser(loop_store, page_url, browser, tmp_path):
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    page.goto(page_url)
    page.get_by_role("tab", name="Curves").click()
    for chart, panels in CHARTS.items():
        page.locator(f"#{chart} .cartesianlayer .subplot").first.wait_for(state="attached", timeout=90_000)
        assert page.locator(f"#{chart} .cartesianlayer .subplot").count() == panels
        assert page.locator(f"#{chart} .scatterlayer .trace, #{chart} .barlayer .trace").count() >= panels
        assert "no data yet" not in page.locator(f"#{chart}").inner_text()
        page.locator(f"#{chart}").scroll_into_view_if_needed()
        assert colored_pixels(page.locator(f"#{chart}").screenshot()) > 500 * panels, f"{chart} shows no data"
    status = page.locator("#curves-status").inner_text()
    assert "completed" in status and "metric points" in status
    assert "No known failure pattern" in page.locator("#curves-warnings").inner_text()
    page.screenshot(path=str(tmp_path / "curves.png"), full_page=True)
    assert (tmp_path / "curves.png").stat().st_size > 10_000

    with page.expect_download() as download:  # a chart as PNG, from its mode bar
        page.locator("#curves-ppo [data-title='Download plot as a PNG']").click()
    assert download.value.suggested_filename == f"job{job_id_of(loop_store)}-ppo.png"
    download.value.save_as(tmp_path / "ppo.png")
    assert (tmp_path / "ppo.png").read_bytes().startswith(b"\x89PNG")
    page.get_by_role("button", name="⬇ Data as CSV").click()  # the data as CSV
    expect(page.get_by_role("cell", name="rounds.csv")).to_be_visible(timeout=30_000)
    expect(page.get_by_role("cell", name=f"job{job_id_of(loop_store)}-metrics.csv")).to_be_visible()

    # a job that is running refreshes by itself
    job_id = job_rows.create_job(loop_store, "ppo", {})
    job_rows.claim_job(loop_store, job_id, os.getpid())
    log_metrics(loop_store, job_id, 1, {"ppo/kl": 0.1, "ppo/score": 0.2})
    page.get_by_role("button", name="↻ Refresh").click()
    page.locator("#curves-job input").click()
    page.get_by_role("option", name=f"Job {job_id} · ppo · running").click()
    expect(page.locator("#curves-status")).to_contain_text("2 metric points", timeout=30_000)
    expect(page.locator("#curves-status")).to_contain_text("live")
    log_metrics(loop_store, job_id, 2, {"ppo/kl": 0.2, "ppo/score": 0.3})
    expect(page.locator("#curves-status")).to_contain_text("4 metric points", timeout=30_000)  # no click: the timer

    page.get_by_role("tab", name="Samples").click()
    table = page.locator("#samples-table table.samples")
    table.wait_for(state="visible", timeout=30_000)
    headers = table.locator("th[data-policy]")
    assert [int(h.get_attribute("data-policy")) for h in headers.all()] == [p.id for p in list_policies(loop_store)]
    assert len(list_policies(loop_store)) == len(list_rounds(loop_store)) + 1
    # model text is shown literally: the tags in prompts and samples are text, not markup
    assert "<i>as written</i>" in table.inner_text() and table.locator("i").count() == 0
    annotators = page.locator("#samples-annotators table.samples tbody tr")
    assert [row.locator("td").first.inner_text() for row in annotators.all()] == ["alice", "bob"]
    page.screenshot(path=str(tmp_path / "samples.png"), full_page=True)
