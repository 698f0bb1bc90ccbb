"""Label tab: the prompt, two responses side by side, guidelines, progress, vote buttons with keyboard shortcuts.

Public API (gradio_client): `/next_pair(annotator)`, `/submit_label(annotator, pair_id, choice, vote_id)` (returns
the label id and the next pair, so a vote costs one round trip) and `/undo_label(annotator)`. A pair is
`{pair_id, prompt, messages, left, right, labeled_today, left_in_queue}`: `prompt` is display text (a conversation's
plain-text form), `messages` the conversation's `{role, content}` turns, null for a plain-text prompt (the key is
always there; every text field is null when the queue is empty).

On screen the prompt (a conversation as role-labelled turns), the two responses and the guidelines (the owner's
markdown) are rendered by `app.render`, which lets nothing in them run, load or cover the page; the "Plain text"
toggle shows the prompt and responses as they are. What the tab shares with its panels (the screen an action leaves,
a vote, the annotator's name) lives in `app.label.label_screen`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import gradio as gr

from app.context import Refresh, Studio, View, bind, markdown_literal, user_errors
from app.label import demonstration_editor, judgement_extras, ranking_panel
from app.label.label_screen import (
    NAME_HINT,
    QUEUE,
    QUEUE_WORKERS,
    LabelLayout,
    Screen,
    annotator_name,
    counts_line,
    only_status,
    screen,
    serve,
    unnamed,
)
from app.render import TEXT_SCOPE, markdown_html, plain_text_toggle
from labeling.queue.annotation import (
    Choice,
    ShownPair,
    check_annotator,
    next_pair,
    normal_name,
    progress,
    queue_settings,
    release_pair,
    submit_and_next,
    undo_label,
    update_queue_settings,
)
from labeling.queue.ranking import rankings_first
from storage.audit import AuditAction
from storage.errors import InvalidInput

TITLE = "Label"
POLL_S = 10.0
NAME_FIRST_HTML = '<p class="queue-empty">Type your name above to see the first pair.</p>'
# The browser remembers the annotator's name in its localStorage under this key. The name is no secret: a fixed key
# for Gradio's encryption lets it outlive a restart of the server (a random one would be new each start).
REMEMBERED_NAME = {"storage_key": "rlhf-studio-annotator", "secret": "rlhf-studio-annotator-name"}
FOCUS_PAIR_JS = """() => {
  const pair = document.getElementById("pair-prompt");
  if (document.activeElement) document.activeElement.blur();
  if (pair) { pair.setAttribute("tabindex", "-1"); pair.focus({preventScroll: true}); }
}"""
FOCUS_NAME_JS = """() => setTimeout(() => {
  const box = document.querySelector("#annotator-name textarea, #annotator-name input");
  if (box) { box.focus(); box.select(); }
}, 50)"""
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
    const typing = target && (target.isContentEditable || ["TEXTAREA", "SELECT"].includes(target.tagName)
                              || (target.tagName === "INPUT" && !["checkbox", "radio"].includes(target.type)));
    if (typing) return;  // keys typed into a box; after ticking a checkbox or radio (a strength) keys still vote
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
        return {"pair_id": None, "prompt": None, "messages": None, "left": None, "right": None, **base}
    return {"pair_id": shown.pair_id, "prompt": shown.prompt, "messages": shown.messages, "left": shown.left,
            "right": shown.right, **base}


def guidelines_html(guidelines: str) -> str:
    """The guidelines as annotators see them: markdown rendered like model output (raw HTML shows as text)."""
    return f'<div class="guidelines-text">{markdown_html(guidelines)}</div>'


# ---- the public API -----------------------------------------------------------------------------------------------

def api_next_pair(studio: Studio, annotator: str, request: gr.Request) -> dict:
    """Reserve the next pair for `annotator` (or return the one already reserved for them); `pair_id` is null
    when the queue is empty. `prompt` is display text; `messages` the prompt's turns when it is a conversation,
    else null. Also returns `labeled_today` and `left_in_queue`."""
    with user_errors():
        name = annotator_name(studio, request, annotator)
        return pair_dict(next_pair(studio.store, name), progress(studio.store, name))


def api_submit_label(studio: Studio, annotator: str, pair_id: int, choice: str, vote_id: str,
                     request: gr.Request, strength: str | None = None, rationale: str | None = None,
                     ratings: list[int] | None = None) -> dict:
    """Store a vote on the pair reserved for `annotator`: `choice` is left, right, tie, both_bad or skip as shown;
    `strength` (optional, with left or right) much_better, better, slightly_better or about_same; `rationale` (text)
    and `ratings` ([left, right], 1-7) optional too. `vote_id` is new for each vote; sending it again stores nothing.
    Returns `label_id` and `next` (the next pair)."""
    with user_errors():
        name = annotator_name(studio, request, annotator)
        label_id, shown = submit_and_next(studio.store, name, pair_id, choice, vote_id, strength=strength or None,
                                          rationale=rationale, ratings=ratings)
        return {"label_id": label_id, "next": pair_dict(shown, progress(studio.store, name))}


def api_undo_label(studio: Studio, annotator: str, request: gr.Request) -> dict:
    """Revert `annotator`'s latest label; returns the pair shown again (or the next pair)."""
    with user_errors():
        name = annotator_name(studio, request, annotator)
        return pair_dict(undo_label(studio.store, name), progress(studio.store, name))


