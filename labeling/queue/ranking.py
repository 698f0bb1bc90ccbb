"""Rankings of K answers: the verdict's notation, its comparisons, and the ranking queue's rules.

An annotator sees K answers of one prompt as A, B, C, ... (the stored order) and orders them best to worst. The order
is written as letters, best first, with `=` between two tied neighbours: `"BA=CD"` is B best, A and C tied, D worst
(spaces and commas are ignored). `all_bad` and `skip` are verdicts of their own.

A ranked verdict gives every one of its C(K,2) comparisons (InstructGPT): for answers a and b, p = P(a preferred) is
1 when a's tier comes first, 0 when b's does and 0.5 when they are tied. "All bad" trains every comparison as a tie
(as "both bad" does on a pair, unless `both_bad_as_tie` is off); a skip never trains.

    shown = next_ranking(store, "alice")                 # reserves a ranking (or gives hers back)
    label_id = submit_ranking(store, "alice", shown.ranking_id, "BA=CD", vote_id=str(uuid.uuid4()))
    shown = undo_ranking(store, "alice")                 # reverts it and shows the ranking again
"""

from __future__ import annotations

import string
import time
from dataclasses import dataclass
from itertools import combinations

from labeling.queue.annotation import check_annotator, check_pair_id, check_vote_id, queue_settings
from labeling.queue.gold_queue import gold_ranking_turn
from labeling.queue.notes import check_note
from storage import Store, rankings
from storage.errors import InvalidInput
from storage.gold_rankings import holds_ranking_reservation
from storage.labels import LabeledPair
from storage.notes import add_ranking_note
from storage.rankings import ALL_BAD, RANKED, SKIP, LabeledRanking
from storage.types import LoopLabels, Outcome

MIN_K, MAX_K = 2, 6
LETTERS = string.ascii_uppercase[:MAX_K]


@dataclass(frozen=True)
class ShownRanking:
    """What an annotator sees: the prompt and the answers, A first; no generation or policy ids."""

    ranking_id: int
    prompt: str
    responses: tuple[str, ...]
    messages: list[dict] | None = None

    @property
    def letters(self) -> str:
        return LETTERS[:len(self.responses)]


def parse_order(order: object, k: int) -> tuple[str, list[list[int]] | None]:
    """(outcome, tiers) from an annotator's order: letters best first, `=` between tied neighbours, every one of the
    K letters once; or `all_bad`, or `skip`. InvalidInput names what is wrong."""
    if not isinstance(order, str):
        raise InvalidInput("the order must be text: letters from best to worst, such as BA=CD")
    if order.strip().lower() in (ALL_BAD, SKIP):
        return order.strip().lower(), None
    letters = LETTERS[:k]
    text = "".join(c for c in order.upper() if c not in " ,")
    tiers, tier, tied = [], [], False
    for c in text:
        if c == "=":
            if not tier or tied:
                raise InvalidInput("'=' goes between two letters, such as A=B")
            tied = True
            continue
        if c not in letters:
            raise InvalidInput(f"the order holds {c[:1]!r}; use the letters {letters} (best first), '=' for a tie, "
                               "or all_bad or skip")
        if tier and not tied:
            tiers.append(tier)
            tier = []
        tier.append(letters.index(c))
        tied = False
    if tied:
        raise InvalidInput("'=' goes between two letters, such as A=B")
    if tier:
        tiers.append(tier)
    used = [p for t in tiers for p in t]
    if sorted(used) != list(range(k)):
        missing = "".join(letters[p] for p in range(k) if p not in used)
        twice = "".join(sorted({letters[p] for p in used if used.count(p) > 1}))
        raise InvalidInput(f"the order must name each of {letters} once" + (f"; missing {missing}" if missing else "")
                           + (f"; twice {twice}" if twice else ""))
    return RANKED, tiers


def order_text(tiers: list[list[int]]) -> str:
    """The notation of `tiers`: `[[1], [0, 2], [3]]` is `"BA=CD"`."""
    return "".join("=".join(LETTERS[p] for p in tier) for tier in tiers)


def comparisons(tiers: list[list[int]]) -> list[tuple[int, int, float]]:
    """Every comparison of a ranked verdict, (a, b, p = P(a preferred)) for positions a < b: C(K,2) of them."""
    tier_of = {p: i for i, tier in enumerate(tiers) for p in tier}
    return [(a, b, 1.0 if tier_of[a] < tier_of[b] else 0.0 if tier_of[a] > tier_of[b] else 0.5)
            for a, b in combinations(sorted(tier_of), 2)]


def verdict_comparisons(verdict: LabeledRanking, all_bad_as_tie: bool = True) -> list[tuple[int, int, float]]:
    """A verdict's comparisons that train: a ranking's, every pair at p = 0.5 for "all bad" (unless
    `all_bad_as_tie` is off), none for a skip."""
    if verdict.outcome == RANKED:
        return comparisons(verdict.tiers)
    if verdict.outcome == ALL_BAD and all_bad_as_tie:
        return [(a, b, 0.5) for a, b in combinations(range(len(verdict.responses)), 2)]
    return []


