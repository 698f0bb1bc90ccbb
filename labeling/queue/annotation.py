"""The label queue's rules: who gets which pair, how an on-screen choice becomes an outcome, undo, progress.

    shown = next_pair(store, "alice")          # reserves a pair for alice (or gives hers back)
    label_id = submit_label(store, "alice", shown.pair_id, "left", vote_id=str(uuid.uuid4()))
    shown = undo_label(store, "alice")         # reverts that label and shows its pair again
    label_id, shown = submit_and_next(store, "alice", shown.pair_id, "tie", vote_id=str(uuid.uuid4()))

Project settings (storage.settings): `overlap` distinct annotators per pair, `reservation_ttl_s` seconds a handed-out
pair stays reserved, `guidelines` (markdown). Which generation is shown on the left is a coin flip for each new
reservation; it is stored with the reservation and then with the label (position-bias audits). Everything the
user can get wrong raises `InvalidInput` without echoing the bad value back at length.
"""

from __future__ import annotations

import datetime
import enum
import random
import time
import unicodedata
from dataclasses import dataclass

from labeling.queue.gold_queue import gold_turn
from labeling.queue.notes import check_note
from labeling.queue.strength import strength_margin
from storage import Store, votes
from storage.errors import InvalidInput
from storage.notes import add_pair_note
from storage.settings import get_setting, set_setting
from storage.types import Outcome

MAX_NAME_CHARS = 64
MAX_VOTE_ID_CHARS = 128
MAX_GUIDELINES_CHARS = 20_000
MAX_TTL_S = 7 * 24 * 3600
# Unicode categories refused in names and vote ids: controls, format characters, separators of lines/paragraphs,
# surrogates, private use and unassigned code points.
_INVISIBLE = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}


class Choice(str, enum.Enum):
    """What the annotator picked, relative to the screen."""

    LEFT = "left"
    RIGHT = "right"
    TIE = "tie"
    BOTH_BAD = "both_bad"
    SKIP = "skip"

    def outcome(self, first_id: int, left_id: int) -> Outcome:
        """The stored outcome (relative to the pair's first/second) when generation `left_id` was shown left."""
        if self is Choice.LEFT:
            return Outcome.FIRST if left_id == first_id else Outcome.SECOND
        if self is Choice.RIGHT:
            return Outcome.SECOND if left_id == first_id else Outcome.FIRST
        return Outcome(self.value)


@dataclass(frozen=True)
class ShownPair:
    """What an annotator sees: no generation ids, no policy identity. `prompt` is display text (a conversation's
    plain-text form); `messages` are the conversation's turns, None for a plain-text prompt."""

    pair_id: int
    prompt: str
    left: str
    right: str
    messages: list[dict] | None = None


@dataclass(frozen=True)
class Progress:
    labeled_today: int
    left_in_queue: int


@dataclass(frozen=True)
class QueueSettings:
    guidelines: str
    overlap: int
    reservation_ttl_s: float


def _printable(value: str) -> bool:
    return not any(unicodedata.category(c) in _INVISIBLE for c in value)


def normal_name(name: str) -> str:
    """A name as the studio knows it, wherever it is read (auth file, login, typed, stored): surrounding spaces
    removed, NFC-normalised, so `zoé` typed as one character or as e plus a combining accent is one person."""
    return unicodedata.normalize("NFC", name.strip())


def check_name(name: object, what: str = "annotator name") -> str:
    """A clean name (`normal_name`): 1-64 printable characters."""
    if not isinstance(name, str) or not name.strip():
        raise InvalidInput(f"the {what} is empty; type one first")
    name = normal_name(name)
    if len(name) > MAX_NAME_CHARS:
        raise InvalidInput(f"the {what} has {len(name)} characters; use at most {MAX_NAME_CHARS}")
    if not _printable(name):
        raise InvalidInput(f"the {what} contains control or invisible characters; use letters, digits, spaces "
                           "and punctuation")
    return name


