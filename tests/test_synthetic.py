"""The oracle annotator: higher score wins, ties on equal scores, noise, and labels stored through the queue."""

import collections
import os
import subprocess
import sys
from pathlib import Path

import pytest

from assets.lexicon import sentiment_score
from labeling.queue.annotation import ShownPair
from labeling.queue.synthetic import OracleAnnotator, load_scorer
from storage.errors import InvalidInput
from storage.labels import list_labels
from storage.pairs import get_pair
from storage.types import Outcome


def shown(left, right):
    return ShownPair(pair_id=1, prompt="the movie was", left=left, right=right)


def test_the_default_oracle_is_the_demo_lexicon():
    assert load_scorer() is sentiment_score
    assert load_scorer("assets.lexicon:sentiment_score")("a brilliant , moving film") == 2.0


@pytest.mark.parametrize("spec", ["assets.lexicon", "no_such_module_xyz:f", "assets.lexicon:no_such_function",
                                  "assets.lexicon:POSITIVE", ":f"])
def test_a_bad_oracle_spec_is_one_clear_error(spec):
    with pytest.raises(InvalidInput) as info:
        load_scorer(spec)
    assert "\n" not in str(info.value)


def test_higher_score_wins_and_equal_scores_tie():
    oracle = OracleAnnotator(sentiment_score)
    assert oracle.choose(shown(" brilliant .", " boring .")) == "left"
    assert oracle.choose(shown(" awful and dull .", " great .")) == "right"
    assert oracle.choose(shown(" long .", " quiet .")) == "tie"
    assert oracle.choose(shown(" great but dull .", " quiet .")) == "tie"


def test_noise_votes_a_random_side_at_the_given_rate():
    oracle = OracleAnnotator(sentiment_score, noise=0.4, seed=1)
    votes = collections.Counter(oracle.choose(shown(" brilliant .", " boring .")) for _ in range(4000))
    # P(right) = noise / 2 = 0.2; 4000 draws: std ~ 0.006
    assert votes["right"] / 4000 == pytest.approx(0.2, abs=0.03)
    assert votes["tie"] == 0
    with pytest.raises(InvalidInput):
        OracleAnnotator(sentiment_score, noise=1.5)


def test_a_scorer_returning_a_non_number_is_refused():
    with pytest.raises(InvalidInput):
        OracleAnnotator(lambda text: "high").choose(shown("a", "b"))


def test_oracle_labels_through_the_queue_with_outcomes_relative_to_the_pair(store, queue_pairs):
    pair_ids = queue_pairs([("p1", " brilliant .", " boring ."), ("p2", " awful .", " great ."),
                            ("p3", " long .", " quiet ."), ("p4", " fun .", " dull .")])
    oracle = OracleAnnotator.from_spec(seed=3)
    label_ids = oracle.label(store, 3)
    assert len(label_ids) == 3
    labels = list_labels(store)
    assert [label.id for label in labels] == label_ids
    assert {label.annotator for label in labels} == {"oracle"}
    expected = {pair_ids[0]: Outcome.FIRST, pair_ids[1]: Outcome.SECOND, pair_ids[2]: Outcome.TIE,
                pair_ids[3]: Outcome.FIRST}
    first_on_left = set()
    for label in labels:
        assert label.outcome is expected[label.pair_id]
        pair = get_pair(store, label.pair_id)
        assert label.left_id in (pair.first_id, pair.second_id)  # the side shown was recorded, as in the UI
        first_on_left.add(label.left_id == pair.first_id)
    assert first_on_left == {True, False}  # both screen orientations were mapped back to first/second
    # the queue runs dry: asking for more labels only the one pair left
    assert len(oracle.label(store, 10)) == 1
    assert oracle.label(store, 10) == []
    assert len(list_labels(store)) == 4


def app(*args):
    """`python app.py ARGS` in a subprocess, as a user runs it."""
    root = Path(__file__).resolve().parent.parent
    return subprocess.run([sys.executable, str(root / "app.py"), *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(root)})


def test_label_command_labels_n_pairs_as_the_oracle(store, queue_pairs):
    queue_pairs([("p1", " brilliant .", " boring ."), ("p2", " awful .", " great ."), ("p3", " fun .", " dull .")])
    result = app("label", "--db", str(store.path), "--annotator", "oracle", "--n", "2")
    assert result.returncode == 0, result.stderr
    assert "oracle labeled 2 pairs" in result.stdout
    assert [label.annotator for label in list_labels(store)] == ["oracle", "oracle"]
    result = app("label", "--db", str(store.path), "--n", "5")
    assert "oracle labeled 1 pairs (the queue ran out after 1)" in result.stdout


def test_label_command_bad_oracle_is_one_line_and_creates_no_store(tmp_path):
    db = tmp_path / "new.db"
    result = app("label", "--db", str(db), "--n", "3", "--oracle", "assets.lexicon:nope")
    assert result.returncode == 2
    assert result.stderr.strip().startswith("error: ") and len(result.stderr.strip().splitlines()) == 1
    assert not db.exists()
