"""The Label tab's richer verdict: a strength (how much better), a rationale and 1-7 ratings sent with the vote.

**Strength**: keys 5-8 (or the radio under the vote buttons) pick much better, better, slightly better or about the
same; the next 1 or 2 (left or right) votes with it, so the fast path stays one key and a graded verdict is two
(`5` `1`: left is much better). Pressing the picked key again clears it. The strength goes through the same vote path
as the buttons (`labeling.queue.annotation.submit_and_next`) and is stored as `labels.margin`
(`labeling.queue.strength`); a tie, both bad or skip leaves it out. **Rationale** (a plain text box, nothing rendered)
and **ratings** (1 worst to 7 best, one per answer) show only when the project settings `rationale` / `ratings` ask for
them (`optional` or `required`); a required one missing refuses the vote with one hint in the status line, and the pair
stays. Each vote that shows a new pair clears all three.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import gradio as gr

from app.context import Refresh, Studio, bind, markdown_literal
from app.label.label_screen import Screen, only_status, unnamed, vote
from labeling.queue.annotation import Choice
from labeling.queue.notes import MAX_RATIONALE_CHARS, check_note, note_modes
from labeling.queue.strength import Strength
from storage.errors import InvalidInput

NO_STRENGTH = ""
STRENGTHS = [  # (label with its key, value, key)
    ("much better (5)", Strength.MUCH_BETTER.value, "5"),
    ("better (6)", Strength.BETTER.value, "6"),
    ("slightly better (7)", Strength.SLIGHTLY_BETTER.value, "7"),
    ("about the same (8)", Strength.ABOUT_SAME.value, "8"),
]
RATINGS = list(range(1, 8))
KEYS_LEGEND = " · <kbd>5</kbd>–<kbd>8</kbd> then <kbd>1</kbd>/<kbd>2</kbd>: left/right much better, better, " \
              "slightly better, about the same"
STRENGTH_KEYS_JS = """
if (!window.studioStrengthKeys) {
  window.studioStrengthKeys = true;
  const keys = %s;
  document.addEventListener("keydown", (event) => {
    if (event.ctrlKey || event.altKey || event.metaKey || event.repeat || !(event.key in keys)) return;
    const target = event.target;
    const typing = target && (target.isContentEditable || ["TEXTAREA", "SELECT"].includes(target.tagName)
                              || (target.tagName === "INPUT" && !["checkbox", "radio"].includes(target.type)));
    const row = document.getElementById("vote-strength");
    if (typing || !row || row.offsetParent === null) return;  // keys typed into a box, or the Label tab hidden
    const inputs = [...row.querySelectorAll("input[type=radio]")];
    const picked = inputs.find((input) => input.closest("label")?.textContent.includes(`(${event.key})`));
    if (!picked) return;
    event.preventDefault();
    (picked.checked ? inputs.find((input) => !/\\(\\d\\)/.test(input.closest("label")?.textContent)) : picked)?.click();
    if (document.activeElement) document.activeElement.blur();  // the next 1 or 2 votes
  });
}
""" % {key: label for label, _, key in STRENGTHS}


@dataclass(frozen=True)
class ExtrasLayout:
    """The strength radio, the rationale box and a rating per answer (the last two shown per the settings)."""

    strength: gr.Radio
    rationale: gr.Textbox
    left_rating: gr.Radio
    right_rating: gr.Radio


def layout() -> ExtrasLayout:
    """Under the vote buttons: the strength row, then the rationale and the ratings (hidden until the settings ask)."""
    strength = gr.Radio([("no strength", NO_STRENGTH)] + [(label, value) for label, value, _ in STRENGTHS],
                        value=NO_STRENGTH, label="How much better (with left or right)", elem_id="vote-strength")
    gr.HTML("", js_on_load=STRENGTH_KEYS_JS, elem_id="strength-keys")
    with gr.Row(elem_id="vote-notes"):
        rationale = gr.Textbox(label="Why (rationale)", lines=2, max_length=MAX_RATIONALE_CHARS, visible=False,
                               scale=3, elem_id="vote-rationale")
        left_rating = gr.Radio(RATINGS, label="Left answer (1 worst, 7 best)", visible=False,
                               elem_id="rating-left")
        right_rating = gr.Radio(RATINGS, label="Right answer (1 worst, 7 best)", visible=False,
                                elem_id="rating-right")
    return ExtrasLayout(strength, rationale, left_rating, right_rating)


def judgement(studio: Studio, choice: Choice, strength: str | None, rationale: str | None,
              left_rating: int | None, right_rating: int | None) -> dict:
    """The vote's extras as `submit_and_next` takes them, checked under the project's settings: the strength only
    with left or right, both ratings or neither. InvalidInput (one line) when they cannot go with the vote."""
    rated = [r for r in (left_rating, right_rating) if r is not None]
    if len(rated) == 1:
        raise InvalidInput("rate both answers (1 worst to 7 best), or neither")
    rationale, ratings = check_note(studio.store, rationale or None, [int(r) for r in rated] or None, 2,
                                    skip=choice is Choice.SKIP)
    graded = choice in (Choice.LEFT, Choice.RIGHT) and strength not in (None, NO_STRENGTH)
    return {"strength": strength if graded else None, "rationale": rationale, "ratings": ratings}


@dataclass(frozen=True)
class Voted(Screen):
    """A vote's screen, and the strength, rationale and ratings cleared once a new pair shows (kept otherwise)."""

    strength: str
    rationale: str
    left_rating: int | None
    right_rating: int | None

    @classmethod
    def components(cls, ui) -> list:
        extras = [f.name for f in fields(ExtrasLayout)]
        return [getattr(ui.extras if f.name in extras else ui, f.name) for f in fields(cls)]


