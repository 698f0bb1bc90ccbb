"""When the label queue serves a gold pair: an annotator's every `gold_every`-th pair, and whenever nothing else is
open for them, while a gold pair they have not labelled is left. A gold pair looks like any other (no mark, the
same coin for its sides) and is served to every annotator, whatever the overlap (see `storage.gold`). The ranking
queue serves gold rankings by the same rule, counting the annotator's rankings."""

from __future__ import annotations

from storage import Store
from storage.gold import gold_setting
from storage.gold_items import count_gold, holds_reservation, labels_given, reserve_gold_pair
from storage.gold_rankings import count_gold_rankings, holds_ranking_reservation, rankings_given, reserve_gold_ranking
from storage.rankings import ReservedRanking
from storage.votes import Reserved


def gold_turn(store: Store, annotator: str, first_on_left: bool, ttl_s: float, now: float,
              queue_empty: bool = False) -> Reserved | None:
    """A gold pair reserved for `annotator` when it is their turn for one (or `queue_empty`), else None. A live
    reservation of theirs always comes back first, so none is made then."""
    if not count_gold(store) or holds_reservation(store, annotator, now):
        return None
    if not (queue_empty or gold_due(store, labels_given(store, annotator))):
        return None
    return reserve_gold_pair(store, annotator, first_on_left, ttl_s, now)


def gold_ranking_turn(store: Store, annotator: str, ttl_s: float, now: float,
                      queue_empty: bool = False) -> ReservedRanking | None:
    """A gold ranking reserved for `annotator` when it is their turn for one (their every `gold_every`-th ranking, or
    `queue_empty`), else None; none while they hold a live ranking reservation."""
    if not count_gold_rankings(store) or holds_ranking_reservation(store, annotator, now):
        return None
    if not (queue_empty or gold_due(store, rankings_given(store, annotator))):
        return None
    return reserve_gold_ranking(store, annotator, ttl_s, now)


def gold_due(store: Store, given: int) -> bool:
    """Is the next judgement of an annotator who has given `given` (pairs, or rankings) their `gold_every`-th?"""
    return (given + 1) % max(1, int(gold_setting(store, "gold_every"))) == 0
