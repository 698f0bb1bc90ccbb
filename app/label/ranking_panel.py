"""The Label tab's ranking panel: K answers to one prompt shown as A, B, C, ..., ordered with the keyboard.

Keys (while the panel shows a ranking and no other box has the focus): a letter puts that answer next in the order
(best first), `=` ties the next letter with the previous one, Backspace takes the last one back; the order is sent
as soon as it names every answer (or with Enter / the button). `0` is "all bad", `Z` undoes the last ranking sent
(its ranking comes back). Rankings come before pairs (`labeling.queue.ranking.rankings_first`): while a loop with
`rank_k` 3 to 6 waits for them, the panel shows one in place of the pair, at the start, after a reload and after a vote
on a pair; when none is left for the annotator, the pair comes back. A rationale box and a 1-7 rating per answer show
under the order when the project's `rationale` and `ratings` settings ask for them (`optional` or `required`;
`app.label.judgement_extras`, `app.label.ranking_ratings`); they go with the order and clear for the next ranking.

Public API (gradio_client): `/next_ranking(annotator)`, `/submit_ranking(annotator, ranking_id, order, vote_id)`
(returns the label id and the next ranking) and `/undo_ranking(annotator)`. A ranking is `{ranking_id, prompt,
messages, responses, letters, left_in_queue}`; `order` is letters best first with `=` between tied neighbours
(`BA=CD`), `all_bad` or `skip` (see `labeling.queue.ranking`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, fields

import gradio as gr

from app.context import Refresh, Studio, View, bind, user_errors, user_message
from app.label.judgement_extras import rationale_field
from app.label.label_screen import (
    EMPTY_HTML,
    QUEUE,
    QUEUE_WORKERS,
    LabelLayout,
    Screen,
    annotator_name,
    counts_line,
    serve,
    unnamed,
)
from app.label.ranking_ratings import given_ratings, rating_fields
from app.label.ranking_ratings import layout as ratings_layout
from app.render import TEXT_SCOPE, panes_html, text_html
from labeling.queue.annotation import release_pair
from labeling.queue.notes import MAX_RATIONALE_CHARS
from labeling.queue.ranking import LETTERS, ShownRanking, next_ranking, open_rankings, submit_ranking, undo_ranking
from storage.errors import Conflict, NotFound
from storage.rankings import ranking_size

RANKING_KEYS_JS = """
if (!window.studioRankingKeys) {
  window.studioRankingKeys = true;
  const click = (id) => { const b = document.getElementById(id); if (b && !b.disabled) b.click(); };
  document.addEventListener("keydown", (event) => {
    const panel = document.getElementById("ranking-panel");
    const answers = document.querySelector("#rank-answers [data-letters]");
    if (!panel || panel.offsetParent === null || !answers) return;  // no ranking on screen
    if (event.ctrlKey || event.altKey || event.metaKey || event.repeat) return;
    const box = document.querySelector("#rank-order textarea, #rank-order input");
    const target = event.target;
    const typing = target && target !== box && (target.isContentEditable
      || ["TEXTAREA", "SELECT"].includes(target.tagName)
      || (target.tagName === "INPUT" && !["checkbox", "radio"].includes(target.type)));  // a clicked rating keeps keys
    if (typing || !box) return;
    const letters = answers.dataset.letters;
    const key = event.key.length === 1 ? event.key.toUpperCase() : event.key;
    const set = (value) => { box.value = value; box.dispatchEvent(new Event("input", {bubbles: true})); };
    let value = box.value.toUpperCase();
    if (letters.includes(key) && !value.includes(key)) {
      event.preventDefault();
      value += key;
      set(value);
      if ([...letters].every((l) => value.includes(l))) setTimeout(() => click("rank-submit"), 50);
    } else if (key === "=" && value && !value.endsWith("=")) {
      event.preventDefault(); set(value + "=");
    } else if (key === "Backspace" && target !== box) {
      event.preventDefault(); set(value.slice(0, -1));
    } else if (key === "Enter") {
      event.preventDefault(); click("rank-submit");
    } else if (key === "0" && target !== box) {
      event.preventDefault(); click("rank-all-bad");
    } else if (key === "Z" && target !== box) {
      event.preventDefault(); click("rank-undo");
    }
  });
}
"""
EMPTY = "No rankings are queued for you."


def ranking_dict(studio: Studio, name: str, shown: ShownRanking | None) -> dict:
    """What the API returns for a ranking: texts as shown, the letters, what is left; no generation ids."""
    left = open_rankings(studio.store, name)
    if shown is None:
        return {"ranking_id": None, "prompt": None, "messages": None, "responses": None, "letters": None,
                "left_in_queue": left}
    return {"ranking_id": shown.ranking_id, "prompt": shown.prompt, "messages": shown.messages,
            "responses": list(shown.responses), "letters": shown.letters, "left_in_queue": left}


def api_next_ranking(studio: Studio, annotator: str, request: gr.Request) -> dict:
    """Reserve the next ranking for `annotator` (or return the one reserved for them); `ranking_id` is null when
    none is queued. `responses` are in the order shown, lettered `letters`."""
    with user_errors():
        name = annotator_name(studio, request, annotator)
        return ranking_dict(studio, name, next_ranking(studio.store, name))


def api_submit_ranking(studio: Studio, annotator: str, ranking_id: int, order: str, vote_id: str,
                       request: gr.Request, rationale: str | None = None, ratings: list[int] | None = None) -> dict:
    """Store a verdict on the ranking reserved for `annotator`: `order` is the letters best first, `=` between tied
    neighbours (`BA=CD`), or `all_bad` or `skip`; `rationale` (text) and `ratings` (1-7 per answer, in the order
    shown) are optional. Returns `label_id` and `next` (the next ranking)."""
    with user_errors():
        name = annotator_name(studio, request, annotator)
        label_id = submit_ranking(studio.store, name, ranking_id, order, vote_id, rationale=rationale,
                                  ratings=ratings)
        return {"label_id": label_id, "next": ranking_dict(studio, name, next_ranking(studio.store, name))}


def api_undo_ranking(studio: Studio, annotator: str, request: gr.Request) -> dict:
    """Revert `annotator`'s latest ranking verdict; returns that ranking again (or the next one)."""
    with user_errors():
        name = annotator_name(studio, request, annotator)
        return ranking_dict(studio, name, undo_ranking(studio.store, name))