# ---- the screen ---------------------------------------------------------------------------------------------------

def layout(signed_in: bool) -> LabelLayout:
    """Name box (hidden under --auth), guidelines, the prompt, the responses side by side, vote buttons, undo, the
    plain-text toggle, queue settings."""
    with gr.Column(elem_id="label-tab", elem_classes=[TEXT_SCOPE]):
        with gr.Row(elem_id="label-top"):
            with gr.Row(visible=not signed_in, elem_id="name-entry", scale=3) as name_entry:
                name_box = gr.Textbox(label="Your name", placeholder="type your name, then press Enter",
                                      max_length=64, scale=3, min_width=220, elem_id="annotator-name")
                start = gr.Button("Start labeling", variant="primary", size="md", scale=0, min_width=160,
                                  elem_id="start")
            with gr.Row(visible=False, elem_id="name-shown", scale=3) as name_shown:
                labeling_as = gr.Markdown(elem_id="labeling-as")
                change = gr.Button("change", size="sm", scale=0, min_width=80, visible=not signed_in,
                                   elem_id="change-name")
            counts = gr.Markdown("Type your name to start." if not signed_in else "", min_width=260,
                                 elem_id="label-progress")
        with gr.Accordion("Guidelines", open=True, elem_id="guidelines"):
            guidelines = gr.HTML(js_on_load=None, elem_id="guidelines-text")
        with gr.Column(elem_id="pair-panel") as pair_panel:
            prompt = gr.HTML("" if signed_in else NAME_FIRST_HTML, js_on_load=None, elem_id="pair-prompt")
            responses = gr.HTML(js_on_load=None, elem_id="responses")
            with gr.Row(elem_id="vote-buttons"):
                votes = {choice: gr.Button(label, size="lg", elem_id=elem_id, min_width=120, variant="primary"
                                           if choice in (Choice.LEFT, Choice.RIGHT) else "secondary")
                         for choice, label, elem_id in VOTES}
            extras = judgement_extras.layout()
            with gr.Row(elem_id="vote-tools"):
                undo = gr.Button("↶ Undo last (U)", size="sm", elem_id="vote-undo")
                status = gr.Markdown(elem_id="label-status")
                plain = plain_text_toggle("label-plain")
        ranking = ranking_panel.layout()
        editor = demonstration_editor.layout()
        gr.HTML("Keys: <kbd>1</kbd>/<kbd>←</kbd> left · <kbd>2</kbd>/<kbd>→</kbd> right · <kbd>3</kbd> tie · "
                "<kbd>4</kbd> both bad · <kbd>S</kbd> skip · <kbd>U</kbd> undo · <kbd>W</kbd> write a better answer"
                + judgement_extras.KEYS_LEGEND,
                js_on_load=SHORTCUTS_JS, elem_id="label-keys")
        with gr.Accordion("Queue settings (project owner)", open=False, elem_id="queue-settings"):
            guidelines_box = gr.Textbox(label="Guidelines (markdown)", lines=5)
            with gr.Row():
                overlap = gr.Number(label="Annotators per pair (overlap)", precision=0, minimum=1)
                ttl = gr.Number(label="Reservation time (seconds)", minimum=10)
                save = gr.Button("Save settings")
    return LabelLayout(name_entry, name_box, start, name_shown, labeling_as, change, counts, guidelines, pair_panel,
                       prompt, responses, votes, undo, status, plain, guidelines_box, overlap, ttl, save,
                       gr.State(None), gr.State(None), gr.Timer(POLL_S, active=False), gr.State(None), gr.State(True),
                       gr.BrowserState("", **REMEMBERED_NAME), editor, extras, ranking)