def check_annotator(name: object) -> str:
    return check_name(name, "annotator name")


def check_vote_id(vote_id: object) -> str:
    if not isinstance(vote_id, str) or not vote_id or len(vote_id) > MAX_VOTE_ID_CHARS or not _printable(vote_id):
        raise InvalidInput(f"the vote id must be 1-{MAX_VOTE_ID_CHARS} printable characters (a UUID is ideal), "
                           "new for each vote")
    return vote_id


def check_pair_id(pair_id: object) -> int:
    if isinstance(pair_id, float) and pair_id.is_integer():
        pair_id = int(pair_id)
    if isinstance(pair_id, str) and pair_id.strip().isdigit():
        pair_id = int(pair_id)
    if not isinstance(pair_id, int) or isinstance(pair_id, bool) or pair_id < 1:
        raise InvalidInput("the pair id must be a positive whole number, as returned by next_pair")
    return pair_id


def check_choice(choice: object) -> Choice:
    try:
        return Choice(choice)
    except ValueError:
        raise InvalidInput(f"the choice must be one of {', '.join(c.value for c in Choice)}") from None


def queue_settings(store: Store) -> QueueSettings:
    return QueueSettings(str(get_setting(store, "guidelines")), int(get_setting(store, "overlap")),
                         float(get_setting(store, "reservation_ttl_s")))


def update_queue_settings(store: Store, guidelines: str | None = None, overlap: int | None = None,
                          reservation_ttl_s: float | None = None) -> QueueSettings:
    """Check and store the settings given (the others stay); all are checked before any is stored."""
    if guidelines is not None:
        check_guidelines(guidelines)
    if overlap is not None and not (_number(overlap) and float(overlap).is_integer() and 1 <= overlap <= 100):
        raise InvalidInput("overlap (annotators per pair) must be a whole number from 1 to 100")
    if reservation_ttl_s is not None and not (_number(reservation_ttl_s) and 10 <= reservation_ttl_s <= MAX_TTL_S):
        raise InvalidInput(f"the reservation time must be between 10 and {MAX_TTL_S} seconds")
    with store.write():
        for key, value in (("guidelines", guidelines), ("overlap", None if overlap is None else int(overlap)),
                           ("reservation_ttl_s", None if reservation_ttl_s is None else float(reservation_ttl_s))):
            if value is not None:
                set_setting(store, key, value)
    return queue_settings(store)


def check_guidelines(guidelines: str) -> None:
    """Guidelines are markdown of at most MAX_GUIDELINES_CHARS characters, without NUL (InvalidInput otherwise)."""
    if len(guidelines) > MAX_GUIDELINES_CHARS:
        raise InvalidInput(f"the guidelines have {len(guidelines)} characters; keep them under {MAX_GUIDELINES_CHARS}")
    if "\x00" in guidelines:
        raise InvalidInput("the guidelines hold a NUL character (\\x00), which is no text; remove it")


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def next_pair(store: Store, annotator: str, rng: random.Random | None = None,
              selector: str | None = None, job_id: int | None = None) -> ShownPair | None:
    """The annotator's reserved pair, or the next open pair reserved for them now; None when the queue is empty.
    `selector` serves only pairs of that selector (the loop's oracle judging the win-rate pairs it queued); `job_id`
    only the pairs that loop job queued, and no gold (a loop's synthetic annotator labels its own items only)."""
    annotator = check_annotator(annotator)
    settings = queue_settings(store)
    first_on_left, now = (rng or random).random() < 0.5, time.time()
    gold = selector is None and job_id is None  # gold pairs come among a person's others (labeling.queue.gold_queue)
    reserved = gold_turn(store, annotator, first_on_left, settings.reservation_ttl_s, now) if gold else None
    reserved = reserved or votes.reserve_next_pair(store, annotator, settings.overlap, settings.reservation_ttl_s,
                                                   first_on_left, now, selector, job_id)
    if reserved is None and gold:
        reserved = gold_turn(store, annotator, first_on_left, settings.reservation_ttl_s, now, queue_empty=True)
    return _shown(reserved)


