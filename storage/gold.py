"""Gold items: pairs with a known answer and rankings with a known order, served to every annotator among their other
pairs (rankings), that measure each annotator's accuracy. Their judgements never train
(`storage.labels.training_labels` and `storage.rankings.ranking_verdicts(training=True)` leave them out) and never
count toward a round's labels (`storage.rounds.round_label_count`, `storage.rankings.round_ranking_count`).

An annotator's gold accuracy counts gold comparisons: a gold pair is one (right when the outcome is the answer); a
gold ranking is each pair of answers its gold order puts in different tiers (its ties are no comparison), right when
the annotator put the same answer first (a tie, or "all bad", of two answers the gold order separates is wrong). A
skip counts nothing.

A gold pair is imported (`storage.gold_items.import_gold_pairs`: a prompt, two responses and a pair of selector
`imported`, so the ordinary queue never serves it; a new prompt is stored excluded, so no loop samples it) or marked
from a labelled pair (`gold_items.mark_gold`: that label's outcome is the answer). The gold settings
(`GOLD_DEFAULTS`) say how often a gold pair comes, below which accuracy (over at least how many gold judgements) an
annotator is flagged, and whether flagged annotators' labels are left out of training (kept and counted; back in
when the flag is lifted).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from itertools import combinations

from .db import Store
from .settings import get_setting
from .types import Outcome

GOLD_DEFAULTS = {
    "gold_every": 5,  # an annotator's every 5th pair (ranking) is a gold one (while any is left for them)
    "gold_min_accuracy": 0.7,  # below it an annotator is flagged ...
    "gold_min_judgements": 5,  # ... once they made this many gold comparisons (a pair is one)
    "gold_exclude_flagged": False,  # leave flagged annotators' labels out of training
    "gold_lifted": [],  # annotators whose flag was lifted by hand
}
ANSWERS = (Outcome.FIRST.value, Outcome.SECOND.value, Outcome.TIE.value)

# a label on a gold pair (`l` the label) is a check of its annotator, never training data
NOT_GOLD = "NOT EXISTS (SELECT 1 FROM gold_items g WHERE g.pair_id = l.pair_id)"
# ... and a verdict on a gold ranking (`l` a ranking label)
NOT_GOLD_RANKING = "NOT EXISTS (SELECT 1 FROM gold_rankings g WHERE g.ranking_id = l.ranking_id)"


def gold_setting(store: Store, key: str):
    value = get_setting(store, key)
    return GOLD_DEFAULTS[key] if value is None else value


@dataclass(frozen=True)
class GoldScore:
    """An annotator's gold comparisons (a gold pair is one, a gold ranking those its order makes; skips not counted),
    how many match the answer, and whether they are flagged (and so, with `gold_exclude_flagged`, left out of
    training)."""

    annotator: str
    judged: int
    correct: int
    flagged: bool
    left_out: bool

    @property
    def accuracy(self) -> float:
        return self.correct / self.judged if self.judged else float("nan")

    def line(self) -> str:
        flag = " flagged" + (", labels left out of training" if self.left_out else "") if self.flagged else ""
        return f"{self.annotator}: {self.correct}/{self.judged} gold ({self.accuracy:.0%}){flag}"


def gold_scores(store: Store) -> list[GoldScore]:
    """Every annotator's gold accuracy over gold pairs and rankings (the verdict a gold item was marked from not
    counted), by name."""
    db = store.db()
    counts: dict[str, list[int]] = {}
    for annotator, judged, correct in db.execute(
            "SELECT l.annotator, count(*), sum(l.outcome = g.answer) FROM labels l JOIN gold_items g"
            " ON g.pair_id = l.pair_id WHERE l.undone IS NULL AND l.outcome != 'skip'"
            " AND l.id IS NOT g.origin_label_id GROUP BY l.annotator"):
        counts[annotator] = [judged, correct]
    for annotator, outcome, tiers, gold in db.execute(
            "SELECT l.annotator, l.outcome, l.tiers, g.tiers FROM ranking_labels l JOIN gold_rankings g"
            " ON g.ranking_id = l.ranking_id WHERE l.undone IS NULL AND l.outcome != 'skip'"
            " AND l.id IS NOT g.origin_label_id"):
        judged, correct = ranking_agreement(json.loads(gold), json.loads(tiers) if outcome == "ranked" else None)
        total = counts.setdefault(annotator, [0, 0])
        total[0] += judged
        total[1] += correct
    least, fewest = float(gold_setting(store, "gold_min_accuracy")), int(gold_setting(store, "gold_min_judgements"))
    lifted, exclude = set(gold_setting(store, "gold_lifted")), bool(gold_setting(store, "gold_exclude_flagged"))
    scores = []
    for annotator, (judged, correct) in sorted(counts.items()):
        flagged = judged >= fewest and correct / judged < least and annotator not in lifted
        scores.append(GoldScore(annotator, judged, correct, flagged, flagged and exclude))
    return scores


def ranking_agreement(gold: list[list[int]], tiers: list[list[int]] | None) -> tuple[int, int]:
    """(comparisons, agreeing): the pairs of positions the gold tiers put apart, and how many of them `tiers` (an
    annotator's, None for "all bad") order the same way."""
    gold_tier = {p: i for i, tier in enumerate(gold) for p in tier}
    their_tier = {p: i for i, tier in enumerate(tiers or []) for p in tier}
    apart = [(a, b) for a, b in combinations(sorted(gold_tier), 2) if gold_tier[a] != gold_tier[b]]
    same = sum(a in their_tier and b in their_tier and their_tier[a] != their_tier[b]
               and (their_tier[a] < their_tier[b]) == (gold_tier[a] < gold_tier[b]) for a, b in apart)
    return len(apart), same


def count_all_gold(store: Store) -> int:
    """Gold pairs and gold rankings (`storage.gold_items.count_gold`: the pairs alone)."""
    return store.db().execute("SELECT (SELECT count(*) FROM gold_items) + (SELECT count(*) FROM gold_rankings)"
                              ).fetchone()[0]


def left_out_annotators(store: Store) -> set[str]:
    """The annotators whose labels training leaves out: flagged, with `gold_exclude_flagged` on."""
    if not gold_setting(store, "gold_exclude_flagged") or not count_all_gold(store):
        return set()
    return {score.annotator for score in gold_scores(store) if score.left_out}