@dataclass(frozen=True)
class Named(Screen):
    """Start labeling: the screen, the name the browser remembers, and "Labeling as NAME · change" in place of the
    name box."""

    annotator: str
    name_entry: dict
    name_shown: dict
    labeling_as: str


def start_labeling(studio: Studio, typed: str, annotator: str | None, request: gr.Request) -> Named:
    """Start (the button or Enter in the name box): the annotator's reserved or next pair. A new name gives back the
    pair the browser's previous name (`annotator`) held, so nobody waits for it."""
    if unnamed(studio, typed):
        return only_status(Named, NAME_HINT)
    with user_errors():
        try:
            name = check_annotator(annotator_name(studio, request, typed))
        except InvalidInput as exc:
            return only_status(Named, markdown_literal(str(exc)))
        if studio.users is None and not unnamed(studio, annotator) and normal_name(annotator) != name:
            release_pair(studio.store, annotator)
        shown = serve(studio, name)
    return Named(*shown.values(), name, gr.update(visible=False), gr.update(visible=True),
                 f"Labeling as **{markdown_literal(name)}**")


def change_name(annotator: str | None) -> tuple:
    """The "change" link: the name box again, holding the current name, in place of "Labeling as"."""
    return gr.update(visible=True), gr.update(value=annotator or ""), gr.update(visible=False)


def undo(studio: Studio, annotator: str | None, request: gr.Request) -> Screen:
    if unnamed(studio, annotator):
        return only_status(Screen, NAME_HINT)
    with user_errors():
        name = annotator_name(studio, request, annotator)
        return screen(studio, name, undo_label(studio.store, name), "Undone: the pair is back; vote again.")


def poll_queue(studio: Studio, annotator: str | None, pair_id: int | None, request: gr.Request) -> Screen | dict:
    """The empty-queue timer: show new pairs once they arrive, else change nothing."""
    if unnamed(studio, annotator):
        return gr.skip()
    with user_errors():
        name = annotator_name(studio, request, annotator)
        ranking = pair_id is None and rankings_first(studio.store, name)  # a loop has queued rankings meanwhile
        shown = None if pair_id is not None or ranking else next_pair(studio.store, name)
    return screen(studio, name, shown, "New pairs arrived.", ranking) if shown or ranking else gr.skip()


def show_known_annotator(studio: Studio, annotator: str | None, request: gr.Request) -> Named | dict:
    """On page load, signed-in annotators and those whose browser remembers their name see their pair at once;
    others see the guidelines and type a name first."""
    if studio.users is not None:
        return start_labeling(studio, "", None, request)
    return gr.skip() if unnamed(studio, annotator) else start_labeling(studio, annotator, annotator, request)


