"""Gold items (storage/gold.py, storage/gold_items.py, labeling/gold/gold.py, labeling/queue/gold_queue.py,
app/data/gold_panel.py): imported gold pairs served to every annotator among their others, looking the same;
per-annotator accuracy that tells an annotator following the demo's lexicon from one voting at random, through the API
and in `status`; gold never trains nor counts toward a round; flagged annotators' labels left out of training and back
in when lifted."""

import json
import random
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from gradio_client import Client

from assets.lexicon import sentiment_score
from labeling.gold.gold import gold_scores, import_gold_file, lift_flag, mark_gold, update_gold_settings
from labeling.queue.annotation import next_pair, submit_label, update_queue_settings
from storage.errors import Conflict, InvalidInput
from storage.labels import list_labels, training_labels
from storage.rounds import round_label_count

ROOT = Path(__file__).resolve().parent.parent
GOOD = ["a wonderful , moving film .", "great acting and a superb story .", "a brilliant and delightful movie ."]
BAD = ["a dull , boring mess .", "awful acting and a terrible plot .", "a stupid and tedious movie ."]


def gold_file(tmp_path, n=10) -> Path:
    rows = [{"prompt": f"Gold review {i}:", "chosen": GOOD[i % 3] + f" ({i})", "rejected": BAD[i % 3] + f" ({i})"}
            for i in range(n)]
    assert all(sentiment_score(r["chosen"]) > sentiment_score(r["rejected"]) for r in rows)
    path = tmp_path / "gold.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def lexicon_choice(shown) -> str:
    return "left" if sentiment_score(shown["left"]) > sentiment_score(shown["right"]) else "right"


def blind_choice(shown) -> str:
    """A vote blind to sentiment, the same for the same pair whichever side each answer shows on (so the test's
    outcome does not hang on the queue's coin): the answer whose text draws higher, seeded with it."""
    return "left" if random.Random(shown["left"]).random() > random.Random(shown["right"]).random() else "right"


def label_all(client, name, choose):
    shown = client.predict(name, api_name="/next_pair")
    while shown["pair_id"] is not None:
        answer = client.predict(name, shown["pair_id"], choose(shown), uuid.uuid4().hex, api_name="/submit_label")
        shown = answer["next"]


def regular_pairs(queue_pairs, n=10):
    return queue_pairs([(f"Review {i}:", GOOD[i % 3] + f" [{i}]", BAD[i % 3] + f" [{i}]") for i in range(n)], round=1)


def test_gold_pairs_come_every_nth_to_every_annotator_and_never_train_or_count(store, queue_pairs, tmp_path):
    result = import_gold_file(store, gold_file(tmp_path, 4))
    assert (result.added, result.known) == (4, 0)
    assert import_gold_file(store, gold_file(tmp_path, 4)).known == 4  # again: nothing new
    regular_pairs(queue_pairs, 8)
    update_gold_settings(store, gold_every=3)
    for name in ("alice", "bob"):  # overlap 1: the regular pairs split between them, the gold ones go to both
        seen = []
        for _ in range(6):
            shown = next_pair(store, name)
            seen.append(shown.prompt.startswith("Gold"))
            submit_label(store, name, shown.pair_id, "left", uuid.uuid4().hex)
        assert seen == [False, False, True, False, False, True], (name, seen)
    trained = {lp.pair_id for lp in training_labels(store)}
    gold_labels = [lab for lab in list_labels(store) if lab.pair_id not in trained]
    assert len(gold_labels) == 4  # 2 gold judgements each, kept ...
    assert len(training_labels(store)) == 8 == round_label_count(store, 1)  # ... and neither trained nor counted
    assert {s.annotator: s.judged for s in gold_scores(store)} == {"alice": 2, "bob": 2}


def test_flagged_annotators_labels_are_left_out_and_back_in_when_lifted(store, queue_pairs, tmp_path):
    import_gold_file(store, gold_file(tmp_path, 5))
    regular_pairs(queue_pairs, 10)
    update_queue_settings(store, overlap=2)
    update_gold_settings(store, gold_every=2, gold_min_judgements=5)
    for name in ("alice", "bob"):
        while (shown := next_pair(store, name)) is not None:
            good_left = sentiment_score(shown.left) > sentiment_score(shown.right)
            right = "left" if good_left else "right"
            submit_label(store, name, shown.pair_id, right if name == "alice" else {"left": "right", "right": "left"}[
                right], uuid.uuid4().hex)
    scores = {s.annotator: s for s in gold_scores(store)}
    assert (scores["alice"].correct, scores["bob"].correct) == (5, 0) and scores["bob"].flagged
    assert not scores["alice"].flagged and not scores["bob"].left_out  # flagged, still trained: exclusion is off
    trainers = lambda: sorted({lp.annotator for lp in training_labels(store)})  # noqa: E731
    assert trainers() == ["alice", "bob"]
    update_gold_settings(store, gold_exclude_flagged=True)
    assert trainers() == ["alice"] and {s.annotator for s in gold_scores(store) if s.left_out} == {"bob"}
    assert len([lab for lab in list_labels(store) if lab.annotator == "bob"]) == 15  # kept
    lift_flag(store, "bob")
    assert trainers() == ["alice", "bob"] and not {s.annotator: s for s in gold_scores(store)}["bob"].flagged
    lift_flag(store, "bob", lifted=False)
    assert trainers() == ["alice"]


