"""The judge's suggestion on the Label tab: a judge model's verdict on the pair (pre-labelled with `label --annotator
judge --suggest-only`, or any judge's), said in the annotator's screen sides. By default it is shown after the
annotator votes, so as not to anchor them; the project setting `judge_suggestions` (set in the Data tab's judges
section) shows it before the vote, or never.

    note = after_vote(store, "alice", pair_id)      # "Judge qwen said **left** (confidence 90%)." or ""
"""

from __future__ import annotations

from enum import StrEnum

from app.context import markdown_literal
from storage import Store
from storage.errors import InvalidInput
from storage.judge_verdicts import shown_verdict
from storage.settings import get_setting, set_setting
from storage.types import Outcome

SETTING = "judge_suggestions"


class SuggestionTiming(StrEnum):
    """When the Label tab shows a judge's verdict on a pair."""

    AFTER = "after"  # after the annotator's vote (the default: no anchoring)
    BEFORE = "before"
    NEVER = "never"


def timing(store: Store) -> SuggestionTiming:
    value = get_setting(store, SETTING)
    return SuggestionTiming(value) if value in {t.value for t in SuggestionTiming} else SuggestionTiming.AFTER


def set_timing(store: Store, value: str) -> SuggestionTiming:
    if value not in {t.value for t in SuggestionTiming}:
        raise InvalidInput(f"judge suggestions are shown after, before or never, got {value!r}")
    set_setting(store, SETTING, value)
    return SuggestionTiming(value)


def suggestion(store: Store, annotator: str, pair_id: int, when: str) -> str:
    """`Judge qwen said **left** (confidence 90%).` for the pair as `annotator` sees (saw) it; "" without a
    verdict."""
    found = shown_verdict(store, pair_id, annotator)
    if found is None:
        return ""
    verdict, first_left = found
    side = ("a tie" if verdict.outcome is Outcome.TIE else
            "**left**" if (verdict.outcome is Outcome.FIRST) == first_left else "**right**")
    sure = "" if verdict.confidence is None else f" (confidence {verdict.confidence:.0%})"
    return f" Judge {markdown_literal(verdict.judge)} {when} {side}{sure}."


def after_vote(store: Store, annotator: str, pair_id: int) -> str:
    """The note after a vote on `pair_id` (the default timing), else ""."""
    if timing(store) is not SuggestionTiming.AFTER:
        return ""
    return suggestion(store, annotator, pair_id, "said")


def before_vote(store: Store, annotator: str, pair_id: int | None) -> str:
    """The note beside a pair on screen, when the project shows suggestions before the vote, else ""."""
    if pair_id is None or timing(store) is not SuggestionTiming.BEFORE:
        return ""
    return suggestion(store, annotator, pair_id, "suggests")
