"""Curves and Samples tabs in a real browser (Playwright + Debian's Chromium) after a real short headless loop.

`loop_store` copies the demo store, adds a held-out prompt carrying markup, and runs `python app.py loop` (oracle
annotator, two tiny rounds). Every assertion reads what to expect from the store: the metrics, rounds, policies
and labels that loop wrote, and the warnings the diagnostics rules give on them. A page opened before any job ran
shows a job in those tabs once they are opened again (the job written by tests.helpers.fill_synthetic_run).
"""

import io
import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from PIL import Image
from playwright.sync_api import expect

from app.curves.charts import PPO_PANELS, REWARD_PANELS, ROUND_PANELS
from app.curves.curves_tab import with_win_rates
from labeling.queue.synthetic import OracleAnnotator
from labeling.transfer.conversations import conversation_text
from labeling.versions.winrate import winrate_report
from storage import jobs as job_rows
from storage.generations import EVAL_SOURCE, NewGeneration, add_generations, eval_samples
from storage.job_warnings import list_warnings
from storage.metrics import log_metrics, read_metrics
from storage.policies import add_policy, list_policies
from storage.prompts import NewPrompt, add_prompts, list_prompts
from storage.rounds import list_rounds
from storage.votes import current_votes
from tests.helpers import fill_synthetic_run
from trainers.loop.diagnostics import diagnose

ROOT = Path(__file__).resolve().parent.parent
CHARTS = {"curves-rounds": ROUND_PANELS, "curves-reward": REWARD_PANELS, "curves-optimiser": PPO_PANELS}
MARKUP_PROMPT = "Say <i>as written</i> & <script>window.pwned=1</script>"
MIN_PANEL_PIXELS = 20  # a lone point is a dot of about 40 colored pixels; an empty panel has none
ROUNDS, LABELS_PER_ROUND = 2, 7
# About the smallest loop that fills every chart panel: each round's reward training logs its loss and accuracy (at
# its last step at least) and its validation metrics (round 2 holds out 3 of its 14 labels, not all of them ties).
TINY_LOOP = {"prompts_per_round": 2, "samples_per_prompt": 4, "queue_reserve": 0, "label_decay": 1.0,
             "reward_epochs": 1, "reward_batch_size": 1, "policy_iterations": 3, "policy_batch_size": 4,
             "policy_epochs": 1, "response_length": 8, "eval_prompts": 32}  # every held-out prompt, the markup one

pytestmark = pytest.mark.browser


