"""Arena tab: a person types a prompt (or picks a held-out one), two versions answer it blind (by default the newest
against the SFT policy; admins may name others), the person votes with the Label tab's keys, and only then sees
which versions answered. The vote is a win-rate judgement, counted in the versions' win rates and the leaderboard
and shown here apart, "on people's own prompts"; it trains only where the admin allows (`storage.arena`).

The answers are sampled by the worker process (`trainers.jobs.arena_job`): this process stores the prompt and queues
the job, then shows the place in the arena's queue and the progress until both answers are stored. Everything
people or models wrote is rendered by `app.render` (nothing in it runs or loads).

Public API (gradio_client): `/arena_start(user, prompt, first_version, second_version)` -> `{job_id, place}`;
`/arena_answers(user, job_id)` -> `{status, place, phase, error, prompt_id, answers}` (`answers`: [first, second]
once both exist, else null); `/arena_vote(user, job_id, choice, vote_id)` (choice first, second, tie or both_bad) ->
`{label_id, first, second}` (the versions' names, first shown and second shown); `/arena_standings()`;
`/arena_votes_train(on)` (admins).
"""

from __future__ import annotations

import html
import random
import uuid
from dataclasses import dataclass

import gradio as gr

from app.context import Refresh, Studio, View, bind, markdown_literal, user_errors
from app.label.label_screen import annotator_name
from app.label.label_tab import VOTES
from app.render import TEXT_SCOPE, panes_html, plain_text_toggle, text_html
from labeling.queue.annotation import Choice, check_annotator
from labeling.versions.arena import ArenaVote, arena_versions, check_arena_prompt, own_arena_job, vote_arena
from labeling.versions.winrate import VersionFigures, winrate_report
from storage.arena import arena_answers, arena_place, arena_votes_train, set_arena_votes_train
from storage.audit import AuditAction
from storage.errors import InvalidInput
from storage.policies import list_policies
from storage.prompts import list_prompts
from storage.types import JobStatus, Prompt
from trainers.jobs.launcher import start_arena_job
from trainers.loop.presets import project_preset
from trainers.models.chat_format import prompt_budget

TITLE = "Arena"
POLL_S = 1.0
HELDOUT_SHOWN = 200  # held-out prompts offered in the picker
ARENA_VOTES = [(choice, label, f"arena-{elem_id}") for choice, label, elem_id in VOTES if choice is not Choice.SKIP]
KEYS = {label[label.rindex("(") + 1:-1]: elem_id for _, label, elem_id in ARENA_VOTES}  # the Label tab's keys
KEYS_JS = """
if (!window.studioArenaKeys) {
  window.studioArenaKeys = true;
  const keys = %s;
  document.addEventListener("keydown", (event) => {
    const target = event.target;
    if (event.ctrlKey || event.altKey || event.metaKey || event.repeat || !(event.key in keys)) return;
    if (target && (target.isContentEditable || ["TEXTAREA", "SELECT", "INPUT"].includes(target.tagName))) return;
    const button = document.getElementById(keys[event.key]);
    if (!button || button.offsetParent === null || button.disabled) return;  // Arena tab hidden, or busy
    event.preventDefault();
    button.click();
  });
}
""" % dict(KEYS)
SHOWN = {Choice.LEFT: "first", Choice.RIGHT: "second", Choice.TIE: "tie", Choice.BOTH_BAD: "both_bad"}


# ---- the public API -----------------------------------------------------------------------------------------------

def _voter(studio: Studio, request: gr.Request | None, user: str | None) -> str:
    return check_annotator(annotator_name(studio, request, user))


def _check_fits(text: str, paths: list[str], response_length: int) -> None:
    """InvalidInput in one line when the prompt, through the model's chat template, leaves no room for the answer."""
    for path in dict.fromkeys(paths):
        budget = prompt_budget(path, response_length)
        if budget is None:
            continue  # the worker's sampler checks it then
        fit = budget.fit([Prompt(0, text, None, False)])
        if fit.too_long:
            tokens = fit.too_long[0][1]
            said = f"has {tokens} tokens" if tokens is not None else "is refused by the model's chat template"
            raise InvalidInput(f"the prompt {said}: too long for this model ({budget.describe()}); shorten it")


