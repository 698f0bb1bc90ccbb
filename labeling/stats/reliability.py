"""Krippendorff's α (nominal) over the items several annotators judged: pairs, and the comparisons of rankings.

α = 1 - D_o / D_e over the units with two or more values: with o_ck the coincidence counts (each unit's ordered pairs
of values c, k from different annotators, weighted 1 / (m_u - 1)), n_c = Σ_k o_ck and n = Σ_c n_c,

    α = 1 - (n - 1) · Σ_{c≠k} o_ck / Σ_{c≠k} n_c · n_k

It takes any number of annotators per item and missing judgements, where Cohen's κ takes two at a time
(Krippendorff 2011, "Computing Krippendorff's alpha-reliability"). A pair's value is its outcome (first, second, tie,
both bad; skips are no judgement); a ranking gives a unit per comparison of two of its answers, valued by which one
the annotator put first (or tied), and an "all bad" verdict ties them all.

    alpha, units = label_alpha(store)
"""

from __future__ import annotations

from collections import Counter, defaultdict
from itertools import permutations
from typing import Hashable, Sequence

from labeling.queue.ranking import verdict_comparisons
from storage import Store
from storage.rankings import ranking_verdicts
from storage.types import Outcome
from storage.votes import current_votes


def krippendorff_alpha(units: Sequence[Sequence[Hashable]]) -> float | None:
    """Nominal α over `units`, each the values its annotators gave (units with fewer than two are left out); None when
    no unit has two values or every value is the same (no disagreement is possible: α undefined)."""
    coincidence: Counter = Counter()
    for values in units:
        m = len(values)
        if m < 2:
            continue
        for c, k in permutations(values, 2):
            coincidence[c, k] += 1 / (m - 1)
    totals: Counter = Counter()
    for (c, _), count in coincidence.items():
        totals[c] += count
    n = sum(totals.values())
    expected = sum(totals[c] * totals[k] for c in totals for k in totals if c != k)
    if n == 0 or expected == 0:
        return None
    observed = sum(count for (c, k), count in coincidence.items() if c != k)
    return 1 - (n - 1) * observed / expected


def label_alpha(store: Store) -> tuple[float | None, int]:
    """(α, units judged by two or more) over the store's current pair labels and ranking verdicts."""
    by_pair: dict[int, list[str]] = defaultdict(list)
    for vote in current_votes(store):
        if vote.outcome is not Outcome.SKIP:
            by_pair[vote.pair_id].append(vote.outcome.value)
    by_comparison: dict[tuple[int, int, int], list[float]] = defaultdict(list)
    for verdict in ranking_verdicts(store):
        for a, b, p in verdict_comparisons(verdict):
            by_comparison[verdict.ranking_id, a, b].append(p)
    units = [v for v in (*by_pair.values(), *by_comparison.values()) if len(v) >= 2]
    return krippendorff_alpha(units), len(units)