def show_counts(studio: Studio, annotator: str | None, pair_id: int | None, request: gr.Request) -> str | dict:
    """The tab opened again: its counts as they are now (a loop may have started waiting for people meanwhile)."""
    if unnamed(studio, annotator):
        return gr.skip()
    with user_errors():
        return counts_line(studio, annotator_name(studio, request, annotator), pair_id)


@dataclass(frozen=True)
class Settings(View):
    """The queue settings: the guidelines (rendered HTML, and markdown in the owner's edit box), overlap, reservation
    time."""

    guidelines: str
    guidelines_box: str
    overlap: int
    ttl: float


def current_settings(studio: Studio) -> Settings:
    now = queue_settings(studio.store)
    return Settings(guidelines_html(now.guidelines), now.guidelines, now.overlap, now.reservation_ttl_s)


def save_queue_settings(studio: Studio, guidelines: str, overlap: float, reservation_ttl_s: float,
                        request: gr.Request) -> str:
    """Admins: set the guidelines (markdown), annotators per pair and reservation time; returns the guidelines."""
    studio.require_admin(request)
    before = queue_settings(studio.store)
    with user_errors():
        saved = update_queue_settings(studio.store, guidelines=guidelines, overlap=overlap,
                                      reservation_ttl_s=reservation_ttl_s)
    changed = {name: [getattr(before, name), value] for name, value in asdict(saved).items()
               if value != getattr(before, name)}
    if changed:
        studio.record(request, AuditAction.QUEUE_SETTINGS_CHANGED, **changed)
    return saved.guidelines


def on_save_settings(studio: Studio, guidelines: str, overlap: float, reservation_ttl_s: float,
                     request: gr.Request) -> str:
    """The owner's Save button: the settings saved, the guidelines shown rendered."""
    return guidelines_html(save_queue_settings(studio, guidelines, overlap, reservation_ttl_s, request))


# ---- wiring -------------------------------------------------------------------------------------------------------

def build(studio: Studio) -> list[Refresh]:
    group = {"concurrency_id": QUEUE, "concurrency_limit": QUEUE_WORKERS}
    gr.api(bind(api_next_pair, studio), api_name="next_pair", **group)
    gr.api(bind(api_submit_label, studio), api_name="submit_label", **group)
    gr.api(bind(api_undo_label, studio), api_name="undo_label", **group)

    ui = layout(signed_in=studio.users is not None)
    shown, named = Screen.components(ui), Named.components(ui)
    private = {"api_visibility": "private", **group}
    for started in (ui.start.click, ui.name_box.submit):
        started(bind(start_labeling, studio), [ui.name_box, ui.annotator], named, **private).success(
            None, js=FOCUS_PAIR_JS)
    ui.change.click(change_name, ui.annotator, [ui.name_entry, ui.name_box, ui.name_shown], queue=False,
                    api_visibility="private").then(None, js=FOCUS_NAME_JS)
    extras = judgement_extras.build(studio, ui, private)  # the vote buttons, with a strength, rationale, ratings
    ui.undo.click(bind(undo, studio), ui.annotator, shown, **private)
    ui.poll.tick(bind(poll_queue, studio), [ui.annotator, ui.pair_id], shown, **private)
    demonstration_editor.build(studio, ui.editor, ui.annotator, ui.pair_id, annotator_name)
    gr.api(bind(save_queue_settings, studio), api_name="save_queue_settings")
    ui.save.click(bind(on_save_settings, studio), [ui.guidelines_box, ui.overlap, ui.ttl], ui.guidelines,
                  api_visibility="private")
    rankings = ranking_panel.build(studio, ui)  # rankings of K answers (rank_k 3-6), in place of the pair
    return [*rankings, *extras, Refresh(bind(show_known_annotator, studio), [ui.annotator], named, on_open=False),
            Refresh(bind(current_settings, studio), [], Settings.components(ui), on_open=False),
            Refresh(bind(show_counts, studio), [ui.annotator, ui.pair_id], [ui.counts])]
