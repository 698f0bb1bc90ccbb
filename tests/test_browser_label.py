"""The Label tab in a real browser (Playwright driving Debian's Chromium): clicks, keys, undo, and model output
that tries to run script shows up as text and runs nothing, whether rendered as markdown or shown plain; guidelines
holding HTML cover, load and run nothing. Fails, never skips, when Chromium is missing."""

import os

import pytest
from playwright.sync_api import expect

from app.label import label_screen, label_tab
from bench.studio_driver import hashed_auth_file
from labeling.transfer.conversations import conversation_text
from storage import jobs as job_rows
from storage.labels import list_labels
from storage.pairs import get_pair
from storage.settings import set_setting
from storage.types import Outcome

pytestmark = pytest.mark.browser

XSS = ["<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "[link](javascript:alert(1))"]
PAIRS = [(f"Prompt {i}: review the film.", XSS[i] if i < 3 else f"A fine film, number {i}.",
          f"A dull film, number {i}.") for i in range(6)]


@pytest.fixture
def serve(store, serve_studio):
    """`serve(users=None)`: the studio on `store` (as `python app.py serve` runs it); returns its URL."""
    return lambda users=None: serve_studio(store, users).local_url


expect.set_options(timeout=20_000)  # a loaded CI machine answers slowly; nothing here waits for a timeout


def open_page(browser, url, dialogs):
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.set_default_timeout(20_000)
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(url)
    return page


PLAIN_TEXT = "id => document.querySelector(`#${id} .text-plain`)?.textContent ?? ''"  # a pane's text as it is


def shown(page) -> tuple[str, str, str]:
    """The prompt and the two responses on screen, as plain text ('' when none is shown)."""
    panes = ("pair-prompt", "response-left", "response-right")
    return tuple(page.evaluate(f"({PLAIN_TEXT})('{pane}')") for pane in panes)


def act(page, action):
    """Do a click or key press and wait until a different pair is on screen; returns (before, after)."""
    before = shown(page)
    action()
    page.wait_for_function(f"prompt => ({PLAIN_TEXT})('pair-prompt') !== prompt", arg=before[0])
    return before, shown(page)


def expected_outcome(store, pair_prompt, screen, choice):
    """The outcome a choice on this screen means, relative to the stored pair's first/second."""
    index = next(i for i, (prompt, _, _) in enumerate(PAIRS) if prompt == pair_prompt)
    first_text = PAIRS[index][1]
    if choice in ("left", "right"):
        picked = screen[1] if choice == "left" else screen[2]
        return index, Outcome.FIRST if picked == first_text else Outcome.SECOND
    return index, Outcome(choice)


def test_label_with_clicks_and_keys_including_tie_and_undo(store, queue_pairs, serve, browser, tmp_path):
    pair_ids = queue_pairs(PAIRS)
    dialogs = []
    page = open_page(browser, serve(), dialogs)
    page.get_by_label("Your name").fill("alice")
    page.get_by_label("Your name").press("Enter")
    expect(page.locator("#pair-prompt .text-rendered")).to_have_count(1)
    page.evaluate("document.activeElement.blur()")  # keys typed into the name box are not shortcuts

    votes = []  # (screen, choice) of each vote that should stay
    screen, _ = act(page, lambda: page.get_by_role("button", name="Left is better").click())
    votes.append((screen, "left"))
    screen, _ = act(page, lambda: page.keyboard.press("2"))
    votes.append((screen, "right"))
    tie_screen, _ = act(page, lambda: page.keyboard.press("3"))
    _, back = act(page, lambda: page.keyboard.press("u"))
    assert back == tie_screen  # undo shows the tied pair again, same sides
    screen, _ = act(page, lambda: page.keyboard.press("4"))
    votes.append((screen, "both_bad"))
    screen, _ = act(page, lambda: page.get_by_role("button", name="Skip").click())
    votes.append((screen, "skip"))
    screen, _ = act(page, lambda: page.keyboard.press("ArrowLeft"))
    votes.append((screen, "left"))
    expect(page.locator("#label-progress")).to_contain_text("4 labeled today")  # the skip is no label
    page.screenshot(path=str(tmp_path / "label.png"), full_page=True)

    labels = list_labels(store, include_undone=True)
    current = {label.pair_id: label for label in list_labels(store)}
    assert len(labels) == 6 and len(current) == 5
    (undone,) = [label for label in labels if label.id not in {c.id for c in current.values()}]
    assert (undone.outcome, undone.pair_id) == (Outcome.TIE, current[undone.pair_id].pair_id)
    for screen, choice in votes:
        index, outcome = expected_outcome(store, screen[0], screen, choice)
        label = current[pair_ids[index]]
        assert (label.annotator, label.outcome) == ("alice", outcome)
        pair = get_pair(store, label.pair_id)
        assert label.left_id == (pair.first_id if screen[1] == PAIRS[index][1] else pair.second_id)
        assert label.decision_ms is not None and label.decision_ms >= 0
    assert dialogs == []


def test_a_name_and_enter_then_the_first_key_labels_and_a_reload_remembers_the_name(store, queue_pairs, serve,
                                                                                   browser):
    job_id = job_rows.create_job(store, "loop", {})  # a loop of this process, which waits for people's labels below
    job_rows.claim_job(store, job_id, os.getpid())
    queue_pairs(PAIRS[3:], round=2, job_id=job_id)  # the pairs of its round 2 (no policy before it: the store's 2)
    dialogs = []
    page = open_page(browser, serve(), dialogs)
    expect(page.locator("#vote-left")).to_be_visible()
    expect(page.locator("#pair-prompt")).to_have_text("Type your name above to see the first pair.")
    page.keyboard.press("1")  # no name yet: a hint, no error, nothing stored
    expect(page.locator("#label-status")).to_contain_text("Type your name above and press Enter")
    page.get_by_role("button", name="Left is better").click()
    page.wait_for_timeout(500)
    assert page.get_by_text("Error").count() == 0 and list_labels(store) == []

    job_rows.heartbeat(store, job_id, phase="round 2/3: waiting for labels (0/10)")  # the loop polls no more
    page.get_by_label("Your name").fill("newbie")
    page.get_by_label("Your name").press("Enter")
    expect(page.locator("#labeling-as")).to_have_text("Labeling as newbie")
    expect(page.locator("#label-progress")).to_contain_text(f"round 2 of 3 needs 10 more labels (loop job {job_id})")
    expect(page.get_by_label("Your name")).to_be_hidden()
    expect(page.locator("#pair-prompt .text-rendered")).to_have_count(1)
    act(page, lambda: page.keyboard.press("1"))  # no click, no blur: the focus left the name box
    assert [label.annotator for label in list_labels(store)] == ["newbie"]
    expect(page.locator("#label-progress")).to_contain_text("round 2 of 3 needs 9 more labels")  # counted at once

    page.reload()  # the browser remembers the name and shows the reserved pair at once
    expect(page.locator("#labeling-as")).to_have_text("Labeling as newbie")
    on_screen = shown(page)
    assert on_screen[0] != ""
    page.get_by_role("button", name="change").click()  # another name: the old one's pair is given back
    expect(page.get_by_label("Your name")).to_be_focused()
    page.keyboard.press("Control+A")
    page.keyboard.type("newbie2")
    page.keyboard.press("Enter")
    expect(page.locator("#labeling-as")).to_have_text("Labeling as newbie2")
    act(page, lambda: page.keyboard.press("2"))
    assert [label.annotator for label in list_labels(store)] == ["newbie", "newbie2"]
    assert page.get_by_text("not reserved").count() == 0 and dialogs == []


def test_model_output_renders_as_literal_text_and_runs_nothing(store, queue_pairs, serve, browser, monkeypatch):
    monkeypatch.setattr(label_tab, "POLL_S", 0.5)
    queue_pairs(PAIRS[:3])
    dialogs = []
    page = open_page(browser, serve(), dialogs)
    page.get_by_label("Your name").fill("<img src=x onerror=alert(2)>")  # a hostile name is text too
    page.get_by_label("Your name").press("Enter")
    expect(page.locator("#labeling-as")).to_contain_text("Labeling as <img src=x onerror=alert(2)>")
    page.get_by_role("button", name="Undo last").click()  # an error message that names the hostile name
    expect(page.get_by_text("has no label to undo")).to_be_visible()
    seen, visible = set(), ""
    for _ in range(3):
        visible += page.locator("#responses").inner_text()  # what the reader sees: the markdown rendering
        screen, _ = act(page, lambda: page.get_by_role("button", name="Tie").click())
        seen.update(screen[1:])
    assert set(XSS) <= seen  # each payload reached the screen, verbatim
    assert all(payload in visible for payload in XSS)  # and reads as itself in the rendering
    assert page.locator("img[src='x']").count() == 0
    assert page.locator("a[href^='javascript']").count() == 0
    page.wait_for_timeout(300)
    assert dialogs == []
    assert len(list_labels(store)) == 3
    expect(page.locator("#pair-prompt")).to_have_text(label_screen.EMPTY)
    queue_pairs([("A late prompt.", "late a", "late b")])  # the empty queue is polled: new pairs show up
    expect(page.locator("#pair-prompt .text-rendered")).to_have_text("A late prompt.", timeout=15_000)

def test_signed_in_annotators_label_as_themselves(store, queue_pairs, serve, browser, tmp_path):
    queue_pairs(PAIRS[3:])
    users = hashed_auth_file(tmp_path / "users.txt", {"alice": "secret", "owner": "pw"}, admins={"owner"})
    page = open_page(browser, serve(users), [])
    page.get_by_label("username").fill("alice")
    page.get_by_label("password").fill("secret")
    page.get_by_role("button", name="Login").click()
    expect(page.locator("#pair-prompt .text-rendered")).to_have_count(1, timeout=15_000)  # no name to type
    expect(page.get_by_label("Your name")).to_have_count(0)
    act(page, lambda: page.keyboard.press("1"))
    assert [label.annotator for label in list_labels(store)] == ["alice"]


# ---- conversations and markdown ------------------------------------------------------------------------------------

IMAGE_URL = "http://127.0.0.1:9/never-fetched.png"
CONVERSATION = [
    {"role": "system", "content": "You are *terse*. <img src=x onerror=alert(11)>"},
    {"role": "user", "content": "Show me code. [x](javascript:alert(12))"},
    {"role": "assistant", "content": "Which language?"},
    {"role": "user", "content": "Python, and a table. <script>window.pwned=1</script>"},
]
LONG_ANSWER = "\n".join([
    "## Answer", "",
    "Here it is <script>window.pwned=1;alert(1)</script> and <img src=x onerror=\"window.pwned=1;alert(2)\">.", "",
    "<iframe src=\"javascript:window.pwned=1\"></iframe>", "",
    "Gradio's template syntax is text too: ${window.pwned=1} {{window.pwned}}", "",
    ("[click me](javascript:window.pwned=1) · [data](data:text/html;base64,PHNjcmlwdD5hbGVydCgzKTwvc2NyaXB0Pg==) · "
     f"[ok](https://example.com/) · ![diagram]({IMAGE_URL})"), "",
    "```html", "<script>alert(4)</script>", "<img src=x onerror=alert(5)>", "```", "",
    "| name | value |", "|---|---:|", "| `<b>` | 1 |", "| **two** | 2 |", "",
    "- outer", "  - inner `<iframe>`", "    1. deep", "",
    *[f"Line {i} of a long answer that must scroll inside its pane." for i in range(80)],
])
SHORT_ANSWER = "Short: `<img src=x onerror=alert(6)>` and\n\n> a quote with <svg onload=alert(7)>"
UNSAFE_IN_PANES = """() => {
  const panes = [...document.querySelectorAll('#pair-prompt *, #responses *')];
  const active = ['SCRIPT', 'IMG', 'IFRAME', 'SVG', 'OBJECT', 'EMBED', 'STYLE'];
  return {
    elements: panes.filter(el => active.includes(el.tagName.toUpperCase())).length,
    handlers: panes.filter(el => [...el.attributes].some(a => a.name.toLowerCase().startsWith('on'))).length,
    badLinks: panes.filter(el => el.tagName === 'A' && !/^(https?|mailto):/i.test(el.getAttribute('href') || ''))
      .length,
    links: panes.filter(el => el.tagName === 'A').map(el => el.getAttribute('href')),
  };
}"""


def pane(page, side_text: str) -> str:
    """The id of the response pane showing this text (the sides are a coin flip)."""
    return "response-left" if shown(page)[1] == side_text else "response-right"


def test_conversations_and_markdown_render_as_turns_and_run_nothing(store, queue_pairs, serve, browser, tmp_path):
    queue_pairs([(CONVERSATION, LONG_ANSWER, SHORT_ANSWER)])
    dialogs, requests = [], []
    page = open_page(browser, serve(), dialogs)
    page.on("request", lambda request: requests.append(request.url))
    page.get_by_label("Your name").fill("alice")
    page.get_by_label("Your name").press("Enter")
    expect(page.locator("#pair-prompt .turn")).to_have_count(4)

    turns = page.locator("#pair-prompt .turn")
    assert [turns.nth(i).get_attribute("data-role") for i in range(4)] == [m["role"] for m in CONVERSATION]
    assert [turns.nth(i).locator(".turn-role").text_content() for i in range(4)] == ["System", "User", "Assistant",
                                                                                      "User"]
    assert "<img src=x onerror=alert(11)>" in turns.nth(0).inner_text()  # raw HTML reads as text
    long, short = pane(page, LONG_ANSWER), pane(page, SHORT_ANSWER)
    assert {long, short} == {"response-left", "response-right"}
    code = page.locator(f"#{long} pre > code")
    expect(code).to_have_count(1)
    assert code.text_content() == "<script>alert(4)</script>\n<img src=x onerror=alert(5)>\n"
    assert page.locator(f"#{long} table th").all_text_contents() == ["name", "value"]
    assert page.locator(f"#{long} table td code").text_content() == "<b>"
    assert page.locator(f"#{long} ul ul ol li").text_content() == "deep"
    assert page.locator(f"#{short} blockquote").inner_text() == "a quote with <svg onload=alert(7)>"
    visible = page.locator(f"#{long}").inner_text()
    for text in ("Here it is <script>window.pwned=1;alert(1)</script>", '<iframe src="javascript:window.pwned=1">',
                 "${window.pwned=1} {{window.pwned}}",
                 "[click me](javascript:window.pwned=1)", f"[image: diagram <{IMAGE_URL}>]"):
        assert text in visible
    unsafe = page.evaluate(UNSAFE_IN_PANES)
    assert (unsafe["elements"], unsafe["handlers"], unsafe["badLinks"]) == (0, 0, 0)
    assert unsafe["links"] == ["https://example.com/"]

    heights = [page.locator(f"#{side}").bounding_box() for side in ("response-left", "response-right")]
    assert abs(heights[0]["height"] - heights[1]["height"]) < 1 and heights[0]["y"] == heights[1]["y"]
    assert heights[0]["x"] + heights[0]["width"] <= heights[1]["x"]  # side by side
    assert heights[0]["height"] <= 0.6 * 1000 + 1  # capped at 60% of the viewport's height
    body = page.locator(f"#{long} .pane-body")
    assert body.evaluate("el => el.scrollHeight > el.clientHeight + 100")  # the long answer scrolls in its pane
    page.screenshot(path=str(tmp_path / "conversation.png"), full_page=True)

    page.locator("#label-plain input").check()  # the literal texts, nothing rendered
    for side, text in ((long, LONG_ANSWER), (short, SHORT_ANSWER)):
        expect(page.locator(f"#{side} .text-plain")).to_be_visible()
        expect(page.locator(f"#{side} .text-rendered")).to_be_hidden()
        assert page.locator(f"#{side} .text-plain").text_content() == text
    assert page.locator("#pair-prompt .text-plain").inner_text() == conversation_text(CONVERSATION)
    assert abs(page.locator("#response-left").bounding_box()["height"]
               - page.locator("#response-right").bounding_box()["height"]) < 1
    page.locator("#label-plain input").uncheck()
    expect(page.locator(f"#{long} .text-rendered")).to_be_visible()

    page.set_viewport_size({"width": 600, "height": 1000})  # narrow: the panes stack
    left, right = (page.locator(f"#{side}").bounding_box() for side in ("response-left", "response-right"))
    assert left["y"] + left["height"] <= right["y"]
    page.wait_for_timeout(300)
    assert page.evaluate("typeof window.pwned") == "undefined" and dialogs == []
    assert not [url for url in requests if "never-fetched" in url or url.endswith("/x")]
    page.locator("#label-plain input").focus()  # keys still vote while the toggle has the focus
    page.keyboard.press("1")
    expect(page.locator("#label-progress")).to_contain_text("1 labeled today")
    assert [label.annotator for label in list_labels(store)] == ["alice"]


TRACKER = "http://127.0.0.1:9/track.png"
HOSTILE_GUIDELINES = (f'<div style="position:fixed;inset:0;z-index:9999;background:white">Read me</div>\n\n'
                      f"![a]({TRACKER}) <form><button>Send</button></form> <svg></svg> <math></math>"
                      "<style>#vote-left{display:none}</style>")


def test_guidelines_cover_nothing_load_nothing_and_read_as_text(store, queue_pairs, serve, browser):
    queue_pairs(PAIRS[3:5])
    set_setting(store, "guidelines", HOSTILE_GUIDELINES)
    dialogs, requests = [], []
    page = open_page(browser, serve(), dialogs)
    page.on("request", lambda request: requests.append(request.url))
    page.get_by_label("Your name").fill("alice")
    page.get_by_label("Your name").press("Enter")
    expect(page.locator("#pair-prompt .text-rendered")).to_have_count(1)
    guidelines = page.locator("#guidelines")
    expect(guidelines).to_contain_text(f"[image: a <{TRACKER}>]")
    assert '<div style="position:fixed' in guidelines.inner_text()  # the owner's HTML reads as text
    assert guidelines.locator("div[style*=fixed], img, form, svg, math, style").count() == 0
    act(page, lambda: page.get_by_role("button", name="Left is better").click())  # nothing covers the buttons
    assert len(list_labels(store)) == 1
    assert TRACKER not in requests and dialogs == []
