"""Agreement statistics against hand computations, and per-annotator statistics from the store."""

import uuid

import pytest

from labeling.queue.annotation import next_pair, submit_label, update_queue_settings
from labeling.stats.agreement import (
    agreement_summary,
    annotator_stats,
    cohen_kappa,
    pairwise_agreement,
    percent_agreement,
)
from storage.types import Outcome
from storage.votes import Vote, current_votes

F, S, T, B, SKIP = Outcome.FIRST, Outcome.SECOND, Outcome.TIE, Outcome.BOTH_BAD, Outcome.SKIP
A_RATINGS = [F, F, F, F, S, S, T, T, B, F]
B_RATINGS = [F, F, F, S, S, T, T, F, B, F]


def votes_of(annotator, ratings, pair_ids=None, left_ids=None, times=None):
    pair_ids = pair_ids or range(1, len(ratings) + 1)
    return [Vote(0, pair_id, annotator, outcome, first_id=100 * pair_id,
                 left_id=None if left_ids is None else left_ids[i], decision_ms=None if times is None else times[i],
                 created=0.0)
            for i, (pair_id, outcome) in enumerate(zip(pair_ids, ratings, strict=True))]


def test_cohen_kappa_by_hand():
    # agree on 7 of 10: p_o = 0.7. Class counts, A: F5 S2 T2 B1; B: F5 S2 T2 B1.
    # p_e = (5*5 + 2*2 + 2*2 + 1*1) / 100 = 0.34; kappa = (0.7 - 0.34) / (1 - 0.34) = 0.36 / 0.66 = 6/11.
    assert percent_agreement(A_RATINGS, B_RATINGS) == pytest.approx(0.7)
    assert cohen_kappa(A_RATINGS, B_RATINGS) == pytest.approx(6 / 11)


def test_cohen_kappa_edge_cases():
    assert cohen_kappa([F, S, T], [F, S, T]) == pytest.approx(1.0)
    # always opposite on two classes: p_o = 0, p_e = (1*1 + 1*1) / 4 = 0.5, kappa = -1
    assert cohen_kappa([F, S], [S, F]) == pytest.approx(-1.0)
    assert cohen_kappa([T, T], [T, T]) is None  # chance agreement 1: undefined
    assert cohen_kappa([], []) is None and percent_agreement([], []) is None
    with pytest.raises(ValueError):
        cohen_kappa([F], [F, S])


def test_ties_are_a_class_of_their_own():
    # a tie against a first is a disagreement: p_o = 1/2; counts A: F1 T1, B: F2 -> p_e = 2/4; kappa = 0
    assert cohen_kappa([F, T], [F, F]) == pytest.approx(0.0)


def test_pairwise_summary_and_per_annotator_agreement_by_hand():
    votes = (votes_of("ann", A_RATINGS) + votes_of("bob", B_RATINGS)
             + votes_of("cy", [F, S, SKIP], pair_ids=[1, 2, 3]))  # cy's skip on pair 3 is left out
    pairwise = pairwise_agreement(votes)
    assert list(pairwise) == [("ann", "bob"), ("ann", "cy"), ("bob", "cy")]
    assert pairwise[("ann", "bob")].kappa == pytest.approx(6 / 11)
    # ann vs cy on pairs 1, 2: (F, F) vs (F, S): p_o = 1/2; counts ann F2, cy F1 S1 -> p_e = 2/4; kappa = 0
    assert (pairwise[("ann", "cy")].percent, pairwise[("ann", "cy")].kappa) == (0.5, pytest.approx(0.0))
    summary = agreement_summary(votes)
    assert (summary.pairs, summary.comparisons) == (10, 14)
    assert summary.percent == pytest.approx((7 + 1 + 1) / 14)
    assert summary.kappa == pytest.approx((6 / 11 + 0 + 0) / 3)  # Light's kappa
    cy = {row.annotator: row for row in annotator_stats(votes)}["cy"]
    # cy's ratings F, F, S, S against ann and bob's F, F, F, F: p_o = 1/2, p_e = (2*4)/16 = 1/2, kappa = 0
    assert (cy.agreement.pairs, cy.agreement.comparisons, cy.agreement.percent) == (2, 4, 0.5)
    assert cy.agreement.kappa == pytest.approx(0.0)


def test_annotator_volume_ties_left_side_and_speed():
    # pair p has first generation 100*p; left_ids say which was shown on the left
    ratings = [F, S, F, T, B, SKIP]
    left_ids = [100, 200, 301, 400, 500, 600]  # F with first on left (left won); S with first on left (right won);
    times = [1000, 3000, 2000, 500, 4000, 9000]  # F with second on left (right won); T, B and skip do not count
    (row,) = annotator_stats(votes_of("ann", ratings, left_ids=left_ids, times=times))
    assert (row.labels, row.skips) == (5, 1)
    assert (row.tie_rate, row.both_bad_rate) == (1 / 5, 1 / 5)
    assert row.left_rate == pytest.approx(1 / 3)
    assert row.median_decision_ms == 2000  # skips' times left out: median of 500, 1000, 2000, 3000, 4000
    assert row.agreement.comparisons == 0 and row.agreement.kappa is None


def test_statistics_from_labels_in_the_store(store, queue_pairs):
    queue_pairs([(f"p{i}", f"a{i}", f"b{i}") for i in range(4)])
    update_queue_settings(store, overlap=2)
    for name in ("ann", "bob"):
        while (shown := next_pair(store, name)) is not None:
            submit_label(store, name, shown.pair_id, "tie", str(uuid.uuid4()), decision_ms=700)
    stats = {row.annotator: row for row in annotator_stats(current_votes(store))}
    assert stats["ann"].labels == stats["bob"].labels == 4 and stats["ann"].tie_rate == 1.0
    assert stats["bob"].median_decision_ms == 700 and stats["bob"].left_rate is None
    summary = agreement_summary(current_votes(store))
    assert (summary.pairs, summary.percent, summary.kappa) == (4, 1.0, None)  # all ties: kappa undefined