def submit_label(store: Store, annotator: str, pair_id: int, choice: str, vote_id: str,
                 decision_ms: int | None = None, strength: str | None = None, rationale: str | None = None,
                 ratings: list[int] | None = None) -> int:
    """Store a vote on a pair reserved for the annotator, durably, before returning its label id.

    `choice` is left|right|tie|both_bad|skip as shown to the annotator; `strength` (left or right only) how much
    better, stored as the label's margin (`labeling.queue.strength`); `rationale` and `ratings` ([left, right], 1-7) the
    judgement's note (`labeling.queue.notes`). The same `vote_id` sent again stores nothing and returns the same label
    id.
    """
    annotator = check_annotator(annotator)
    pair_id = check_pair_id(pair_id)
    picked = check_choice(choice)
    vote_id = check_vote_id(vote_id)
    whole = isinstance(decision_ms, int) and not isinstance(decision_ms, bool)
    if decision_ms is not None and (not whole or decision_ms < 0):
        raise InvalidInput("the decision time must be a whole number of milliseconds, 0 or more")
    margin = None
    if strength is not None:
        if picked not in (Choice.LEFT, Choice.RIGHT):
            raise InvalidInput("a strength goes with a left or right label only; leave it out for "
                               f"{picked.value.replace('_', ' ')}")
        margin = strength_margin(store, strength)
    rationale, ratings = check_note(store, rationale, ratings, 2, skip=picked is Choice.SKIP)
    with store.write() as db:
        label_id = votes.submit_vote(store, annotator, pair_id, picked.outcome, vote_id,
                                     queue_settings(store).overlap, time.time(), decision_ms, margin)
        add_pair_note(db, label_id, rationale, ratings)
    return label_id


def submit_and_next(store: Store, annotator: str, pair_id: int, choice: str, vote_id: str,
                    decision_ms: int | None = None, rng: random.Random | None = None,
                    strength: str | None = None, rationale: str | None = None,
                    ratings: list[int] | None = None, then_pair: bool = True) -> tuple[int, ShownPair | None]:
    """`submit_label` then `next_pair` in one transaction (one disk sync): the next pair comes with the
    acknowledgement (none, and none reserved, without `then_pair`). Nothing is stored when either fails."""
    with store.write():
        label_id = submit_label(store, annotator, pair_id, choice, vote_id, decision_ms, strength, rationale, ratings)
        return label_id, next_pair(store, annotator, rng) if then_pair else None


def undo_label(store: Store, annotator: str) -> ShownPair | None:
    """Revert the annotator's latest label and show its pair again (same sides); if others filled that pair
    meanwhile, show the next pair. Raises Conflict when there is nothing to undo."""
    annotator = check_annotator(annotator)
    settings = queue_settings(store)
    reserved = votes.undo_last(store, annotator, settings.overlap, settings.reservation_ttl_s, time.time())
    return _shown(reserved) if reserved else next_pair(store, annotator)


def release_pair(store: Store, annotator: str) -> None:
    """Give back the pair reserved for `annotator`, so others may take it at once (a name changed mid-session)."""
    votes.release_reservations(store, check_annotator(annotator))


def progress(store: Store, annotator: str, now: float | None = None) -> Progress:
    """Labels given since local midnight, and open pairs this annotator could still label."""
    annotator = check_annotator(annotator)
    midnight = datetime.datetime.fromtimestamp(time.time() if now is None else now).replace(
        hour=0, minute=0, second=0, microsecond=0).timestamp()
    return Progress(votes.labeled_since(store, annotator, midnight),
                    votes.open_pairs(store, annotator, queue_settings(store).overlap))


def _shown(reserved: votes.Reserved | None) -> ShownPair | None:
    if reserved is None:
        return None
    return ShownPair(reserved.pair_id, reserved.prompt, reserved.left, reserved.right, reserved.messages)
