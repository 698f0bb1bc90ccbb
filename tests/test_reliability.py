"""Krippendorff's α (labeling/stats/reliability.py) against Krippendorff's own worked example, and over a store's
overlapped pairs and rankings."""

import pytest

from app.commands.cli import main
from labeling.queue.annotation import update_queue_settings
from labeling.queue.ranking import next_ranking, submit_ranking
from labeling.stats.reliability import krippendorff_alpha, label_alpha
from storage.types import Outcome
from tests.helpers import label_pairs
from tests.test_rankings import queue_rankings


def test_alpha_of_krippendorffs_worked_example():
    """Krippendorff (2011), "Computing Krippendorff's alpha-reliability": 4 coders, 12 units with missing values;
    nominal α = 0.743 (the 12th unit, coded once, is left out)."""
    units = [[1, 1, 1], [2, 2, 3, 2], [3, 3, 3, 3], [3, 3, 3, 3], [2, 2, 2, 2], [1, 2, 3, 4], [4, 4, 4, 4],
             [1, 1, 2, 1], [2, 2, 2, 2], [5, 5, 5], [1, 1], [3]]
    assert krippendorff_alpha(units) == pytest.approx(0.743, abs=5e-4)


def test_alpha_is_one_when_all_agree_minus_when_they_always_disagree_and_undefined_without_overlap():
    assert krippendorff_alpha([["a", "a"], ["b", "b"], ["a", "a", "a"]]) == 1.0
    # two units, each split a/b: o_ab = o_ba = 2, n = 4: 1 - 3 * 4 / (2 * 2 * 2) = -0.5
    assert krippendorff_alpha([["a", "b"], ["b", "a"]]) == pytest.approx(-0.5)
    assert krippendorff_alpha([["a"], ["b"]]) is None and krippendorff_alpha([["a", "a"]]) is None


def test_alpha_over_overlapped_pairs_and_rankings_in_status(store, queue_pairs, capsys):
    pairs = queue_pairs([("p", "a", "b"), ("q", "c", "d")])
    [ranking] = queue_rankings(store, [("r", ["x", "y", "z"])])
    update_queue_settings(store, overlap=2)
    label_pairs(store, "alice", {pairs[0]: Outcome.FIRST, pairs[1]: Outcome.SECOND})
    label_pairs(store, "bob", {pairs[0]: Outcome.FIRST, pairs[1]: Outcome.FIRST})
    for name, order in (("alice", "ABC"), ("bob", "ACB")):
        next_ranking(store, name)
        submit_ranking(store, name, ranking, order, f"v-{name}")
    alpha, units = label_alpha(store)
    assert units == 2 + 3  # two pairs, three comparisons of the ranking
    # values: [first, first], [second, first], [1, 1] (A-B), [1, 1] (A-C), [1, 0] (B-C)
    expected = krippendorff_alpha([["first", "first"], ["second", "first"], [1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
    assert alpha == pytest.approx(expected) and alpha < 1
    assert main(["status", "--db", str(store.path)]) == 0
    assert f"agreement: Krippendorff's α {alpha:.2f} over 5 items" in capsys.readouterr().out
