"""Check pairs: the most confident candidates, spread evenly through the round's queue; agreement counted by hand."""

import pytest
import torch

from labeling.queue.check_pairs import (
    CheckPair,
    agreement,
    agreement_by_round,
    check_count,
    check_positions,
    interleave,
    most_confident,
)
from labeling.queue.selection import Candidate
from storage.check_pairs import CheckVote
from storage.pairs import NewPair
from storage.types import Generation, Outcome, Selector
from trainers.policy.ppo_math import correlation


def generation(id, prompt_id=1):
    return Generation(id, prompt_id, 5, f"text {id}", None, {}, None, None, None)


def test_check_count_is_the_share_of_the_rounds_labels():
    assert check_count(100, 0.1) == 10 and check_count(16, 0.1) == 2 and check_count(30, 0) == 0


def test_most_confident_takes_probabilities_farthest_from_a_half():
    candidates = [Candidate(generation(1), generation(i)) for i in (2, 3, 4, 5)]
    chosen = most_confident(candidates, [0.55, 0.02, 0.9, 0.5], 2, round=3)
    assert [(a.pair.second_id, a.prob_first) for a in chosen] == [(3, 0.02), (4, 0.9)]
    assert all(a.pair.selector == Selector.CHECK and a.pair.round == 3 and a.pair.policy_id == 5 for a in chosen)
    with pytest.raises(ValueError, match="3 probabilities for 4 candidates"):
        most_confident(candidates, [0.1, 0.2, 0.3], 1)


def test_check_pairs_are_spread_through_the_labelled_places():
    assert check_positions(2, 10) == [2, 7] and check_positions(0, 10) == []
    regular = [NewPair(1, i, i + 100, "random", 10.0 - i, 1) for i in range(8)]
    checks = [CheckPair(NewPair(1, 50, 51, Selector.CHECK, None, 1), 0.9),
              CheckPair(NewPair(1, 60, 61, Selector.CHECK, None, 1), 0.1)]
    pairs, marked = interleave(regular, checks, labels=10)
    assert marked == {2: 0.9, 7: 0.1}
    assert [p.first_id for p in pairs] == [0, 1, 50, 2, 3, 4, 5, 60, 6, 7]
    assert pairs[2].score == regular[2].score and pairs[7].score == regular[6].score  # the score of the pair after


def test_agreement_by_hand():
    votes = [CheckVote(1, 1, "a", Outcome.FIRST, 0.9), CheckVote(2, 1, "a", Outcome.FIRST, 0.2),
             CheckVote(3, 1, "a", Outcome.TIE, 0.8), CheckVote(4, 1, "a", Outcome.SKIP, 0.8),
             CheckVote(5, 2, "a", Outcome.SECOND, 0.1)]
    assert agreement(votes) == type(agreement(votes))((1 + 0 + 0.5 + 1) / 4, 4)
    by_round = agreement_by_round(votes)
    assert by_round[1].value == pytest.approx(0.5) and by_round[1].labels == 3 and by_round[2].value == 1.0
    assert agreement([]).value is None


def test_correlation_by_hand():
    assert correlation(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([2.0, 4.0, 6.0])).item() == pytest.approx(1.0)
    assert correlation(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([3.0, 1.0, 2.0])).item() == pytest.approx(-0.5)
    assert correlation(torch.tensor([1.0, 1.0]), torch.tensor([0.0, 5.0])).item() == 0.0
