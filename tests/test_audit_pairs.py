"""Audit pairs: the most confident candidates, spread evenly through the round's queue; agreement counted by hand."""

import pytest
import torch

from labeling.audit_pairs import (
    AUDIT,
    AuditPair,
    agreement,
    agreement_by_round,
    audit_count,
    audit_positions,
    interleave,
    most_confident,
)
from labeling.selection import Candidate
from storage.audit_pairs import AuditVote
from storage.pairs import NewPair
from storage.types import Generation, Outcome
from trainers.policy.ppo_math import correlation


def generation(id, prompt_id=1):
    return Generation(id, prompt_id, 5, f"text {id}", None, {}, None, None, None)


def test_audit_count_is_the_share_of_the_rounds_labels():
    assert audit_count(100, 0.1) == 10 and audit_count(16, 0.1) == 2 and audit_count(30, 0) == 0


def test_most_confident_takes_probabilities_farthest_from_a_half():
    candidates = [Candidate(generation(1), generation(i)) for i in (2, 3, 4, 5)]
    chosen = most_confident(candidates, [0.55, 0.02, 0.9, 0.5], 2, round=3)
    assert [(a.pair.second_id, a.prob_first) for a in chosen] == [(3, 0.02), (4, 0.9)]
    assert all(a.pair.selector == AUDIT and a.pair.round == 3 and a.pair.policy_id == 5 for a in chosen)
    with pytest.raises(ValueError, match="3 probabilities for 4 candidates"):
        most_confident(candidates, [0.1, 0.2, 0.3], 1)


def test_audit_pairs_are_spread_through_the_labelled_places():
    assert audit_positions(2, 10) == [2, 7] and audit_positions(0, 10) == []
    regular = [NewPair(1, i, i + 100, "random", 10.0 - i, 1) for i in range(8)]
    audits = [AuditPair(NewPair(1, 50, 51, AUDIT, None, 1), 0.9), AuditPair(NewPair(1, 60, 61, AUDIT, None, 1), 0.1)]
    pairs, marked = interleave(regular, audits, labels=10)
    assert marked == {2: 0.9, 7: 0.1}
    assert [p.first_id for p in pairs] == [0, 1, 50, 2, 3, 4, 5, 60, 6, 7]
    assert pairs[2].score == regular[2].score and pairs[7].score == regular[6].score  # the score of the pair after


def test_agreement_by_hand():
    votes = [AuditVote(1, 1, "a", Outcome.FIRST, 0.9), AuditVote(2, 1, "a", Outcome.FIRST, 0.2),
             AuditVote(3, 1, "a", Outcome.TIE, 0.8), AuditVote(4, 1, "a", Outcome.SKIP, 0.8),
             AuditVote(5, 2, "a", Outcome.SECOND, 0.1)]
    assert agreement(votes) == type(agreement(votes))((1 + 0 + 0.5 + 1) / 4, 4)
    by_round = agreement_by_round(votes)
    assert by_round[1].value == pytest.approx(0.5) and by_round[1].labels == 3 and by_round[2].value == 1.0
    assert agreement([]).value is None


def test_correlation_by_hand():
    assert correlation(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([2.0, 4.0, 6.0])).item() == pytest.approx(1.0)
    assert correlation(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([3.0, 1.0, 2.0])).item() == pytest.approx(-0.5)
    assert correlation(torch.tensor([1.0, 1.0]), torch.tensor([0.0, 5.0])).item() == 0.0
