"""The ranking panel's ratings: a 1-7 rating (1 worst, 7 best) for each answer shown, A to F, sent with the order.

The radios show for the K answers of the ranking on screen when the project's `ratings` setting asks for them
(`optional` or `required`), hidden when `off`, and clear for each ranking shown. Every answer rated or none: a
partial set (or a required one missing) refuses the order with one line, nothing stored, the ranking and the fields
kept (`labeling.queue.notes` checks the rest, as for a pair's ratings).
"""

from __future__ import annotations

import gradio as gr

from app.label.judgement_extras import RATINGS
from labeling.queue.notes import note_modes
from labeling.queue.ranking import LETTERS
from storage.errors import InvalidInput


def layout() -> tuple[gr.Radio, ...]:
    """A hidden rating radio per possible answer (A to F), in one row."""
    with gr.Row(elem_id="rank-ratings"):
        return tuple(gr.Radio(RATINGS, label=f"Answer {letter} (1 worst, 7 best)", visible=False,
                              elem_id=f"rank-rating-{letter}", min_width=120) for letter in LETTERS)


def rating_fields(studio, k: int) -> tuple[dict, ...]:
    """The radios for a ranking of `k` answers (0: none on screen): the first `k` shown as the settings ask, every one
    cleared."""
    mode = note_modes(studio.store)["ratings"]
    suffix = ", required" if mode == "required" else ""
    return tuple(gr.update(visible=mode != "off" and i < k, value=None, label=f"Answer {letter} (1 worst, 7 best"
                           f"{suffix})") for i, letter in enumerate(LETTERS))


def given_ratings(values: tuple, k: int) -> list[int] | None:
    """The ratings of the `k` answers on screen, in the order shown; None when none is rated. InvalidInput (one line)
    when some are rated and not all."""
    rated = [value for value in values[:k] if value is not None]
    if not rated:
        return None
    if len(rated) < k:
        missing = ", ".join(LETTERS[i] for i, value in enumerate(values[:k]) if value is None)
        raise InvalidInput(f"rate every answer (1 worst to 7 best), or none; {missing} not rated")
    return [int(value) for value in rated]
