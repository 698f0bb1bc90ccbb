"""Graded preferences: how much better the chosen answer is, stored as the Bradley-Terry margin (Llama 2's scheme).

An annotator may add a strength to a left/right verdict: much better, better, slightly better, about the same. Each
strength maps to a margin (project setting `strength_margins`) that the label stores in `labels.margin`, so the reward
model trains on `d = r_winner - r_loser - margin` (`trainers.reward.loss`). The default values are Llama 2's "margin
small" (Touvron et al. 2023): 1, 2/3, 1/3 and 0; its "margin large" is 3, 2, 1, 0.

    margin = strength_margin(store, "slightly_better")         # 1/3 by default
    update_strength_margins(store, {"much_better": 3, "better": 2, "slightly_better": 1, "about_same": 0})
"""

from __future__ import annotations

import enum
import math

from storage import Store
from storage.errors import InvalidInput
from storage.settings import get_setting, set_setting

SETTING = "strength_margins"
MAX_MARGIN = 20.0


class Strength(str, enum.Enum):
    """How much better the chosen answer is, from the annotator's buttons or keys."""

    MUCH_BETTER = "much_better"
    BETTER = "better"
    SLIGHTLY_BETTER = "slightly_better"
    ABOUT_SAME = "about_same"  # Llama 2's "negligibly better / unsure": a winner, no margin


LLAMA2_SMALL = {Strength.MUCH_BETTER.value: 1.0, Strength.BETTER.value: 2 / 3,
                Strength.SLIGHTLY_BETTER.value: 1 / 3, Strength.ABOUT_SAME.value: 0.0}
LLAMA2_LARGE = {Strength.MUCH_BETTER.value: 3.0, Strength.BETTER.value: 2.0,
                Strength.SLIGHTLY_BETTER.value: 1.0, Strength.ABOUT_SAME.value: 0.0}


def check_strength(strength: object) -> Strength:
    try:
        return Strength(strength)
    except ValueError:
        raise InvalidInput(f"the strength must be one of {', '.join(s.value for s in Strength)} "
                           "(or left out)") from None


def strength_margins(store: Store) -> dict[str, float]:
    """The project's margin per strength (Llama 2's small margins unless set)."""
    return {**LLAMA2_SMALL, **(get_setting(store, SETTING) or {})}


def strength_margin(store: Store, strength: object) -> float:
    """The margin a verdict of `strength` stores."""
    return strength_margins(store)[check_strength(strength).value]


def update_strength_margins(store: Store, margins: object) -> dict[str, float]:
    """Check and store the margins: a value per strength, finite, 0 to MAX_MARGIN, not increasing from much better to
    about the same; InvalidInput naming the problem otherwise (nothing stored)."""
    if not isinstance(margins, dict) or set(margins) != set(LLAMA2_SMALL):
        raise InvalidInput(f"the strength margins need one number for each of {', '.join(LLAMA2_SMALL)}")
    values = [margins[s.value] for s in Strength]
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
           or not 0 <= v <= MAX_MARGIN for v in values):
        raise InvalidInput(f"each strength margin must be a number from 0 to {MAX_MARGIN:g}")
    if any(a < b for a, b in zip(values, values[1:], strict=False)):
        raise InvalidInput("the strength margins must not grow from much_better to about_same")
    set_setting(store, SETTING, {s.value: float(v) for s, v in zip(Strength, values, strict=True)})
    return strength_margins(store)
