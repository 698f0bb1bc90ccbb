"""The Train tab's reward form in a real browser (Playwright + Debian's Chromium): "The policy maximises" functions,
math_answer weighted 1, **Use these rewards**: the label fields and the label schedule go, the policy fields take the
RLVR settings, and **Start loop** starts a loop on the functions alone (the job row only: no worker here)."""

import re

import pytest
from playwright.sync_api import expect

from app.train import train_tab
from storage import jobs as job_rows

pytestmark = pytest.mark.browser

N_FIELD = "N: labels in round 1 (then × label_decay)"


def test_the_reward_form_starts_a_functions_loop_without_the_label_fields(demo_store, serve_studio, browser,
                                                                          monkeypatch):
    monkeypatch.setattr(train_tab, "start_job",
                        lambda store, kind, config, accelerate_config: job_rows.create_job(store, kind, config))
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    page.set_default_timeout(30_000)
    page.goto(serve_studio(demo_store).local_url)
    page.get_by_role("tab", name="Train").click()
    expect(page.get_by_label(N_FIELD, exact=True)).to_be_visible()
    expect(page.locator("#train-schedule")).to_contain_text("labels over 3 rounds")

    page.get_by_text("Advanced settings", exact=True).click()
    page.get_by_label("functions", exact=True).check()
    page.get_by_label(re.compile(r"^math_answer: ")).fill("1")
    page.get_by_role("button", name="Use these rewards").click()
    expect(page.get_by_label(N_FIELD, exact=True)).to_be_hidden()  # no label field asked for
    for hidden in ("Reward LR", "Label decay (each later round × this)", "K: samples per prompt"):
        expect(page.get_by_label(hidden, exact=True)).to_be_hidden()
    expect(page.locator("#train-schedule")).to_be_hidden()
    expect(page.get_by_label("M: GRPO iterations", exact=True)).to_have_value("40")  # the RLVR settings

    page.get_by_role("button", name="Start loop").click()
    expect(page.locator("#train-status")).to_contain_text("(grpo loop)")
    [job] = job_rows.list_jobs(demo_store)
    assert (job.config["reward"], job.config["reward_functions"]) == ("functions", [{"name": "math_answer",
                                                                                      "weight": 1.0}])
    assert (job.config["policy_iterations"], job.config["policy_batch_size"], job.config["eval_samples"]) == (40, 4, 3)
