"""Label tab: the prompt, two responses side by side, guidelines, progress, vote buttons with keyboard shortcuts.

Public API (gradio_client): `/next_pair(annotator)`, `/submit_label(annotator, pair_id, choice, vote_id)` (returns
the label id and the next pair, so a vote costs one round trip) and `/undo_label(annotator)`. Responses are shown
in read-only text boxes, so model output is never run as HTML or markdown.
"""

from __future__ import annotations

import html
import uuid

import gradio as gr

from labeling.annotation import (Choice, ShownPair, next_pair, progress, queue_settings, submit_and_next,
                                 undo_label, update_queue_settings)
from storage.errors import Conflict, NotFound

from .context import Studio, user_errors, user_message

TITLE = "Label"
QUEUE = "label-queue"  # one concurrency group for every queue action, so Gradio hands them out fairly
QUEUE_WORKERS = 4
POLL_S = 10.0
EMPTY = "The queue is empty: new pairs arrive when the next round samples from the policy."
VOTES = [  # (choice, button label with its key, element id)
    (Choice.LEFT, "◀ Left is better (1)", "vote-left"),
    (Choice.RIGHT, "Right is better ▶ (2)", "vote-right"),
    (Choice.TIE, "Tie (3)", "vote-tie"),
    (Choice.BOTH_BAD, "Both bad (4)", "vote-both-bad"),
    (Choice.SKIP, "Skip (S)", "vote-skip"),
]
SHORTCUTS_JS = """
if (!window.studioLabelKeys) {
  window.studioLabelKeys = true;
  const keys = {"1": "vote-left", "ArrowLeft": "vote-left", "2": "vote-right", "ArrowRight": "vote-right",
                "3": "vote-tie", "4": "vote-both-bad", "s": "vote-skip", "S": "vote-skip", "u": "vote-undo",
                "U": "vote-undo"};
  document.addEventListener("keydown", (event) => {
    const target = event.target;
    if (event.ctrlKey || event.altKey || event.metaKey || event.repeat || !(event.key in keys)) return;
    if (target && (target.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(target.tagName))) return;
    const button = document.getElementById(keys[event.key]);
    if (!button || button.offsetParent === null || button.disabled) return;  // Label tab hidden, or busy
    event.preventDefault();
    button.click();
  });
}
"""


def pair_dict(shown: ShownPair | None, done) -> dict:
    """What the API returns for a pair: texts as shown, progress, no generation or policy ids."""
    base = {"labeled_today": done.labeled_today, "left_in_queue": done.left_in_queue}
    if shown is None:
        return {"pair_id": None, "prompt": None, "left": None, "right": None, **base}
    return {"pair_id": shown.pair_id, "prompt": shown.prompt, "left": shown.left, "right": shown.right, **base}


def _escape(text: str) -> str:
    """Text safe inside gr.Markdown: HTML escaped, markdown punctuation neutralised."""
    escaped = html.escape(text)
    for mark in "\\`*_{}[]()#+!|~":
        escaped = escaped.replace(mark, "\\" + mark)
    return escaped


