"""Gold items, the rules over them: import a gold file, mark a label's pair (or a verdict's ranking) as gold, the
gold settings, lift a flag.

    result = import_gold_file(store, "gold.jsonl", source="gold")   # pairs in any preference format, chosen first,
                                                                     # or rankings (labeling.gold.gold_rankings)
    mark_gold(store, label_id)                                       # that label's outcome becomes the answer
    mark_gold_ranking(store, ranking_label_id)                       # that verdict's order becomes the gold order
    update_gold_settings(store, gold_min_accuracy=0.8, gold_exclude_flagged=True)
    [score.line() for score in gold_scores(store)]                   # "bob: 4/10 gold (40%) flagged"
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from labeling.gold.gold_rankings import holds_rankings, iter_gold_rankings
from labeling.queue.annotation import check_name
from labeling.transfer.preference_import import check_preference_file, iter_preferences
from storage import Store
from storage.errors import InvalidInput
from storage.gold import GOLD_DEFAULTS, GoldScore, gold_scores, gold_setting
from storage.gold_items import import_gold_pairs, mark_gold
from storage.gold_rankings import import_gold_rankings, mark_gold_ranking
from storage.settings import set_setting

__all__ = ["GoldImport", "GoldScore", "gold_scores", "import_gold_file", "lift_flag", "mark_gold",
           "mark_gold_ranking", "update_gold_settings"]


@dataclass(frozen=True)
class GoldImport:
    added: int
    known: int
    kind: str = "pairs"  # or rankings

    def summary(self) -> str:
        return f"Imported {self.added} gold {self.kind} ({self.known} were gold already)."


def import_gold_file(store: Store, path: str | Path, source: str = "gold") -> GoldImport:
    """Every row of a preference file (chosen first) as a gold pair, or, when its first row has `responses`, every
    row of a rankings file as a gold ranking; all or none, a bad row fails naming its line."""
    source = check_name(source, "source name")
    path = check_preference_file(path)
    if holds_rankings(path):
        return GoldImport(*import_gold_rankings(store, iter_gold_rankings(path), source), kind="rankings")
    added, known = import_gold_pairs(store, iter_preferences(path), source)
    return GoldImport(added, known)


def update_gold_settings(store: Store, **values) -> dict:
    """Check and store gold settings (`GOLD_DEFAULTS`' keys but `gold_lifted`); all are checked before any is stored.
    Returns every gold setting."""
    unknown = sorted(set(values) - set(GOLD_DEFAULTS) | ({"gold_lifted"} & set(values)))
    if unknown:
        raise InvalidInput(f"unknown gold setting {unknown[0]!r}; known: gold_every, gold_min_accuracy, "
                           "gold_min_judgements, gold_exclude_flagged")
    checks = {
        "gold_every": lambda v: isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 1000,
        "gold_min_accuracy": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
        and math.isfinite(v) and 0 <= v <= 1,
        "gold_min_judgements": lambda v: isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 10_000,
        "gold_exclude_flagged": lambda v: isinstance(v, bool),
    }
    meaning = {"gold_every": "a whole number from 1 to 1000", "gold_min_accuracy": "a number from 0 to 1",
               "gold_min_judgements": "a whole number from 1 to 10000", "gold_exclude_flagged": "true or false"}
    for key, value in values.items():
        if not checks[key](value):
            raise InvalidInput(f"{key} must be {meaning[key]}")
    with store.write():
        for key, value in values.items():
            set_setting(store, key, value)
    return {key: gold_setting(store, key) for key in GOLD_DEFAULTS}


def lift_flag(store: Store, annotator: str, lifted: bool = True) -> list[str]:
    """Lift an annotator's gold flag (their labels train again), or with `lifted` False put it back; returns the
    annotators whose flag is lifted."""
    annotator = check_name(annotator)
    names = set(gold_setting(store, "gold_lifted"))
    names = names | {annotator} if lifted else names - {annotator}
    set_setting(store, "gold_lifted", sorted(names))
    return sorted(names)