def api_arena_start(studio: Studio, user: str, prompt: str, first_version: str | None,
                    second_version: str | None, request: gr.Request) -> dict:
    """Queue two blind answers to `prompt` for `user`: by default the newest version and the SFT policy; admins may
    name two versions (`v3`, `v0`). One prompt at a time per user. Returns `job_id` and `place` (arena jobs
    ahead)."""
    with user_errors():
        name = _voter(studio, request, user)
        text = check_arena_prompt(prompt)
        if (first_version or "").strip() or (second_version or "").strip():
            studio.require_admin(request)
        judged, opponent = arena_versions(studio.store, first_version, second_version)
        settings = project_preset(studio.store).config
        _check_fits(text, [judged.path, opponent.path], settings.response_length)
        shown = [judged.id, opponent.id]
        random.shuffle(shown)  # which answer comes first is a coin flip
        job_id = start_arena_job(studio.store, name, text, {
            "policies": shown, "judged": judged.id, "opponent": opponent.id,
            "response_length": settings.response_length, "temperature": settings.temperature,
            "top_p": settings.top_p, "top_k": settings.top_k, "seed": random.randrange(2**31)})
        return {"job_id": job_id, "place": arena_place(studio.store, job_id)}


def api_arena_answers(studio: Studio, user: str, job_id: int, request: gr.Request) -> dict:
    """Where `user`'s arena prompt `job_id` stands: `status` (queued, running, completed, failed), `place` (arena
    jobs ahead), `phase` ("answers done 1/2"), `error` (one line, when it failed) and `answers` ([first, second] once
    both exist, else null). No version is named before the vote."""
    with user_errors():
        job = own_arena_job(studio.store, _voter(studio, request, user), job_id)
        answers = arena_answers(studio.store, job.id)
        error = job.error.strip().splitlines()[-1] if job.error else None
        return {"status": job.status.value, "place": arena_place(studio.store, job.id), "phase": job.phase,
                "error": error, "prompt_id": job.config.get("prompt_id"),
                "answers": [a.text for a in answers] if len(answers) == 2 else None}


def api_arena_vote(studio: Studio, user: str, job_id: int, choice: str, vote_id: str, request: gr.Request) -> dict:
    """Vote on the answers of `user`'s arena prompt `job_id`: `choice` first, second, tie or both_bad; `vote_id` new
    for each vote. Returns `label_id`, then `first` and `second`: the versions that answered, as shown."""
    with user_errors():
        vote = vote_arena(studio.store, _voter(studio, request, user), int(job_id), choice, vote_id)
        return {"label_id": vote.label_id, "first": vote.names[0], "second": vote.names[1]}


def api_arena_standings(studio: Studio, request: gr.Request = None) -> dict:
    """Each version against the SFT policy on people's own prompts (the arena's votes; never pooled with the
    held-out win rates of `/leaderboard`): {own_prompts: [{policy_id, name, judgements, wins, ties, losses, rate,
    low, high, ...}], votes_train}."""
    studio.annotator(request, None)
    figures = winrate_report(studio.store, rounds=0).own_prompts
    return {"own_prompts": [vars(f) for f in figures], "votes_train": arena_votes_train(studio.store)}


def api_arena_votes_train(studio: Studio, on: bool, request: gr.Request) -> bool:
    """Admins: let arena votes also train reward models and DPO (default off: they only judge versions)."""
    studio.require_admin(request)
    if bool(on) != arena_votes_train(studio.store):
        set_arena_votes_train(studio.store, bool(on))
        studio.record(request, AuditAction.QUEUE_SETTINGS_CHANGED, arena_votes_train=bool(on))
    return arena_votes_train(studio.store)


# ---- the screen ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ArenaLayout:
    """The Arena tab's components."""

    user: gr.Textbox  # hidden under --auth (the login is the name)
    heldout: gr.Dropdown
    prompt: gr.Textbox
    first_version: gr.Dropdown  # admins: the versions that answer
    second_version: gr.Dropdown
    ask: gr.Button
    status: gr.Markdown
    answers: gr.HTML
    votes: dict[Choice, gr.Button]
    reveal: gr.Markdown
    standings: gr.HTML
    votes_train: gr.Checkbox
    job_id: gr.State
    vote_id: gr.State
    poll: gr.Timer


