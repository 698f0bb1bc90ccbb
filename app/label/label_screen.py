"""The Label screen that the Label tab and its panels share: the queue's concurrency group, the tab's components
(`LabelLayout`), what an action leaves on screen (`Screen`) and how it is made (`screen`, `serve`, `only_status`),
the annotator's name (`annotator_name`, `unnamed`) and a vote on the pair on screen (`vote`).

`app.label.label_tab` lays the screen out and wires it; `app.label.judgement_extras` (a vote's strength, rationale and
ratings) and `app.label.ranking_panel` (K answers to rank, in place of the pair) build on this module, never on the tab.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, fields

import gradio as gr

from app.context import Studio, View, user_errors, user_message
from app.label import demonstration_editor
from app.label.label_suggestions import after_vote, before_vote
from app.render import panes_html, text_html
from labeling.queue.annotation import Choice, ShownPair, next_pair, normal_name, progress, submit_and_next
from labeling.queue.ranking import rankings_first
from storage import jobs as job_rows
from storage.errors import Conflict, NotFound
from trainers.loop.waiting import waiting_line

QUEUE = "label-queue"  # one concurrency group for every queue action, so Gradio hands them out fairly
QUEUE_WORKERS = 4
EMPTY = "The queue is empty: new pairs arrive when the next round samples from the policy."
EMPTY_HTML = f'<p class="queue-empty">{EMPTY}</p>'
NAME_HINT = "Type your name above and press Enter (or **Start labeling**) first; then the keys vote."


def prompt_html(shown: ShownPair) -> str:
    """The prompt pane: the conversation's turns, or the text, as markdown (and its plain form)."""
    return panes_html([("prompt-text", "Prompt", text_html(shown.messages or shown.prompt))])


def responses_html(shown: ShownPair) -> str:
    """The two responses side by side in equal-height panes that scroll when long."""
    return panes_html([("response-left", "Left response", text_html(shown.left)),
                       ("response-right", "Right response", text_html(shown.right))])


def annotator_name(studio: Studio, request: gr.Request | None, typed: str | None) -> str:
    """The annotator: under --auth the logged-in user (typing another name is refused), else the typed name."""
    name = studio.annotator(request, typed)
    if studio.users is not None and typed and typed.strip() and normal_name(typed) != name:
        raise gr.Error(user_message(f"you are signed in as {name}; you cannot label as someone else"),
                       print_exception=False)
    return name


@dataclass(frozen=True)
class LabelLayout:
    """The Label tab's components."""

    name_entry: gr.Row  # the name box and Start, until a name is set
    name_box: gr.Textbox
    start: gr.Button
    name_shown: gr.Row  # "Labeling as NAME · change" once it is
    labeling_as: gr.Markdown
    change: gr.Button
    counts: gr.Markdown
    guidelines: gr.HTML
    pair_panel: gr.Column  # the pair and its votes, shown while `pair_shown` (a ranking may come first)
    prompt: gr.HTML
    responses: gr.HTML  # the left and right panes
    votes: dict[Choice, gr.Button]
    undo: gr.Button
    status: gr.Markdown
    plain: gr.Checkbox  # shows the texts as they are instead of rendered
    guidelines_box: gr.Textbox
    overlap: gr.Number
    ttl: gr.Number
    save: gr.Button
    pair_id: gr.State  # the pair on this browser's screen
    vote_id: gr.State  # the id a vote on it carries: a retried click stores it once
    poll: gr.Timer  # on while the queue is empty: looks for new pairs now and then
    ranking_turn: gr.State  # a new token each time no pair is on screen: the ranking panel then serves a ranking
    pair_shown: gr.State  # no listener outputs the panel itself: an error would cover it, buttons and all
    annotator: gr.BrowserState  # the name this browser labels as, remembered across reloads
    editor: demonstration_editor.EditorLayout | None = None  # a better answer, written or edited (W)
    extras: object = None  # app.label.judgement_extras.ExtrasLayout (it imports this module): strength, rationale,
                           # ratings
    ranking: object = None  # app.label.ranking_panel.RankingLayout (it imports this module): K answers to rank


