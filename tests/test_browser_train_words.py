"""The Train tab's words in a real browser (Playwright + Debian's Chromium): every input of the tab carries its plain
sentence on the page, the advanced fields fold under one heading whose links open the docs."""

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.browser

# Every input the user can change in the Train tab's panel, with the label of its block and the sentence shown in it
# (Gradio's `info=`); the JSON editor has no `info`, so its sentence is the line right above its block.
INPUTS_JS = """
(panel) => {
  const inputs = [...panel.querySelectorAll("input, textarea, select, .cm-content[contenteditable=true]")]
    .filter((el) => el.type !== "hidden" && !el.disabled && !el.readOnly);
  return inputs.map((el) => {
    const block = el.closest(".block");
    const label = block && block.querySelector("[data-testid=block-info], [data-testid=block-label], .label-text");
    let info = block && block.querySelector(".info-text");
    if (!info && el.matches(".cm-content")) {
      info = block.previousElementSibling;
    }
    return {label: label ? label.innerText.trim() : el.outerHTML.slice(0, 80),
            info: info ? info.innerText.trim() : ""};
  });
}
"""


def test_every_train_tab_input_has_its_sentence_and_the_advanced_ones_fold_under_one_heading(demo_store, serve_studio,
                                                                                             browser):
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    page.set_default_timeout(30_000)
    page.goto(serve_studio(demo_store).local_url)
    page.get_by_role("tab", name="Train").click()
    panel = page.get_by_role("tabpanel").filter(has=page.get_by_role("button", name="Start loop"))
    expect(panel.get_by_text("Labels from", exact=True)).to_be_visible()
    expect(panel.get_by_text("Pair selector", exact=True)).to_be_hidden()  # folded under the advanced heading
    expect(panel.get_by_label("Reward ensemble size", exact=True)).to_be_hidden()

    page.get_by_text("Advanced settings", exact=True).click()
    expect(panel.get_by_label("Reward ensemble size", exact=True)).to_be_visible()
    fields = panel.element_handle().evaluate(INPUTS_JS)
    labels = {field["label"] for field in fields}
    for named in ("Labels from", "Pair selector", "Reward ensemble size", "β: KL coefficient", "DPO β (its KL anchor)",
                  "Check-pair share of labels", "Reward early-stop patience (0: off)", "Warm-start the reward model",
                  "Label decay (each later round × this)", "B: labels of all rounds (blank: from N)",
                  "The policy maximises", "Advanced settings as JSON"):
        assert named in labels, f"{named!r} is not among the tab's inputs: {sorted(labels)}"
    unexplained = [field["label"] for field in fields if len(field["info"].split()) < 5]
    assert unexplained == [], f"inputs without their sentence: {unexplained}"
    selector = next(field["info"] for field in fields if field["label"] == "Pair selector")
    for name in ("disagreement", "thompson", "info_gain", "diverse", "d_optimal"):
        assert name in selector  # each selector's name is explained

    page.locator("#train-algorithm").get_by_label("grpo").check()  # the labels follow the optimiser, the sentences stay
    expect(panel.get_by_label("GRPO LR", exact=True)).to_be_visible()
    fields = panel.element_handle().evaluate(INPUTS_JS)
    assert {"GRPO LR", "M: GRPO iterations"} <= {field["label"] for field in fields}
    assert [field["label"] for field in fields if len(field["info"].split()) < 5] == []

    link = page.locator("#train-advanced-docs a", has_text="the loop's options")
    response = page.request.get(link.evaluate("a => a.href").split("#")[0], fail_on_status_code=False)
    assert response.status == 200 and "## `loop`" in response.text()