# ---- the screen ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RankingLayout:
    panel: gr.Column
    prompt: gr.HTML
    answers: gr.HTML
    order: gr.Textbox
    submit: gr.Button
    all_bad: gr.Button
    skip: gr.Button
    undo: gr.Button
    status: gr.Markdown
    ranking_id: gr.State
    vote_id: gr.State
    rationale: gr.Textbox  # shown when the project's `rationale` setting asks for one
    ratings: tuple[gr.Radio, ...]  # A to F, shown for the answers on screen when the `ratings` setting asks


def layout() -> RankingLayout:
    with gr.Column(elem_id="ranking-panel", visible=False, elem_classes=[TEXT_SCOPE]) as panel:
        gr.Markdown("### Rank the answers, best first", elem_id="rank-title")
        prompt = gr.HTML(js_on_load=None, elem_id="rank-prompt")
        answers = gr.HTML(js_on_load=None, elem_id="rank-answers")
        with gr.Row():
            order = gr.Textbox(label="Your order, best first (= ties two neighbours)", max_length=32,
                               elem_id="rank-order", scale=3)
            submit = gr.Button("Send ranking (Enter)", variant="primary", elem_id="rank-submit", scale=1)
            all_bad = gr.Button("All bad (0)", elem_id="rank-all-bad", scale=1)
            skip = gr.Button("Skip", elem_id="rank-skip", scale=0)
        rationale = gr.Textbox(label="Why (rationale)", lines=2, max_length=MAX_RATIONALE_CHARS, visible=False,
                               elem_id="rank-rationale")
        ratings = ratings_layout()
        with gr.Row():
            undo = gr.Button("↶ Undo last ranking (Z)", size="sm", elem_id="rank-undo")
            status = gr.Markdown(elem_id="rank-status")
        gr.HTML("Keys: a letter puts that answer next · <kbd>=</kbd> ties the next with the previous · "
                "<kbd>Backspace</kbd> takes one back · <kbd>0</kbd> all bad · <kbd>Z</kbd> undo",
                js_on_load=RANKING_KEYS_JS, elem_id="rank-keys")
    return RankingLayout(panel, prompt, answers, order, submit, all_bad, skip, undo, status, gr.State(None),
                         gr.State(None), rationale, ratings)