@dataclass(frozen=True)
class Screen(View):
    """What an action leaves on screen: the pair (or none: the empty queue, or a ranking's turn), progress, status."""

    pair_id: int | None
    vote_id: str | None
    prompt: str  # HTML, as are the responses
    responses: str
    counts: str
    status: str
    poll: gr.Timer
    pair_shown: bool  # False while a ranking comes first
    ranking_turn: str | None  # new when no pair is on screen: the ranking panel looks for a ranking (gr.skip: not)


def counts_line(studio: Studio, name: str, pair_id: int | None) -> str:
    """Progress, and each loop round that waits for people with the labels it has now (`pair_id`: on screen)."""
    done = progress(studio.store, name)
    waits = [line for job in job_rows.list_jobs(studio.store, limit=5)
             if (line := waiting_line(studio.store, job, name, pair_id))]
    return " · ".join([f"**{done.labeled_today}** labeled today · **{done.left_in_queue}** left in the queue", *waits])


def screen(studio: Studio, name: str, shown: ShownPair | None, message: str = "", ranking: bool = False) -> Screen:
    """A shown pair (a new vote id for it); or none: the empty queue (polling), or the pair hidden (`ranking`) for
    the ranking that comes first; either way a new `ranking_turn`."""
    counts = counts_line(studio, name, shown and shown.pair_id)
    if shown is None:
        return Screen(None, None, "" if ranking else EMPTY_HTML, "", counts, message, gr.Timer(active=not ranking),
                      not ranking, uuid.uuid4().hex)
    return Screen(shown.pair_id, uuid.uuid4().hex, prompt_html(shown), responses_html(shown), counts,
                  message + before_vote(studio.store, name, shown.pair_id), gr.Timer(active=False),
                  True, gr.skip())


def serve(studio: Studio, name: str, message: str = "") -> Screen:
    """The annotator's next item: room for a ranking while rankings come first
    (`labeling.queue.ranking.rankings_first`), else their reserved or next pair."""
    if rankings_first(studio.store, name):
        return screen(studio, name, None, message, ranking=True)
    return screen(studio, name, next_pair(studio.store, name), message)


def only_status(view: type[View], message: str) -> View:
    """A view that changes nothing on screen but the status line (a hint instead of an error)."""
    return view(**{f.name: message if f.name == "status" else gr.skip() for f in fields(view)})


def unnamed(studio: Studio, annotator: str | None) -> bool:
    """True while this browser has no name to label as (under --auth the login is the name)."""
    return studio.users is None and not (annotator or "").strip()


def vote(studio: Studio, choice: Choice, annotator: str | None, pair_id: int | None, vote_id: str | None,
         request: gr.Request, judgement: dict | None = None) -> Screen:
    """A vote button: store the vote on the pair on screen and show the next one; a pair that left the annotator
    (expired, taken) is a warning, and the next pair is shown. Before a name is set, a hint and nothing else.
    `judgement`: its strength, rationale and ratings (`app.label.judgement_extras`)."""
    if unnamed(studio, annotator):
        return only_status(Screen, NAME_HINT)
    with user_errors():
        name = annotator_name(studio, request, annotator)
        if pair_id is None:
            return serve(studio, name, "Nothing to vote on yet.")
        ranking = rankings_first(studio.store, name)  # the next item is a ranking: no pair is reserved
        try:
            _, shown = submit_and_next(studio.store, name, pair_id, choice.value, vote_id, then_pair=not ranking,
                                       **(judgement or {}))
        except (Conflict, NotFound) as exc:
            gr.Warning(user_message(str(exc)))
            return serve(studio, name)
        saved = f"Saved: {choice.value.replace('_', ' ')}." + after_vote(studio.store, name, pair_id)  # a judge's
        return screen(studio, name, shown, saved, ranking)