def vote_with_extras(studio: Studio, choice: Choice, annotator: str | None, pair_id: int | None,
                     vote_id: str | None, strength: str | None, rationale: str | None, left_rating: int | None,
                     right_rating: int | None, request: gr.Request) -> Voted:
    """A vote button or key: the vote with its strength, rationale and ratings (`label_screen.vote`); extras that
    cannot go with it (a required rationale missing) are one hint and nothing is stored."""
    kept = [gr.skip()] * len(fields(ExtrasLayout))
    try:
        extras = {} if unnamed(studio, annotator) else judgement(studio, choice, strength, rationale, left_rating,
                                                                  right_rating)
    except InvalidInput as exc:
        return Voted(*only_status(Screen, markdown_literal(str(exc))).values(), *kept)
    shown = vote(studio, choice, annotator, pair_id, vote_id, request, judgement=extras)
    new_pair = shown.vote_id != gr.skip()
    if new_pair and extras.get("strength"):  # "Saved: left (much better)."
        graded = f"Saved: {choice.value} ({extras['strength'].replace('_', ' ')})."
        shown = replace(shown, status=shown.status.replace(f"Saved: {choice.value}.", graded, 1))
    return Voted(*shown.values(), *([NO_STRENGTH, "", None, None] if new_pair else kept))


def note_fields(studio: Studio) -> tuple:
    """The rationale box and the ratings shown only when the project's settings ask for them."""
    modes = note_modes(studio.store)
    why = "Why (rationale, required)" if modes["rationale"] == "required" else "Why (rationale, optional)"
    rate = modes["ratings"] != "off"
    suffix = ", required" if modes["ratings"] == "required" else ""
    return (gr.update(visible=modes["rationale"] != "off", label=why),
            gr.update(visible=rate, label=f"Left answer (1 worst, 7 best{suffix})"),
            gr.update(visible=rate, label=f"Right answer (1 worst, 7 best{suffix})"))


def rationale_field(studio: Studio) -> dict:
    """The ranking panel's rationale box, shown as the settings ask (its ratings: `app.label.ranking_ratings`)."""
    return note_fields(studio)[0]


def build(studio: Studio, ui, private: dict) -> list[Refresh]:
    """Wire the vote buttons through `vote_with_extras`; the note fields follow the settings each time the tab opens."""
    inputs = [ui.annotator, ui.pair_id, ui.vote_id, ui.extras.strength, ui.extras.rationale, ui.extras.left_rating,
              ui.extras.right_rating]
    for choice, button in ui.votes.items():
        button.click(bind(vote_with_extras, studio, choice), inputs, Voted.components(ui), **private)
    return [Refresh(bind(note_fields, studio), [],
                    [ui.extras.rationale, ui.extras.left_rating, ui.extras.right_rating])]
