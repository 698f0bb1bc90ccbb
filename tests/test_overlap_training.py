"""How overlapped labels train (labeling/stats/overlap.py): each label an example, or one per pair by majority."""

import pytest

from labeling.queue.annotation import update_queue_settings
from labeling.stats.overlap import majority_labels, set_overlap_training
from storage.errors import InvalidInput
from storage.labels import training_labels
from storage.types import Outcome
from tests.helpers import label_pairs
from trainers.jobs.reward_job import load_examples


def test_majority_trains_one_example_per_pair(store, queue_pairs):
    pairs = queue_pairs([("p", "a", "b"), ("q", "c", "d"), ("r", "e", "f")])
    update_queue_settings(store, overlap=3)
    label_pairs(store, "ann", {pairs[0]: Outcome.FIRST, pairs[1]: Outcome.FIRST, pairs[2]: Outcome.SECOND})
    label_pairs(store, "bob", {pairs[0]: Outcome.FIRST, pairs[1]: Outcome.SECOND})
    label_pairs(store, "cat", {pairs[0]: Outcome.SECOND, pairs[1]: Outcome.SKIP})
    assert len(load_examples(store)[0]) == 6  # each: every non-skip label
    set_overlap_training(store, "majority")
    got = [(e.pair_id, e.target) for e in load_examples(store)[0]]
    # p: first 2-1; q: first 1-1 second (the skip aside): a draw, a tie; r: one label
    assert got == [(pairs[0], 1.0), (pairs[1], 0.5), (pairs[2], 0.0)]
    assert [lp.outcome for lp in majority_labels(training_labels(store))] == [Outcome.FIRST, Outcome.TIE,
                                                                              Outcome.SECOND]
    with pytest.raises(InvalidInput, match="each, majority"):
        set_overlap_training(store, "mean")