@pytest.fixture
def loop_store(demo_store):
    """The demo store (plus a held-out prompt with markup) after a real 2-round headless oracle loop."""
    add_prompts(demo_store, [MARKUP_PROMPT], source="test", heldout=True)
    result = subprocess.run([sys.executable, "app.py", "loop", "--db", str(demo_store.path), "--rounds", str(ROUNDS),
                             "--labels-per-round", str(LABELS_PER_ROUND), "--annotator", "oracle",
                             "--config", json.dumps(TINY_LOOP)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    return demo_store


@pytest.fixture
def page_url(loop_store, serve_studio):
    return serve_studio(loop_store).local_url


def colored_pixels(png: bytes) -> int:
    """Pixels with a clear hue: plotted lines, dots and bars (axes, grid, text and reference lines are grey)."""
    image = Image.open(io.BytesIO(png)).convert("RGB")
    return sum(1 for r, g, b in image.getdata() if max(r, g, b) - min(r, g, b) > 80)


def panel_pixels(page, chart: str) -> list[int]:
    """Colored pixels inside each plot area of a chart, in panel order."""
    plots = page.locator(f"#{chart} .draglayer .nsewdrag")
    return [colored_pixels(plots.nth(i).screenshot()) for i in range(plots.count())]


def expected_warnings(store, job_id: int) -> list[str]:
    """Titles of the warnings the loop recorded, then of the whole-job rules that fire on the job's PPO series and its
    rounds' summaries (a rule already recorded is not repeated)."""
    series = defaultdict(list)
    for row in read_metrics(store, job_id, prefix="ppo/"):  # by name, then step
        series[row["name"]].append(row["value"])
    rounds = list_rounds(store, job_id)
    for name, key in {"reward/val_accuracy": "reward_val_accuracy", "round/score": "score",
                      "round/oracle_score": "oracle_score"}.items():
        series[name] = [r["summary"][key] for r in rounds if r["summary"].get(key) is not None]
    fired = list_warnings(store, job_id)
    if job_rows.get_job(store, job_id).kind == "loop":  # a loop's warnings are the ones it recorded
        return [w.title for w in fired]
    return [w.title for w in fired] + [f.title for f in diagnose(series) if f.rule not in {w.rule for w in fired}]


def test_curves_and_samples_in_the_browser(loop_store, page_url, browser, tmp_path):
    [loop_job] = job_rows.list_jobs(loop_store)
    rounds = with_win_rates(list_rounds(loop_store, loop_job.id), winrate_report(loop_store))  # as the tab shows them
    policies = list_policies(loop_store)
    logged = {row["name"] for row in read_metrics(loop_store, loop_job.id)}
    assert set(REWARD_PANELS) | set(PPO_PANELS) <= logged, "the loop left a chart panel without data"
    assert all(any(r["summary"].get(key) is not None for r in rounds) for key in ROUND_PANELS)

    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    page.goto(page_url)
    page.get_by_role("tab", name="Curves").click()
    for chart, panels in CHARTS.items():
        page.locator(f"#{chart} .cartesianlayer .subplot").first.wait_for(state="attached", timeout=90_000)
        assert page.locator(f"#{chart} .cartesianlayer .subplot").count() == len(panels)
        assert page.locator(f"#{chart} .scatterlayer .trace, #{chart} .barlayer .trace").count() >= len(panels)
        assert "no data yet" not in page.locator(f"#{chart}").inner_text()
        pixels = panel_pixels(page, chart)
        assert len(pixels) == len(panels) and min(pixels) > MIN_PANEL_PIXELS, f"{chart}: a panel shows no data {pixels}"
    points = len(read_metrics(loop_store, loop_job.id, prefix="reward/")) + len(read_metrics(loop_store, loop_job.id,
                                                                                             prefix="ppo/"))
    status = page.locator("#curves-status").inner_text()
    assert f"Job {loop_job.id}" in status and "completed" in status and f"{points:,} metric points" in status, status
    warnings = page.locator("#curves-warnings")
    expected = expected_warnings(loop_store, loop_job.id)
    assert warnings.locator(".curves-warning").count() == len(expected)
    assert all(title in warnings.inner_text() for title in expected), (expected, warnings.inner_text())
    assert ("No known failure pattern" in warnings.inner_text()) == (not expected)
    # the loop's own warning: 7 labels a round hold out a pair or two (round 1) to validate the reward model on
    [first] = [w for w in list_warnings(loop_store, loop_job.id) if w.rule == "validation_too_small" and w.round == 1]
    assert f"Round 1, step {first.step}: {first.detail}" in warnings.inner_text() and "held-out pair(s)" in first.detail
    page.screenshot(path=str(tmp_path / "curves.png"), full_page=True)
    assert (tmp_path / "curves.png").stat().st_size > 10_000

    with page.expect_download() as download:  # a chart as PNG, from its mode bar
        page.locator("#curves-optimiser [data-title='Download plot as a PNG']").click()
    assert download.value.suggested_filename == f"job{loop_job.id}-ppo.png"
    download.value.save_as(tmp_path / "ppo.png")
    assert (tmp_path / "ppo.png").read_bytes().startswith(b"\x89PNG")
    page.get_by_role("button", name="⬇ Data as CSV").click()  # the data as CSV
    expect(page.get_by_role("cell", name="rounds.csv")).to_be_visible(timeout=30_000)
    expect(page.get_by_role("cell", name=f"job{loop_job.id}-metrics.csv")).to_be_visible()

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
    assert len(policies) == len(rounds) + 1 == ROUNDS + 1
    headers = table.locator("th[data-policy]")
    assert [int(h.get_attribute("data-policy")) for h in headers.all()] == [p.id for p in policies]
    # the markup prompt (chosen in the list: the full view shows the first 20 prompts), one column per policy
    # version, its tags shown as text and never run
    page.get_by_label("Held-out prompt").click()
    page.get_by_role("option", name=MARKUP_PROMPT).click()
    expect(table.locator("tbody tr")).to_have_count(1)
    expect(table.locator("td.prompt .text-rendered")).to_have_text(MARKUP_PROMPT)
    samples = [s for s in eval_samples(loop_store) if s["prompt"] == MARKUP_PROMPT]
    per_policy = [sum(s["policy_id"] == p.id for s in samples) for p in policies]
    cells = table.locator("tbody td:not(.prompt)")
    assert [cells.nth(i).locator(".sample").count() for i in range(cells.count())] == per_policy and min(per_policy) > 0
    assert page.locator("#samples-table i, #samples-table script").count() == 0
    assert page.evaluate("typeof window.pwned") == "undefined"
    annotators = sorted({vote.annotator for vote in current_votes(loop_store)})
    assert annotators == [OracleAnnotator.name]  # the loop's only annotator
    rows = page.locator("#samples-annotators table.samples tbody tr")
    assert [row.locator("td").first.inner_text() for row in rows.all()] == annotators
    page.screenshot(path=str(tmp_path / "samples.png"), full_page=True)


def test_tabs_opened_after_a_job_ran_show_it_without_a_reload(store, serve_studio, browser):
    """The page is open before any job exists; a job then runs (here: written as a finished loop leaves it).
    Opening the Curves and Samples tabs shows it, with no reload of the page."""
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    page.goto(serve_studio(store).local_url)
    page.get_by_role("tab", name="Curves").click()
    expect(page.locator("#curves-status")).to_contain_text("No training job yet", timeout=30_000)
    expect(page.locator("#curves-charts")).to_be_hidden()  # one line, not a page of empty panels
    page.reload()  # the browser remembers the tab it had open
    expect(page.locator("#curves-status")).to_contain_text("No training job yet", timeout=30_000)
    expect(page.get_by_role("tab", name="Curves")).to_have_attribute("aria-selected", "true")
    page.get_by_role("tab", name="Samples").click()
    expect(page.locator("#samples-table")).to_contain_text("No policy version yet", timeout=30_000)

    run = fill_synthetic_run(store, rounds=2, reward_steps=4, policy_iterations=3)
    page.get_by_role("tab", name="Curves").click()
    expect(page.locator("#curves-status")).to_contain_text(f"Job {run['job_id']} · loop · completed", timeout=30_000)
    expect(page.locator("#curves-charts")).to_be_visible()
    expect(page.locator("#curves-rounds .cartesianlayer .subplot").first).to_be_attached(timeout=30_000)
    page.get_by_role("tab", name="Samples").click()
    expect(page.locator("#samples-table th[data-policy]")).to_have_count(len(run["policy_ids"]), timeout=30_000)


def test_samples_show_conversations_as_turns_and_markdown_that_runs_nothing(store, serve_studio, browser):
    turns = [{"role": "system", "content": "Be *brief*."},
             {"role": "user", "content": "Sort <img src=x onerror=alert(1)>"}]
    add_prompts(store, [NewPrompt(conversation_text(turns), turns)], heldout=True)
    [prompt] = list_prompts(store, heldout=True)
    policy = add_policy(store, "/synthetic/sft", round=0)
    answer = ("```py\nsorted(x)  # <script>window.pwned=1</script>\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n"
              "[x](javascript:window.pwned=1) <iframe src=x></iframe> ![i](http://127.0.0.1:9/a.png)")
    add_generations(store, [NewGeneration(prompt.id, answer, policy_id=policy, source=EVAL_SOURCE)])
    dialogs = []
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(serve_studio(store).local_url)
    page.get_by_role("tab", name="Samples").click()
    table = page.locator("#samples-table table.samples")
    expect(table.locator("td.prompt .turn")).to_have_count(2, timeout=30_000)
    assert [t.get_attribute("data-role") for t in table.locator("td.prompt .turn").all()] == ["system", "user"]
    assert "Sort <img src=x onerror=alert(1)>" in table.locator("td.prompt").inner_text()
    sample = table.locator(".sample-text")
    assert sample.locator("pre > code").text_content() == "sorted(x)  # <script>window.pwned=1</script>\n"
    assert sample.locator("table td").all_text_contents() == ["1", "2"]
    assert "[x](javascript:window.pwned=1) <iframe src=x></iframe>" in sample.inner_text()
    assert page.locator(", ".join(f"#samples-table {tag}" for tag in ("script", "img", "iframe", "a"))).count() == 0
    page.locator("#samples-plain input").check()
    expect(sample.locator(".text-plain")).to_be_visible()
    assert sample.locator(".text-plain").text_content() == answer
    assert table.locator("td.prompt .text-plain").inner_text() == conversation_text(turns)
    page.wait_for_timeout(300)
    assert page.evaluate("typeof window.pwned") == "undefined" and dialogs == []
