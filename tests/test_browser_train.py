"""The Train tab in a real browser (Playwright + Debian's Chromium): GRPO chosen in the form and a tiny loop
started, run by its worker to the end, and shown by the Curves tab with GRPO's panels; a refused start; Run SFT and
SFT first refused on a store without demonstrations; a finished loop's result card and its link to the Leaderboard
tab."""

import json

import pytest
from playwright.sync_api import expect

from app.curves.charts import GRPO_PANELS
from storage import jobs as job_rows
from storage.metrics import read_metrics
from storage.policies import list_policies
from tests.helpers import fill_synthetic_run

pytestmark = pytest.mark.browser

# the smallest loop that runs every phase: 2 prompts x 4 samples, 7 labels, 2 GRPO iterations of 2 prompts x G 2
TINY_GRPO = {"prompts_per_round": 2, "queue_reserve": 0, "reward_batch_size": 1, "policy_batch_size": 2,
             "policy_epochs": 1, "response_length": 8}
FORM = {"Rounds": 1, "N: labels in round 1 (then × label_decay)": 7, "M: GRPO iterations": 2, "Reward epochs": 1}


def test_grpo_chosen_and_run_from_the_train_tab(demo_store, serve_studio, browser, tmp_path):
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    page.set_default_timeout(30_000)
    page.goto(serve_studio(demo_store).local_url)
    page.get_by_role("tab", name="Train").click()
    expect(page.get_by_role("button", name="Run PPO now")).to_be_visible()

    page.locator("#train-algorithm").get_by_label("grpo").check()
    expect(page.get_by_role("button", name="Run GRPO now")).to_be_visible()  # the button names the optimiser,
    page.get_by_text("Advanced settings", exact=True).click()  # (the rates and G fold under it)
    expect(page.get_by_label("GRPO LR", exact=True)).to_be_visible()  # and so do the policy settings' labels
    page.locator("#train-group-size input").fill("2")
    for label, value in FORM.items():
        page.get_by_label(label, exact=True).fill(str(value))
    editor = page.locator(".cm-content").first
    editor.click()
    page.keyboard.press("Control+A")
    page.keyboard.insert_text(json.dumps(TINY_GRPO))  # typed keys would auto-close brackets
    page.get_by_role("button", name="Start loop").click()

    status = page.locator("#train-status")
    expect(status).to_contain_text("(grpo loop)")
    expect(page.get_by_role("button", name="Start loop")).to_be_disabled()  # the buttons follow the job
    expect(page.get_by_role("button", name="Stop")).to_be_enabled()
    expect(status).to_contain_text("completed", timeout=600_000)  # the worker runs the whole loop
    expect(page.get_by_role("button", name="Start loop")).to_be_enabled()
    expect(page.get_by_role("button", name="Stop")).to_be_disabled()
    [job] = job_rows.list_jobs(demo_store)
    assert (job.config["algorithm"], job.config["group_size"], job.config["rounds"]) == ("grpo", 2, 1)
    assert job.config["policy_batch_size"] == 2 and job.config["labels_per_round"] == 7
    assert [r["step"] for r in read_metrics(demo_store, job.id, names=["grpo/kl"])] == [1, 2]
    assert read_metrics(demo_store, job.id, prefix="ppo/") == []
    assert [p.note for p in list_policies(demo_store)][1:] == ["GRPO, 2 iterations"]
    page.screenshot(path=str(tmp_path / "train.png"), full_page=True)

    page.get_by_role("tab", name="Curves").click()
    expect(page.locator("#curves-status")).to_contain_text(f"Job {job.id} · grpo loop · completed")
    expect(page.locator("#curves-optimiser-title")).to_contain_text("GRPO: iterations across rounds")
    chart = page.locator("#curves-optimiser")
    chart.locator(".cartesianlayer .subplot").first.wait_for(state="attached", timeout=90_000)
    assert chart.locator(".cartesianlayer .subplot").count() == len(GRPO_PANELS)
    assert "Value loss" not in chart.inner_text() and "GRPO loss" in chart.inner_text()