def build(studio: Studio) -> list:
    store = studio.store

    def who(request: gr.Request | None, typed: str | None) -> str:
        """The annotator: under --auth the logged-in user (typing another name is refused), else the typed name."""
        name = studio.annotator(request, typed)
        if studio.users is not None and typed and typed.strip() and typed.strip() != name:
            raise gr.Error(user_message(f"you are signed in as {name}; you cannot label as someone else"),
                           print_exception=False)
        return name

    def api_next_pair(annotator: str, request: gr.Request) -> dict:
        """Reserve the next pair for `annotator` (or return the one already reserved for them); `pair_id` is null
        when the queue is empty. Also returns `labeled_today` and `left_in_queue`."""
        with user_errors():
            name = who(request, annotator)
            return pair_dict(next_pair(store, name), progress(store, name))

    def api_submit_label(annotator: str, pair_id: int, choice: str, vote_id: str, request: gr.Request) -> dict:
        """Store a vote on the pair reserved for `annotator`: `choice` is left, right, tie, both_bad or skip as shown.
        `vote_id` is new for each vote; sending it again stores nothing. Returns `label_id` and `next` (the next pair)."""
        with user_errors():
            name = who(request, annotator)
            label_id, shown = submit_and_next(store, name, pair_id, choice, vote_id)
            return {"label_id": label_id, "next": pair_dict(shown, progress(store, name))}

    def api_undo_label(annotator: str, request: gr.Request) -> dict:
        """Revert `annotator`'s latest label; returns the pair shown again (or the next pair)."""
        with user_errors():
            name = who(request, annotator)
            return pair_dict(undo_label(store, name), progress(store, name))

    group = {"concurrency_id": QUEUE, "concurrency_limit": QUEUE_WORKERS}
    gr.api(api_next_pair, api_name="next_pair", **group)
    gr.api(api_submit_label, api_name="submit_label", **group)
    gr.api(api_undo_label, api_name="undo_label", **group)

    signed_in = studio.users is not None
    with gr.Column(elem_id="label-tab"):
        with gr.Row(elem_id="label-top"):
            name_box = gr.Textbox(label="Your name", placeholder="type your name, then press Enter", max_length=64,
                                  scale=3, min_width=220, visible=not signed_in, elem_id="annotator-name")
            start = gr.Button("Start labeling", variant="primary", size="md", scale=0, min_width=160,
                              visible=not signed_in, elem_id="start")
            counts = gr.Markdown("Type your name to start." if not signed_in else "", min_width=260,
                                 elem_id="label-progress")
        with gr.Accordion("Guidelines", open=True, elem_id="guidelines"):
            guidelines = gr.Markdown()
        prompt = gr.Textbox(label="Prompt", interactive=False, lines=1, max_lines=8, elem_id="pair-prompt")
        with gr.Row(equal_height=True, elem_id="responses"):
            left = gr.Textbox(label="Left response", interactive=False, lines=6, max_lines=24, min_width=300,
                              elem_id="response-left")
            right = gr.Textbox(label="Right response", interactive=False, lines=6, max_lines=24, min_width=300,
                               elem_id="response-right")
        with gr.Row(elem_id="vote-buttons"):
            vote_buttons = [gr.Button(label, variant="primary" if choice in (Choice.LEFT, Choice.RIGHT) else "secondary",
                                      size="lg", elem_id=elem_id, min_width=120)
                            for choice, label, elem_id in VOTES]
        with gr.Row(elem_id="vote-tools"):
            undo = gr.Button("↶ Undo last (U)", size="sm", elem_id="vote-undo")
            status = gr.Markdown(elem_id="label-status")
        gr.HTML("Keys: <kbd>1</kbd>/<kbd>←</kbd> left · <kbd>2</kbd>/<kbd>→</kbd> right · <kbd>3</kbd> tie · "
                "<kbd>4</kbd> both bad · <kbd>S</kbd> skip · <kbd>U</kbd> undo", js_on_load=SHORTCUTS_JS,
                elem_id="label-keys")
        with gr.Accordion("Queue settings (project owner)", open=False, elem_id="queue-settings"):
            guidelines_box = gr.Textbox(label="Guidelines (markdown)", lines=5)
            with gr.Row():
                overlap = gr.Number(label="Annotators per pair (overlap)", precision=0, minimum=1)
                ttl = gr.Number(label="Reservation time (seconds)", minimum=10)
                save = gr.Button("Save settings")
    pair_state = gr.State(None)
    vote_state = gr.State(None)

    poll = gr.Timer(POLL_S, active=False)  # while the queue is empty, look for new pairs now and then

    def view(name: str, shown: ShownPair | None, message: str = ""):
        """Outputs for a shown pair (or the empty queue): state, texts, progress, status, polling."""
        done = progress(store, name)
        counts_md = f"**{done.labeled_today}** labeled today · **{done.left_in_queue}** left in the queue"
        if shown is None:
            return None, None, EMPTY, "", "", counts_md, message, gr.Timer(active=True)
        return (shown.pair_id, uuid.uuid4().hex, shown.prompt, shown.left, shown.right, counts_md, message,
                gr.Timer(active=False))

    screen = [pair_state, vote_state, prompt, left, right, counts, status, poll]

    def on_start(typed: str, request: gr.Request):
        with user_errors():
            name = who(request, typed)
            return view(name, next_pair(store, name), f"Labeling as **{_escape(name)}**.")

    def on_vote(choice: Choice):
        def vote(typed: str, pair_id: int | None, vote_id: str | None, request: gr.Request):
            with user_errors():
                name = who(request, typed)
                if pair_id is None:
                    return view(name, next_pair(store, name), "Nothing to vote on yet.")
                try:
                    _, shown = submit_and_next(store, name, pair_id, choice.value, vote_id)
                except (Conflict, NotFound) as exc:  # the pair left us (expired, taken): move on
                    gr.Warning(user_message(str(exc)))
                    return view(name, next_pair(store, name))
                return view(name, shown, f"Saved: {choice.value.replace('_', ' ')}.")
        return vote

    def on_undo(typed: str, request: gr.Request):
        with user_errors():
            name = who(request, typed)
            return view(name, undo_label(store, name), "Undone: the pair is back; vote again.")

    def on_poll(typed: str, pair_id: int | None, request: gr.Request):
        with user_errors():
            name = who(request, typed)
            shown = None if pair_id is not None else next_pair(store, name)
        return view(name, shown, "New pairs arrived.") if shown else tuple(gr.skip() for _ in screen)

    def save_queue_settings(guidelines: str, overlap: float, reservation_ttl_s: float, request: gr.Request) -> str:
        """Admins: set the guidelines (markdown), annotators per pair and reservation time; returns the guidelines."""
        studio.require_admin(request)
        with user_errors():
            saved = update_queue_settings(store, guidelines=guidelines, overlap=overlap,
                                          reservation_ttl_s=reservation_ttl_s)
        return saved.guidelines

    def on_load(request: gr.Request):
        """Signed-in annotators see their pair at once; others see the guidelines and type a name first."""
        if not signed_in:
            return tuple(gr.skip() for _ in screen)
        return on_start("", request)

    private = {"api_visibility": "private", **group}
    start.click(on_start, name_box, screen, **private)
    name_box.submit(on_start, name_box, screen, **private)
    for (choice, *_), button in zip(VOTES, vote_buttons):
        button.click(on_vote(choice), [name_box, pair_state, vote_state], screen, **private)
    undo.click(on_undo, name_box, screen, **private)
    poll.tick(on_poll, [name_box, pair_state], screen, **private)
    save.click(save_queue_settings, [guidelines_box, overlap, ttl], guidelines, api_name="save_queue_settings")

    def current_settings():
        now = queue_settings(store)
        return now.guidelines, now.guidelines, now.overlap, now.reservation_ttl_s

    return [(on_load, screen), (current_settings, [guidelines, guidelines_box, overlap, ttl])]