@dataclass(frozen=True)
class RankingScreen(View):
    panel: dict  # a visibility update
    prompt: str
    answers: str
    order: str
    status: str
    ranking_id: int | None
    vote_id: str | None
    rationale: str  # cleared for each ranking shown
    ratings: tuple = ()  # an update per rating radio (A to F): shown for the ranking's answers, cleared

    @classmethod
    def components(cls, layout) -> list:
        return [*super().components(layout)[:-1], *layout.ratings]

    def values(self) -> tuple:
        return (*super().values()[:-1], *self.ratings)


def answers_html(shown: ShownRanking) -> str:
    """The answers side by side, lettered A, B, C, ... (rendered as the pair's responses are)."""
    panes = panes_html([(f"rank-answer-{letter}", f"Answer {letter}", text_html(text))
                        for letter, text in zip(shown.letters, shown.responses, strict=True)])
    return f'<div data-letters="{shown.letters}">{panes}</div>'


def ranking_screen(studio: Studio, shown: ShownRanking | None, message: str = "") -> RankingScreen:
    if shown is None:
        return RankingScreen(gr.update(visible=bool(message)), "", f'<p class="queue-empty">{EMPTY}</p>', "",
                             message, None, None, "", rating_fields(studio, 0))
    prompt = panes_html([("rank-prompt-text", "Prompt", text_html(shown.messages or shown.prompt))])
    return RankingScreen(gr.update(visible=True), prompt, answers_html(shown), "", message, shown.ranking_id,
                         uuid.uuid4().hex, "", rating_fields(studio, len(shown.responses)))


@dataclass(frozen=True)
class Served(View):
    """What a ranking action leaves on the Label tab: the panel, and the pair's part of the screen
    (`label_screen.Screen`: hidden for a ranking, or the pair back when none is left)."""

    ranking: RankingScreen
    pair: Screen

    @classmethod
    def components(cls, layout) -> list:  # the Label tab's layout, which holds the panel's
        return [*RankingScreen.components(layout.ranking), *Screen.components(layout)]

    def values(self) -> tuple:
        return (*self.ranking.values(), *self.pair.values())


def pair_part(**changes) -> Screen:
    """The pair's part of the screen with only `changes` (the rest as they are)."""
    return Screen(**{f.name: gr.skip() for f in fields(Screen)} | changes)


def take_turn(studio: Studio, annotator: str | None, request: gr.Request) -> Served | dict:
    """No pair is on the Label tab's screen (a ranking comes first, or the pair queue is empty): the annotator's
    reserved or next ranking in place of the pair (a gold ranking on their turn or when all else is done), and a pair
    they held (from before a loop queued rankings) given back, so others take it; with none, the pair's part of the
    screen shown (the empty queue, polling for new pairs)."""
    if unnamed(studio, annotator):
        return gr.skip()
    with user_errors():
        name = annotator_name(studio, request, annotator)
        shown = next_ranking(studio.store, name)
        if shown is not None:
            release_pair(studio.store, name)
    if shown is None:
        unchanged = RankingScreen(*[gr.skip()] * 8, (gr.skip(),) * len(LETTERS))
        return Served(unchanged, pair_part(pair_shown=True, prompt=EMPTY_HTML, poll=gr.Timer(active=True)))
    return Served(ranking_screen(studio, shown), pair_part(pair_shown=False, poll=gr.Timer(active=False)))


