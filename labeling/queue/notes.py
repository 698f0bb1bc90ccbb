"""Rationales and ratings: an optional free-text reason per judgement and an optional 1-7 rating per answer.

Project settings `rationale` and `ratings`: `off` (refused), `optional` (the default) or `required` (a judgement
without one is refused; skips need none). A rationale is at most MAX_RATIONALE_CHARS of text without NUL or other
control characters but newlines and tabs; it is stored as written and shown escaped (`app.render`, the Data tab).
Ratings are whole numbers 1 (worst) to 7 (best), one per answer in the order shown ([left, right] for a pair, [A, B,
...] for a ranking).

    rationale, ratings = check_note(store, "B is vivid", [6, 3], answers=2, skip=False)
"""

from __future__ import annotations

import unicodedata

from storage import Store
from storage.errors import InvalidInput
from storage.settings import get_setting, set_setting

MAX_RATIONALE_CHARS = 2000
MODES = ("off", "optional", "required")
DEFAULT_MODE = "optional"


def note_modes(store: Store) -> dict[str, str]:
    return {key: get_setting(store, key) or DEFAULT_MODE for key in ("rationale", "ratings")}


def update_note_modes(store: Store, rationale: str | None = None, ratings: str | None = None) -> dict[str, str]:
    for key, mode in (("rationale", rationale), ("ratings", ratings)):
        if mode is not None and mode not in MODES:
            raise InvalidInput(f"the {key} setting must be one of {', '.join(MODES)}")
    for key, mode in (("rationale", rationale), ("ratings", ratings)):
        if mode is not None:
            set_setting(store, key, mode)
    return note_modes(store)


def check_rationale(rationale: object) -> str | None:
    """A clean rationale (surrounding spaces removed), or None when empty."""
    if rationale is None:
        return None
    if not isinstance(rationale, str):
        raise InvalidInput("the rationale must be text")
    rationale = rationale.strip()
    if len(rationale) > MAX_RATIONALE_CHARS:
        raise InvalidInput(f"the rationale has {len(rationale)} characters; keep it under {MAX_RATIONALE_CHARS}")
    if any(unicodedata.category(c) == "Cc" and c not in "\n\t" for c in rationale):
        raise InvalidInput("the rationale holds control characters; write plain text")
    return rationale or None


def check_ratings(ratings: object, answers: int) -> list[int] | None:
    """One whole rating 1-7 per answer (as shown), or None."""
    if ratings is None or ratings == []:
        return None
    if not isinstance(ratings, (list, tuple)) or len(ratings) != answers or not all(
            isinstance(r, int) and not isinstance(r, bool) and 1 <= r <= 7 for r in ratings):
        raise InvalidInput(f"the ratings must be {answers} whole numbers from 1 (worst) to 7 (best), one per answer "
                           "in the order shown")
    return list(ratings)


def check_note(store: Store, rationale: object, ratings: object, answers: int,
               skip: bool) -> tuple[str | None, list[int] | None]:
    """The checked (rationale, ratings) of a judgement under the project's settings."""
    rationale, ratings = check_rationale(rationale), check_ratings(ratings, answers)
    modes = note_modes(store)
    for key, value in (("rationale", rationale), ("ratings", ratings)):
        if modes[key] == "off" and value is not None:
            raise InvalidInput(f"this project takes no {key}; leave it out")
        if modes[key] == "required" and value is None and not skip:
            raise InvalidInput(f"this project asks a {key} with every judgement; add one")
    return rationale, ratings