def comparison_pairs(verdict: LabeledRanking) -> list[LabeledPair]:
    """A verdict's comparisons as labelled pairs (DPO and the export see them so): `label_id` is the ranking
    verdict's, `pair_id` None; ties are `tie`, an "all bad" verdict's pairs `both_bad`."""
    if verdict.outcome == SKIP:
        return []
    outcomes = {1.0: Outcome.FIRST, 0.0: Outcome.SECOND, 0.5: Outcome.TIE}
    return [LabeledPair(verdict.label_id, None, verdict.annotator,
                        Outcome.BOTH_BAD if verdict.outcome == ALL_BAD else outcomes[p], verdict.prompt,
                        verdict.responses[a], verdict.responses[b], None, verdict.prompt_messages,
                        verdict.prompt_excluded)
            for a, b, p in verdict_comparisons(verdict)]


def ranking_comparison_pairs(store: Store, loop: LoopLabels | None = None) -> list[LabeledPair]:
    """Every current ranking verdict's comparisons that train (with `loop`, a loop job's round's:
    `storage.types.LoopLabels`), as labelled pairs, in verdict order."""
    return [pair for verdict in rankings.ranking_verdicts(store, training=True, loop=loop)
            for pair in comparison_pairs(verdict)]


# ---- the ranking queue --------------------------------------------------------------------------------------------

def next_ranking(store: Store, annotator: str, job_id: int | None = None) -> ShownRanking | None:
    """The annotator's reserved ranking, or the next open one reserved for them now (a gold ranking on their turn,
    `labeling.queue.gold_queue`); None when none is open. With `job_id`, only that loop job's rankings and no gold (a
    loop's synthetic annotator labels its own items only)."""
    annotator = check_annotator(annotator)
    settings = queue_settings(store)
    now, ttl_s = time.time(), settings.reservation_ttl_s
    if job_id is not None:
        return _shown(rankings.reserve_next_ranking(store, annotator, settings.overlap, ttl_s, now, job_id))
    reserved = gold_ranking_turn(store, annotator, ttl_s, now) or rankings.reserve_next_ranking(
        store, annotator, settings.overlap, ttl_s, now)
    return _shown(reserved or gold_ranking_turn(store, annotator, ttl_s, now, queue_empty=True))


def submit_ranking(store: Store, annotator: str, ranking_id: object, order: object, vote_id: object,
                   decision_ms: int | None = None, rationale: str | None = None,
                   ratings: list[int] | None = None) -> int:
    """Store a verdict on the ranking reserved for the annotator (durably) and return its label id: `order` is the
    letters best first (`=` for a tie), `all_bad` or `skip`; `rationale` and `ratings` (1-7, in the order shown) its
    note (`labeling.queue.notes`). The same `vote_id` again stores nothing."""
    annotator = check_annotator(annotator)
    ranking_id = check_pair_id(ranking_id)
    vote_id = check_vote_id(vote_id)
    if decision_ms is not None and (not isinstance(decision_ms, int) or isinstance(decision_ms, bool)
                                    or decision_ms < 0):
        raise InvalidInput("the decision time must be a whole number of milliseconds, 0 or more")
    size = rankings.ranking_size(store, ranking_id)
    outcome, tiers = parse_order(order, size)
    rationale, ratings = check_note(store, rationale, ratings, size, skip=outcome == SKIP)
    with store.write() as db:
        label_id = rankings.submit_ranking(store, annotator, ranking_id, outcome, tiers, vote_id,
                                           queue_settings(store).overlap, time.time(), decision_ms)
        add_ranking_note(db, label_id, rationale, ratings)
    return label_id


def undo_ranking(store: Store, annotator: str) -> ShownRanking | None:
    """Revert the annotator's latest ranking verdict and show that ranking again (or the next one)."""
    annotator = check_annotator(annotator)
    settings = queue_settings(store)
    reserved = rankings.undo_last_ranking(store, annotator, settings.overlap, settings.reservation_ttl_s, time.time())
    return _shown(reserved) if reserved else next_ranking(store, annotator)


def open_rankings(store: Store, annotator: str) -> int:
    return rankings.open_rankings(store, check_annotator(annotator), queue_settings(store).overlap)


def rankings_first(store: Store, annotator: str) -> bool:
    """Does the Label tab serve `annotator` a ranking before any pair: they hold one, or a queued ranking still wants
    their verdict (a loop with `rank_k` 3 to 6 waits for it)? Pairs come after, as the people's queue has them."""
    annotator = check_annotator(annotator)
    return holds_ranking_reservation(store, annotator, time.time()) or open_rankings(store, annotator) > 0


def _shown(reserved: rankings.ReservedRanking | None) -> ShownRanking | None:
    if reserved is None:
        return None
    return ShownRanking(reserved.ranking_id, reserved.prompt, reserved.responses, reserved.messages)
