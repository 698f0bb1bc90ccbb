"""Graded preferences (labeling/queue/strength.py): a strength on a left/right verdict stored as the label's margin, the
project's margins (Llama 2's small ones by default), the API's optional `strength`, and the loss they train, by hand."""

import math

import pytest
import torch
from gradio_client import Client

from labeling.queue.annotation import next_pair, submit_label
from labeling.queue.strength import LLAMA2_LARGE, strength_margins, update_strength_margins
from storage.errors import InvalidInput
from storage.labels import list_labels, training_labels
from storage.types import Outcome
from trainers.jobs.reward_job import load_examples
from trainers.reward.loss import preference_loss


def vote(store, choice, strength=None, name="alice"):
    shown = next_pair(store, name)
    return submit_label(store, name, shown.pair_id, choice, f"v-{shown.pair_id}-{name}", strength=strength), shown


def test_a_strength_is_stored_as_the_margin_of_the_winner(store, queue_pairs):
    queue_pairs([(f"p{i}", f"a{i}", f"b{i}") for i in range(4)])
    vote(store, "left", "much_better")
    vote(store, "right", "slightly_better")
    vote(store, "left", "about_same")
    vote(store, "left")
    assert [lp.margin for lp in training_labels(store)] == pytest.approx([1.0, 1 / 3, 0.0, None])


def test_margins_are_a_project_setting_checked_before_storing(store, queue_pairs):
    assert strength_margins(store)["better"] == pytest.approx(2 / 3)
    update_strength_margins(store, LLAMA2_LARGE)
    queue_pairs([("p", "a", "b")])
    vote(store, "right", "better")
    assert training_labels(store)[0].margin == 2.0
    for bad in ({"better": 1}, {**LLAMA2_LARGE, "better": -1}, {**LLAMA2_LARGE, "better": float("nan")},
                {**LLAMA2_LARGE, "about_same": 5.0}, [1, 2, 3, 4]):
        with pytest.raises(InvalidInput):
            update_strength_margins(store, bad)
    assert strength_margins(store) == LLAMA2_LARGE


def test_a_strength_goes_with_left_or_right_only(store, queue_pairs):
    queue_pairs([("p", "a", "b")])
    shown = next_pair(store, "alice")
    with pytest.raises(InvalidInput, match="left or right label only"):
        submit_label(store, "alice", shown.pair_id, "tie", "v1", strength="better")
    with pytest.raises(InvalidInput, match="strength must be one of"):
        submit_label(store, "alice", shown.pair_id, "left", "v1", strength="a lot")
    assert list_labels(store) == []


def test_graded_labels_train_with_their_margin_by_hand(store, queue_pairs):
    """r_first = 1, r_second = 0. First wins 'better' (2/3): d = 1 - 2/3, loss = log(1 + e^(-1/3)) = 0.5432;
    second wins 'much better' (margin 1, target 0): d = 1 - 0 + 1 = 2, loss = log(1 + e^2) = 2.1269;
    an ungraded first win trains with no margin: log(1 + e^-1) = 0.3133."""
    queue_pairs([(f"p{i}", f"a{i}", f"b{i}") for i in range(3)])
    for choice, strength in (("left", "better"), ("right", "much_better"), ("left", None)):
        shown = next_pair(store, "alice")
        first_left = shown.left.startswith("a")
        picked = choice if first_left else {"left": "right", "right": "left"}[choice]
        submit_label(store, "alice", shown.pair_id, picked, f"v{shown.pair_id}", strength=strength)
    examples, _ = load_examples(store)
    by_prompt = {e.prompt: e for e in examples}
    expected = {"p0": (1.0, 2 / 3, math.log1p(math.exp(-1 / 3))), "p1": (0.0, 1.0, math.log1p(math.exp(2.0))),
                "p2": (1.0, 0.0, math.log1p(math.exp(-1.0)))}
    for prompt, (target, margin, loss) in expected.items():
        example = by_prompt[prompt]
        assert (example.target, example.margin) == pytest.approx((target, margin))
        got = preference_loss(torch.tensor([1.0], dtype=torch.float64), torch.tensor([0.0], dtype=torch.float64),
                              torch.tensor([example.target]), torch.tensor([example.margin], dtype=torch.float64))
        assert got.item() == pytest.approx(loss)


def test_the_api_takes_an_optional_strength(store, queue_pairs, serve_studio):
    queue_pairs([("p0", "a0", "b0"), ("p1", "a1", "b1")])
    client = Client(serve_studio(store).local_url, verbose=False)
    shown = client.predict("alice", api_name="/next_pair")
    answer = client.predict("alice", shown["pair_id"], "left", "v1", "slightly_better", api_name="/submit_label")
    plain = client.predict("alice", answer["next"]["pair_id"], "tie", "v2", api_name="/submit_label")
    assert plain["label_id"] != answer["label_id"]
    assert [(lp.outcome in (Outcome.FIRST, Outcome.SECOND), lp.margin) for lp in training_labels(store)] == \
        [(True, pytest.approx(1 / 3)), (False, None)]


def test_a_graded_oracle_grades_by_its_score_difference(store, queue_pairs):
    from labeling.queue.synthetic import OracleAnnotator

    queue_pairs([("p0", "good good good", "bad"), ("p1", "good", "bad"), ("p2", "good", "fine")])
    oracle = OracleAnnotator(lambda text: text.count("good") - text.count("bad"), graded=True)
    assert len(oracle.label(store, 3)) == 3
    # differences 4, 2, 1: much better, better, slightly better; the winner always the first here
    assert [(lp.outcome, lp.margin) for lp in training_labels(store)] == [
        (Outcome.FIRST, 1.0), (Outcome.FIRST, pytest.approx(2 / 3)), (Outcome.FIRST, pytest.approx(1 / 3))]