def test_a_refused_start_names_the_field_in_a_message_that_goes_away(demo_store, serve_studio, browser, capfd,
                                                                     caplog):
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    page.set_default_timeout(30_000)
    page.goto(serve_studio(demo_store).local_url)
    page.get_by_role("tab", name="Train").click()
    expect(page.locator("#train-status")).to_contain_text("No job yet.")
    expect(page.get_by_role("button", name="Stop")).to_be_disabled()  # nothing to stop or resume
    expect(page.get_by_role("button", name="Resume")).to_be_disabled()

    page.get_by_label("Rounds", exact=True).fill("")
    page.get_by_role("button", name="Start loop").click()
    expect(page.get_by_text("Rounds is required")).to_be_visible()
    page.get_by_label("Rounds", exact=True).fill("2")
    page.get_by_text("Advanced settings", exact=True).click()  # the rates fold under it
    page.get_by_label("Reward LR", exact=True).fill("-1")
    page.get_by_role("button", name="Train reward model now").click()
    expect(page.get_by_text("Reward LR must be above 0, got -1")).to_be_visible()
    assert page.get_by_text("Error", exact=True).count() == 0  # no error pills over the status, bar or log
    expect(page.locator("#train-status")).to_have_text("No job yet.")
    expect(page.get_by_text("Rounds is required")).to_be_hidden(timeout=20_000)  # the message goes away
    assert job_rows.list_jobs(demo_store) == []
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err
    assert [r.getMessage() for r in caplog.records if r.name == "rlhf_studio.refused"] == [
        "refused: Rounds is required", "refused: Reward LR must be above 0, got -1"]  # a line each in the terminal


def test_run_sft_and_sft_first_without_demonstrations_are_refused_in_one_line(demo_store, serve_studio, browser):
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    page.set_default_timeout(30_000)
    page.goto(serve_studio(demo_store).local_url)
    page.get_by_role("tab", name="Train").click()
    expect(page.locator("#train-status")).to_contain_text("No job yet.")
    page.get_by_role("button", name="Run SFT on the demonstrations").click()
    expect(page.get_by_text("the store has no demonstrations; write some in the Label tab (W)")).to_be_visible()
    page.get_by_label("SFT first: fine-tune on the demonstrations before round 1").check()
    page.get_by_role("button", name="Start loop").click()
    expect(page.get_by_text("sft_first needs demonstrations, and the store has none")).to_be_visible()
    expect(page.locator("#train-status")).to_have_text("No job yet.")
    assert job_rows.list_jobs(demo_store) == []


def test_a_finished_loops_result_card_links_to_the_leaderboard(store, serve_studio, browser):
    """The page is open before the loop finishes (written as a finished loop leaves it); the card's button opens the
    Leaderboard tab, filled with the loop's versions, and a reload keeps that tab."""
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    page.set_default_timeout(30_000)
    page.goto(serve_studio(store).local_url)
    page.get_by_role("tab", name="Train").click()
    expect(page.locator("#train-status")).to_contain_text("No job yet.", timeout=60_000)  # a busy machine is slow
    link = page.get_by_role("button", name="Open the Leaderboard")
    expect(link).to_be_hidden()  # no result, no link

    run = fill_synthetic_run(store, rounds=2, reward_steps=2, policy_iterations=2)
    page.get_by_role("tab", name="Label").click()
    page.get_by_role("tab", name="Train").click()  # opening the tab shows the newest job
    expect(page.locator("#train-status")).to_contain_text(f"Result: job {run['job_id']} (loop) completed: made v1–v2",
                                                          timeout=60_000)
    link.click()
    expect(page.get_by_role("tab", name="Leaderboard")).to_have_attribute("aria-selected", "true", timeout=60_000)
    expect(page.locator("#leaderboard-versions")).to_contain_text("v2", timeout=60_000)  # filled as if opened by hand
    page.reload()
    expect(page.get_by_role("tab", name="Leaderboard")).to_have_attribute("aria-selected", "true", timeout=60_000)