def test_a_labelled_pair_is_marked_gold_with_its_answer(store, queue_pairs):
    [pair, _] = queue_pairs([("p", "good", "bad"), ("q", "x", "y")])
    shown = next_pair(store, "alice")
    label_id = submit_label(store, "alice", shown.pair_id, "tie", "v1")
    assert mark_gold(store, label_id) == pair
    with pytest.raises(Conflict):
        mark_gold(store, label_id)
    assert training_labels(store) == [] and gold_scores(store) == []  # the marking label is no judgement of alice
    shown = next_pair(store, "bob")  # not bob's turn for gold: the other pair ...
    submit_label(store, "bob", shown.pair_id, "left", "v3")
    assert next_pair(store, "bob").pair_id == pair  # ... then, nothing else open, the gold pair, whatever the overlap
    submit_label(store, "bob", pair, "tie", "v2")
    assert [(s.annotator, s.correct, s.judged) for s in gold_scores(store)] == [("bob", 1, 1)]
    for bad in ({"gold_every": 0}, {"gold_min_accuracy": 2}, {"gold_exclude_flagged": "yes"}, {"gold_lifted": []}):
        with pytest.raises(InvalidInput):
            update_gold_settings(store, **bad)


def test_through_the_api_and_status_a_lexicon_annotator_and_a_random_one_are_told_apart(store, queue_pairs,
                                                                                      serve_studio, tmp_path):
    gold = gold_file(tmp_path, 10)
    result = subprocess.run([sys.executable, "app.py", "import-gold", "--db", str(store.path), str(gold)], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "Imported 10 gold pairs" in result.stdout, result.stderr
    regular_pairs(queue_pairs, 10)
    update_queue_settings(store, overlap=2)
    client = Client(serve_studio(store).local_url, verbose=False)
    label_all(client, "lexi", lexicon_choice)
    label_all(client, "rando", blind_choice)
    scores = {row["annotator"]: row for row in client.predict(api_name="/gold_accuracy")}
    assert scores["lexi"]["judged"] == scores["rando"]["judged"] == 10
    assert scores["lexi"]["accuracy"] == 1.0 and scores["rando"]["accuracy"] <= 0.6, scores
    assert scores["rando"]["flagged"] and not scores["lexi"]["flagged"]
    status = subprocess.run([sys.executable, "app.py", "status", "--db", str(store.path)], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert "gold accuracy lexi: 10/10 gold (100%)" in status.stdout
    assert f"gold accuracy rando: {scores['rando']['correct']}/10 gold" in status.stdout and "flagged" in status.stdout
    bad = subprocess.run([sys.executable, "app.py", "import-gold", "--db", str(store.path), str(tmp_path / "no.jsonl")],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


def test_a_flagged_annotators_rankings_are_left_out_of_training_too(store, queue_pairs, tmp_path):
    from labeling.queue.ranking import next_ranking, ranking_comparison_pairs, submit_ranking
    from tests.test_rankings import queue_rankings
    from trainers.jobs.reward_job import load_examples

    import_gold_file(store, gold_file(tmp_path, 1))
    [ranking] = queue_rankings(store, [("r", ["x", "y", "z"])])
    update_gold_settings(store, gold_min_judgements=1, gold_exclude_flagged=True)
    shown = next_pair(store, "bob")  # the gold pair, nothing else open; bob gets it wrong
    good_left = sentiment_score(shown.left) > sentiment_score(shown.right)
    submit_label(store, "bob", shown.pair_id, "right" if good_left else "left", "v1")
    next_ranking(store, "bob")
    submit_ranking(store, "bob", ranking, "ABC", "v2")
    assert [s.left_out for s in gold_scores(store)] == [True]
    assert ranking_comparison_pairs(store) == []
    with pytest.raises(InvalidInput):  # nothing left to train on
        load_examples(store)
    lift_flag(store, "bob")
    assert len(load_examples(store)[0]) == 1 and len(ranking_comparison_pairs(store)) == 3