def send(studio: Studio, order: str, typed: str, ranking_id: int | None, vote_id: str | None, rationale: str | None,
         request: gr.Request, rating_a: int | None = None, rating_b: int | None = None, rating_c: int | None = None,
         rating_d: int | None = None, rating_e: int | None = None, rating_f: int | None = None) -> Served:
    """Send the order (or all_bad / skip), with its rationale and the ratings of A to F (every answer on screen rated
    or none), for the ranking on screen and show the next one (`after_send`)."""
    ratings = (rating_a, rating_b, rating_c, rating_d, rating_e, rating_f)
    with user_errors():
        name = annotator_name(studio, request, typed)
        if ranking_id is None:
            return after_send(studio, name, "Nothing to rank yet.")
        try:
            rated = given_ratings(ratings, ranking_size(studio.store, ranking_id))
            submit_ranking(studio.store, name, ranking_id, order, vote_id, rationale=rationale or None, ratings=rated)
        except (Conflict, NotFound) as exc:
            gr.Warning(user_message(str(exc)))
            return after_send(studio, name)
        return after_send(studio, name, f"Saved: {order.strip() or 'nothing'}.")


def after_send(studio: Studio, name: str, message: str = "") -> Served:
    """The panel with the next ranking, and the Label tab's counts; with none left for the annotator, the panel's
    `message` and the pair back in its place (`label_screen.serve`)."""
    shown = next_ranking(studio.store, name)
    if shown is None:
        return Served(ranking_screen(studio, None, message), serve(studio, name))
    return Served(ranking_screen(studio, shown, message), pair_part(counts=counts_line(studio, name, None)))


def undo(studio: Studio, typed: str, request: gr.Request) -> Served:
    """Undo the last ranking sent: it comes back in place of the pair."""
    with user_errors():
        name = annotator_name(studio, request, typed)
        shown = ranking_screen(studio, undo_ranking(studio.store, name), "Undone: the ranking is back; rank it again.")
        return Served(shown, pair_part(pair_shown=False, poll=gr.Timer(active=False)))


def build(studio: Studio, label: LabelLayout) -> list[Refresh]:
    """The panel's API endpoints, and its listeners: each time the Label tab has no pair on screen (`ranking_turn`),
    the annotator's ranking in place of the pair; a ranking sent shows the next one or brings the pair back. The
    name the tab labels as (`annotator`) goes with every action. Returns the refresh of the rationale box."""
    group = {"concurrency_id": QUEUE, "concurrency_limit": QUEUE_WORKERS}
    gr.api(bind(api_next_ranking, studio), api_name="next_ranking", **group)
    gr.api(bind(api_submit_ranking, studio), api_name="submit_ranking", **group)
    gr.api(bind(api_undo_ranking, studio), api_name="undo_ranking", **group)
    ui, annotator, outputs = label.ranking, label.annotator, Served.components(label)
    private = {"api_visibility": "private", **group}
    label.ranking_turn.change(bind(take_turn, studio), annotator, outputs, **private)
    label.pair_shown.change(lambda shown: gr.update(visible=shown), label.pair_shown, label.pair_panel, queue=False,
                            api_visibility="private")  # a listener that cannot fail: no error ever covers the pair
    held = [annotator, ui.ranking_id, ui.vote_id, ui.rationale, *ui.ratings]
    ui.submit.click(bind(send, studio), [ui.order, *held], outputs, **private)
    for button, verdict in ((ui.all_bad, "all_bad"), (ui.skip, "skip")):
        button.click(bind(send, studio, verdict), held, outputs, **private)
    ui.undo.click(bind(undo, studio), annotator, outputs, **private)
    return [Refresh(bind(rationale_field, studio), [], ui.rationale)]
