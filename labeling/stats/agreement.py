"""Annotator statistics and inter-annotator agreement, as pure functions of the current votes.

Agreement compares outcomes relative to the pair (first, second, tie, both bad: ties are a class of their own);
skips say nothing about the pair and are left out. On a pair labeled by n annotators every one of the n(n-1)/2
pairs of ratings is compared.

- percent agreement: agreeing rating pairs / rating pairs;
- Cohen's kappa of two annotators over the pairs both labeled: (p_o - p_e) / (1 - p_e), where p_o is their
  percent agreement and p_e = sum over classes of the product of their class frequencies; undefined (None)
  when p_e = 1 (both always gave the same single class);
- the summary kappa over many annotators is Light's kappa: the mean of the defined pairwise Cohen's kappas.

    stats = annotator_stats(current_votes(store))
    summary = agreement_summary(current_votes(store))
"""

from __future__ import annotations

import itertools
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Iterable, Sequence

from storage.types import Outcome
from storage.votes import Vote

CLASSES = (Outcome.FIRST, Outcome.SECOND, Outcome.TIE, Outcome.BOTH_BAD)


@dataclass(frozen=True)
class Agreement:
    pairs: int  # pairs of the store labeled by at least two of the annotators compared
    comparisons: int  # rating pairs compared
    percent: float | None
    kappa: float | None


@dataclass(frozen=True)
class AnnotatorStats:
    annotator: str
    labels: int  # current labels other than skips
    skips: int
    tie_rate: float | None
    both_bad_rate: float | None
    left_rate: float | None  # of their first/second decisions, how often the response shown left won
    median_decision_ms: float | None
    agreement: Agreement  # with everyone else, on the pairs they share


def percent_agreement(a: Sequence[Outcome], b: Sequence[Outcome]) -> float | None:
    """Fraction of positions where the two rating lists agree; None for empty lists."""
    _check_paired(a, b)
    return sum(x == y for x, y in zip(a, b, strict=True)) / len(a) if a else None


def cohen_kappa(a: Sequence[Outcome], b: Sequence[Outcome]) -> float | None:
    """Cohen's kappa of two paired rating lists; None when empty or when chance agreement is 1."""
    _check_paired(a, b)
    if not a:
        return None
    n = len(a)
    observed = sum(x == y for x, y in zip(a, b, strict=True)) / n
    count_a, count_b = Counter(a), Counter(b)
    expected = sum(count_a[c] * count_b[c] for c in count_a) / (n * n)
    if expected >= 1.0:
        return None
    return (observed - expected) / (1.0 - expected)


def _check_paired(a: Sequence, b: Sequence) -> None:
    if len(a) != len(b):
        raise ValueError(f"paired ratings need equal lengths, got {len(a)} and {len(b)}")


def _ratings_by_pair(votes: Iterable[Vote]) -> dict[int, dict[str, Outcome]]:
    by_pair: dict[int, dict[str, Outcome]] = defaultdict(dict)
    for vote in votes:
        if vote.outcome in CLASSES:
            by_pair[vote.pair_id][vote.annotator] = vote.outcome
    return by_pair


def pairwise_agreement(votes: Iterable[Vote]) -> dict[tuple[str, str], Agreement]:
    """Agreement of every two annotators (names in sorted order) who labeled at least one pair in common."""
    ratings: dict[tuple[str, str], tuple[list[Outcome], list[Outcome]]] = defaultdict(lambda: ([], []))
    for by_annotator in _ratings_by_pair(votes).values():
        for x, y in itertools.combinations(sorted(by_annotator), 2):
            ratings[(x, y)][0].append(by_annotator[x])
            ratings[(x, y)][1].append(by_annotator[y])
    return {key: Agreement(len(a), len(a), percent_agreement(a, b), cohen_kappa(a, b))
            for key, (a, b) in sorted(ratings.items())}


def agreement_summary(votes: Iterable[Vote]) -> Agreement:
    """Percent agreement over all rating pairs, and Light's kappa (mean pairwise Cohen's kappa)."""
    votes = list(votes)
    shared = sum(len(r) >= 2 for r in _ratings_by_pair(votes).values())
    pairwise = pairwise_agreement(votes).values()
    comparisons = sum(p.comparisons for p in pairwise)
    agreeing = sum(p.percent * p.comparisons for p in pairwise)
    kappas = [p.kappa for p in pairwise if p.kappa is not None]
    return Agreement(shared, comparisons, agreeing / comparisons if comparisons else None,
                     sum(kappas) / len(kappas) if kappas else None)


def annotator_stats(votes: Iterable[Vote]) -> list[AnnotatorStats]:
    """One row per annotator (sorted by name): volume, tie/both-bad rates, left-side bias, speed, agreement."""
    votes = list(votes)
    by_pair = _ratings_by_pair(votes)
    mine: dict[str, list[Vote]] = defaultdict(list)
    for vote in votes:
        mine[vote.annotator].append(vote)
    rows = []
    for annotator in sorted(mine):
        rated = [v for v in mine[annotator] if v.outcome is not Outcome.SKIP]
        decided = [v for v in rated if v.outcome in (Outcome.FIRST, Outcome.SECOND) and v.left_id is not None]
        left_wins = sum((v.outcome is Outcome.FIRST) == (v.left_id == v.first_id) for v in decided)
        times = [v.decision_ms for v in rated if v.decision_ms is not None]
        theirs, others = [], []
        for ratings in by_pair.values():
            if annotator in ratings:
                for other, outcome in ratings.items():
                    if other != annotator:
                        theirs.append(ratings[annotator])
                        others.append(outcome)
        shared = sum(annotator in r and len(r) >= 2 for r in by_pair.values())
        rows.append(AnnotatorStats(
            annotator=annotator,
            labels=len(rated),
            skips=len(mine[annotator]) - len(rated),
            tie_rate=_rate(sum(v.outcome is Outcome.TIE for v in rated), len(rated)),
            both_bad_rate=_rate(sum(v.outcome is Outcome.BOTH_BAD for v in rated), len(rated)),
            left_rate=_rate(left_wins, len(decided)),
            median_decision_ms=statistics.median(times) if times else None,
            agreement=Agreement(shared, len(theirs), percent_agreement(theirs, others), cohen_kappa(theirs, others)),
        ))
    return rows


def _rate(count: int, total: int) -> float | None:
    return count / total if total else None