def layout(signed_in: bool) -> ArenaLayout:
    with gr.Column(elem_id="arena-tab", elem_classes=[TEXT_SCOPE]):
        gr.Markdown("Type a prompt, or pick a held-out one: two versions answer it blind. Vote with the Label tab's "
                    "keys; the versions are named only after your vote. Votes judge the versions (win rates on "
                    "people's own prompts, below) and train only where the admin allows.")
        user = gr.Textbox(label="Your name", max_length=64, visible=not signed_in, elem_id="arena-user")
        heldout = gr.Dropdown(label="…or pick a held-out prompt", choices=[], value=None, elem_id="arena-heldout")
        prompt = gr.Textbox(label="Your prompt", lines=3, elem_id="arena-prompt")
        with gr.Accordion("Versions (admins)", open=False, elem_id="arena-versions"):
            with gr.Row():
                first_version = gr.Dropdown(label="One version", choices=[""], value="", elem_id="arena-first")
                second_version = gr.Dropdown(label="The other", choices=[""], value="", elem_id="arena-second")
            votes_train = gr.Checkbox(label="Arena votes also train (reward model, DPO)", elem_id="arena-train")
        ask = gr.Button("Get two answers", variant="primary", elem_id="arena-ask")
        status = gr.Markdown(elem_id="arena-status")
        answers = gr.HTML(js_on_load=None, elem_id="arena-answers")
        with gr.Row(elem_id="arena-vote-buttons"):
            votes = {choice: gr.Button(label, elem_id=elem_id, interactive=False, min_width=120)
                     for choice, label, elem_id in ARENA_VOTES}
        with gr.Row():
            reveal = gr.Markdown(elem_id="arena-reveal")
            plain_text_toggle("arena-plain")
        gr.HTML("Keys: " + " · ".join(f"<kbd>{key}</kbd> {label.split(' (')[0].strip(' ◀▶')}"
                                       for key, (_, label, _) in zip(KEYS, ARENA_VOTES, strict=True)),
                js_on_load=KEYS_JS, elem_id="arena-keys")
        gr.Markdown("### On people's own prompts (arena votes; not pooled with the held-out win rates)")
        standings = gr.HTML(elem_id="arena-standings")
    return ArenaLayout(user, heldout, prompt, first_version, second_version, ask, status, answers, votes, reveal,
                       standings, votes_train, gr.State(None), gr.State(None), gr.Timer(POLL_S, active=False))


def answers_html(texts: list[str]) -> str:
    return panes_html([("arena-first-answer", "First answer", text_html(texts[0])),
                       ("arena-second-answer", "Second answer", text_html(texts[1]))])


def _buttons(on: bool) -> list:
    return [gr.update(interactive=on) for _ in ARENA_VOTES]


@dataclass(frozen=True)
class Progress(View):
    """What asking and waiting leave on screen."""

    job_id: int | None
    vote_id: str | None
    status: str
    answers: str
    reveal: str
    poll: gr.Timer


def progress_line(place: int, phase: str | None) -> str:
    if place:
        return f"In the queue: **{place}** arena prompt{'s' if place > 1 else ''} ahead of yours."
    return f"Generating the answers… ({markdown_literal(phase)})" if phase else "Generating the answers…"


def pick_heldout(text: str | None) -> str | dict:
    """A held-out prompt picked: it fills the prompt box (its vote then counts with the held-out figures)."""
    return text or gr.skip()


def ask(studio: Studio, user: str, prompt: str, first: str, second: str, request: gr.Request) -> tuple:
    """Get two answers: the prompt queued, the place shown, polling on; a refusal is one line."""
    try:
        started = api_arena_start(studio, user, prompt, first, second, request)
    except gr.Error as exc:
        return (*Progress(gr.skip(), gr.skip(), f"⚠ {exc.message}", gr.skip(), gr.skip(), gr.skip()).values(),
                *_buttons(False))
    return (*Progress(started["job_id"], uuid.uuid4().hex, progress_line(started["place"], None), "", "",
                      gr.Timer(active=True)).values(), *_buttons(False))


def poll(studio: Studio, user: str, job_id: int | None, request: gr.Request) -> tuple:
    """The timer while answers are on the way: the place and progress, then the two answers (polling off)."""
    if job_id is None:
        return (*Progress(None, None, "", "", "", gr.Timer(active=False)).values(), *_buttons(False))
    now = api_arena_answers(studio, user, job_id, request)
    if now["answers"]:
        return (*Progress(job_id, gr.skip(), "Both answers are in: which is better?", answers_html(now["answers"]),
                          "", gr.Timer(active=False)).values(), *_buttons(True))
    if now["status"] not in (JobStatus.QUEUED.value, JobStatus.RUNNING.value):
        line = markdown_literal(now["error"] or f"the answers were {now['status']}")
        return (*Progress(None, None, f"⚠ {line}", "", "", gr.Timer(active=False)).values(), *_buttons(False))
    return (*Progress(job_id, gr.skip(), progress_line(now["place"], now["phase"]), gr.skip(), gr.skip(),
                      gr.skip()).values(), *_buttons(False))


