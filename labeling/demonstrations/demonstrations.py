"""Demonstrations written in the Label tab: a better answer to the prompt of the pair on screen, written from nothing or
edited from one of its two responses, checked as every text is (`labeling.demonstrations.demonstration_formats`: not
empty, no NUL, within the size limit), stored with its author, pair, the response it was edited from and the seconds
spent (`storage.demonstrations`). With `record_preferences` the answer is also recorded as preferred to each response
shown (labels by `edits:<author>` on already-labeled pairs, as a preference import stores them: they train the reward
model and DPO, never enter the queue); undo takes the demonstration and those labels back.

    written = write_demonstration(store, "ada", pair_id, "A better answer.", edited_from="left", seconds=42.0)
    undo_demonstration(store, "ada")
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from labeling.demonstrations.demonstration_formats import check_demonstration_text
from labeling.queue.annotation import check_annotator, check_pair_id, next_pair
from storage import Store
from storage.demonstrations import (
    LABEL_TAB,
    Demonstration,
    NewDemonstration,
    add_demonstration,
    undo_last_demonstration,
)
from storage.errors import InvalidInput
from storage.generations import get_generations
from storage.labels import undo_votes
from storage.pairs import get_pair
from storage.preferences import Preference, import_preferences, preference_vote_id
from storage.prompts import get_prompt
from storage.settings import get_setting
from storage.types import Prompt

SIDES = ("left", "right")
PREFERENCES_SETTING = "demonstration_preferences"  # project default: an edit also records preferences


@dataclass(frozen=True)
class WrittenDemonstration:
    id: int
    preferences: int  # labels recorded beside it (its answer preferred to a response)


def records_preferences(store: Store) -> bool:
    """The project's default for whether an edit also records preferences (off unless set)."""
    return bool(get_setting(store, PREFERENCES_SETTING))


def shown_texts(store: Store, annotator: str, pair_id: int) -> dict[str, str]:
    """The left and right responses of the pair reserved for `annotator`, as on their screen; InvalidInput when the
    pair on screen is no longer theirs."""
    shown = next_pair(store, check_annotator(annotator))
    if shown is None or shown.pair_id != pair_id:
        raise InvalidInput(f"pair {pair_id} is no longer reserved for you; write the answer for the pair on screen")
    return {"left": shown.left, "right": shown.right}


def edits_source(author: str) -> str:
    """The source (and annotator) of the labels an author's demonstrations record."""
    return f"edits:{author}"


def preferences_over(prompt: Prompt, text: str, shown: list[str]) -> list[Preference]:
    """The preference rows of a demonstration: its answer over each different response shown."""
    return [Preference(prompt.text, text, other, messages=prompt.messages) for other in shown if other != text]


def record_preferences_over(store: Store, author: str, prompt: Prompt, text: str, shown: list[str],
                            now: float) -> int:
    """Record `author`'s demonstration `text` as preferred to each different response shown (labels by
    `edits:<author>`); returns how many were added."""
    return import_preferences(store, preferences_over(prompt, text, shown), edits_source(author), now).added


def _preferences(store: Store, pair_id: int, text: str) -> list[Preference]:
    """The preference rows of a demonstration on a pair: its answer over each different response."""
    pair = get_pair(store, pair_id)
    texts = [g.text for g in get_generations(store, [pair.first_id, pair.second_id]).values()]
    return preferences_over(get_prompt(store, pair.prompt_id), text, texts)


def write_demonstration(store: Store, annotator: str, pair_id: int, text: str, edited_from: str | None = None,
                        seconds: float | None = None, record_preferences: bool = False) -> WrittenDemonstration:
    """Store the annotator's better answer to pair `pair_id`'s prompt (edited from its `left` or `right` response as
    shown to them, or written from nothing: None), all in one transaction. The pair must be the one reserved for them
    (on their screen), whether they edit or write from nothing; the same answer to one prompt is stored once."""
    annotator = check_annotator(annotator)
    check_demonstration_text(text, "your answer")
    if edited_from is not None and edited_from not in SIDES:
        raise InvalidInput(f"edited_from must be left, right or empty, not {str(edited_from)[:20]!r}")
    pair_id = check_pair_id(pair_id)
    shown = shown_texts(store, annotator, pair_id)
    pair = get_pair(store, pair_id)
    generation_id = None
    if edited_from is not None:
        texts = get_generations(store, [pair.first_id, pair.second_id])
        generation_id = next(i for i in (pair.first_id, pair.second_id) if texts[i].text == shown[edited_from])
    now = time.time()
    with store.write():
        demo_id = add_demonstration(store, NewDemonstration(pair.prompt_id, text, annotator, LABEL_TAB, pair_id,
                                                            generation_id, seconds), now)
        added = 0
        if record_preferences:
            added = import_preferences(store, _preferences(store, pair_id, text), edits_source(annotator), now).added
    return WrittenDemonstration(demo_id, added)


def undo_demonstration(store: Store, annotator: str) -> Demonstration:
    """Take back the annotator's newest demonstration (kept, flagged undone) and the preferences it recorded."""
    annotator = check_annotator(annotator)
    with store.write():
        demo = undo_last_demonstration(store, annotator)
        if demo.pair_id is not None:
            undo_votes(store, [preference_vote_id(edits_source(annotator), row)
                               for row in _preferences(store, demo.pair_id, demo.text)])
    return demo
