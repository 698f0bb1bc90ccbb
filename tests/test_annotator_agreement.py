"""Reward-model agreement with each annotator: counted by hand against a scorer with known preferences."""

import json

import pytest
import torch

from labeling.queue.annotation import update_queue_settings
from storage.jobs import create_job
from storage.metrics import read_metrics
from storage.reward_models import add_reward_model
from storage.types import Outcome
from tests.helpers import label_pairs
from trainers.loop.annotator_agreement import record_annotator_agreement
from trainers.reward.scorer import INFO_FILE


class FixedScorer:
    """Two ensemble members whose mean P(first preferred) is 0.8 when the first response is "good", else 0.3."""

    def preference_probabilities(self, prompts, firsts, seconds):
        mean = torch.tensor([0.8 if first == "good" else 0.3 for first in firsts])
        return torch.stack([mean + 0.1, mean - 0.1])  # (K=2, N)


def reward_model_dir(tmp_path, val_pair_ids) -> str:
    """A reward model's folder as far as agreement reads it: its info file with the validation pairs."""
    (tmp_path / "rm").mkdir()
    (tmp_path / "rm" / INFO_FILE).write_text(json.dumps({"val_pair_ids": list(val_pair_ids)}))
    return str(tmp_path / "rm")


def test_agreement_per_annotator_by_hand(store, queue_pairs, tmp_path):
    pairs = queue_pairs([("p1", "good", "bad"), ("p2", "bad", "good"), ("p3", "good", "meh"), ("p4", "x", "y")])
    # the model prefers: first, second, first, second
    update_queue_settings(store, overlap=2)
    label_pairs(store, "alice", {pairs[0]: Outcome.FIRST,  # agrees
                                 pairs[1]: Outcome.SECOND,  # agrees
                                 pairs[2]: Outcome.SECOND,  # disagrees
                                 pairs[3]: Outcome.TIE})  # not compared
    label_pairs(store, "bob", {pairs[0]: Outcome.SECOND,  # disagrees
                               pairs[1]: Outcome.SKIP})  # not compared
    job_id = create_job(store, "reward", {})
    add_reward_model(store, reward_model_dir(tmp_path, pairs), labels_used=5, metrics={}, norm_mean=0.0, norm_std=1.0,
                     round=2, job_id=job_id)

    agreement = record_annotator_agreement(store, job_id, scorer=FixedScorer())

    assert agreement == {"alice": pytest.approx(2 / 3), "bob": 0.0}
    rows = {(r["name"], r["step"]): r["value"] for r in read_metrics(store, job_id, prefix="annotator/")}
    assert rows == {("annotator/alice/rm_agreement", 2): pytest.approx(2 / 3), ("annotator/alice/rm_labels", 2): 3,
                    ("annotator/bob/rm_agreement", 2): 0.0, ("annotator/bob/rm_labels", 2): 1}


def test_nothing_to_compare_stores_nothing(store, queue_pairs):
    job_id = create_job(store, "reward", {})
    assert record_annotator_agreement(store, job_id, scorer=FixedScorer()) == {}  # no reward model, no label
    pair = queue_pairs([("p", "a", "b")])[0]
    label_pairs(store, "alice", {pair: Outcome.TIE})
    add_reward_model(store, "/rm", labels_used=1, metrics={}, norm_mean=0.0, norm_std=1.0, job_id=job_id)
    assert record_annotator_agreement(store, job_id, scorer=FixedScorer()) == {}  # only a tie
    assert read_metrics(store, job_id) == []


def test_only_the_reward_models_validation_pairs_count(store, queue_pairs, tmp_path):
    pairs = queue_pairs([("p1", "good", "bad"), ("p2", "bad", "good"), ("p3", "good", "meh")])
    label_pairs(store, "alice", {pairs[0]: Outcome.FIRST, pairs[1]: Outcome.FIRST, pairs[2]: Outcome.FIRST})
    job_id = create_job(store, "reward", {})
    add_reward_model(store, reward_model_dir(tmp_path, [pairs[1], pairs[2]]), labels_used=3, metrics={}, norm_mean=0.0,
                     norm_std=1.0, round=1, job_id=job_id)
    assert record_annotator_agreement(store, job_id, scorer=FixedScorer()) == {"alice": 0.5}  # pair 1 trained it
    rows = {r["name"]: r["value"] for r in read_metrics(store, job_id, prefix="annotator/")}
    assert rows["annotator/alice/rm_labels"] == 2


def test_the_members_stored_validation_scores_are_read_without_loading_the_model(store, queue_pairs, tmp_path):
    pairs = queue_pairs([("p1", "good", "bad"), ("p2", "bad", "good"), ("p3", "good", "meh")])
    label_pairs(store, "alice", {pairs[0]: Outcome.FIRST, pairs[1]: Outcome.FIRST, pairs[2]: Outcome.SECOND})
    job_id = create_job(store, "reward", {})
    for k, probabilities in enumerate(([0.9, 0.3, 0.7], [0.7, 0.6, 0.1])):  # means 0.8, 0.45, 0.4
        folder = tmp_path / f"m{k}"  # no weights: scoring here would fail
        folder.mkdir()
        (folder / INFO_FILE).write_text(json.dumps({"val_pair_ids": pairs, "val_first_probability": {
            str(pair): p for pair, p in zip(pairs, probabilities, strict=True)}}))
        add_reward_model(store, str(folder), labels_used=3, metrics={}, norm_mean=0.0, norm_std=1.0, round=1,
                         job_id=job_id, ensemble_index=k, ensemble_size=2)
    assert record_annotator_agreement(store, job_id) == {"alice": pytest.approx(2 / 3)}  # agrees on 1 and 3