def reveal_line(vote: ArenaVote, choice: Choice) -> str:
    return (f"Saved: {SHOWN[choice].replace('_', ' ')}. The first answer was **{vote.names[0]}**, the second "
            f"**{vote.names[1]}**.")


def vote(studio: Studio, choice: Choice, user: str, job_id: int | None, vote_id: str | None,
         request: gr.Request) -> tuple:
    """A vote button (or its key): the vote stored, the versions named, the buttons off until the next prompt."""
    if job_id is None:
        return gr.skip(), "Type a prompt and get two answers first.", *_buttons(False)
    try:
        with user_errors():
            stored = vote_arena(studio.store, _voter(studio, request, user), int(job_id), SHOWN[choice],
                                vote_id or uuid.uuid4().hex)
    except gr.Error as exc:
        return gr.skip(), f"⚠ {exc.message}", *_buttons(False)
    return standings_html(studio), reveal_line(stored, choice), *_buttons(False)


def _figures_row(f: VersionFigures) -> str:
    rate = "—" if f.rate is None else f"{f.rate:.0%} [{f.low:.0%}, {f.high:.0%}]"
    return (f"<tr><td>{html.escape(f.name)}</td><td>{f.judgements}</td><td>{f.wins} / {f.ties} / {f.losses}</td>"
            f"<td>{rate}</td></tr>")


def standings_html(studio: Studio) -> str:
    figures = [f for f in winrate_report(studio.store, rounds=0).own_prompts if f.judgements]
    if not figures:
        return '<p class="none">No arena votes yet.</p>'
    return ('<table class="board" id="arena-figures"><thead><tr><th>Version</th><th>Votes</th><th>Wins / ties / '
            "losses</th><th>Win rate vs SFT [95% CI]</th></tr></thead><tbody>" + "".join(map(_figures_row, figures))
            + "</tbody></table>")


@dataclass(frozen=True)
class Opened(View):
    heldout: dict
    first_version: dict
    second_version: dict
    votes_train: bool
    standings: str


def show_arena(studio: Studio) -> Opened:
    """The tab opened: held-out prompts to pick, the versions an admin may name, the figures."""
    prompts = list_prompts(studio.store, heldout=True, excluded=False, limit=HELDOUT_SHOWN)
    names = [""] + [f"v{k}" for k in range(len(list_policies(studio.store)))]
    return Opened(gr.update(choices=[(p.text[:80], p.text) for p in prompts]), gr.update(choices=names),
                  gr.update(choices=names), arena_votes_train(studio.store), standings_html(studio))


# ---- wiring -------------------------------------------------------------------------------------------------------

def build(studio: Studio) -> list[Refresh]:
    gr.api(bind(api_arena_start, studio), api_name="arena_start")
    gr.api(bind(api_arena_answers, studio), api_name="arena_answers")
    gr.api(bind(api_arena_vote, studio), api_name="arena_vote")
    gr.api(bind(api_arena_standings, studio), api_name="arena_standings")
    gr.api(bind(api_arena_votes_train, studio), api_name="arena_votes_train")
    ui = layout(signed_in=studio.users is not None)
    private = {"api_visibility": "private"}
    buttons = list(ui.votes.values())
    shown = [*Progress.components(ui), *buttons]
    ui.heldout.change(pick_heldout, ui.heldout, ui.prompt, queue=False, **private)
    ui.ask.click(bind(ask, studio), [ui.user, ui.prompt, ui.first_version, ui.second_version], shown, **private)
    ui.poll.tick(bind(poll, studio), [ui.user, ui.job_id], shown, **private)
    for choice, button in ui.votes.items():
        button.click(bind(vote, studio, choice), [ui.user, ui.job_id, ui.vote_id], [ui.standings, ui.reveal, *buttons],
                     **private)
    ui.votes_train.input(bind(api_arena_votes_train, studio), ui.votes_train, ui.votes_train, **private)
    return [Refresh(bind(show_arena, studio), [], Opened.components(ui))]

