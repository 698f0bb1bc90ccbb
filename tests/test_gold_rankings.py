"""Gold rankings (storage/gold_rankings.py, labeling/gold/gold_rankings.py, labeling/queue/gold_queue.py): rankings in
the `export --format rankings` format imported as gold, served to every annotator among their rankings every
`gold_every`-th, scored by the share of the gold order's strict comparisons the annotator ordered the same way; an
annotator following the demo's lexicon and one ranking at random told apart through the API and `status`; gold
rankings never train nor count toward a round; a bad row refused in one line naming it, nothing stored."""

import json
import random
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from gradio_client import Client

from assets.lexicon import sentiment_score
from labeling.gold.gold import gold_scores, import_gold_file, lift_flag, mark_gold_ranking, update_gold_settings
from labeling.queue.annotation import update_queue_settings
from labeling.queue.ranking import LETTERS, next_ranking, ranking_comparison_pairs, submit_ranking
from labeling.transfer.export import export_labels
from storage.errors import Conflict, InvalidInput
from storage.gold import count_all_gold, ranking_agreement
from storage.rankings import ranking_verdicts, round_ranking_count
from tests.test_rankings import queue_rankings
from trainers.jobs.reward_job import load_examples

ROOT = Path(__file__).resolve().parent.parent
# sentiment scores 3, 2, 1, -1, -3: best first
GRADED = ["a wonderful , brilliant and superb film", "a great and moving film", "a wonderful film", "a dull film",
          "a dull , awful and boring film"]


def gold_rows(n: int) -> list[dict]:
    """n gold rankings of 4 answers written worst first (so `order` is not the identity); every third ties the middle
    two, which the lexicon scores apart but the gold order does not compare."""
    rows = []
    for i in range(n):
        answers = [f"{text} ({i}) ." for text in GRADED[i % 2:i % 2 + 4]][::-1]
        row = {"prompt": f"Gold review {i}:", "responses": answers, "order": [3, 2, 1, 0], "ties": [], "all_bad": False}
        if i % 3 == 2:
            row["ties"] = [[1, 2]]
        rows.append(row)
    return rows


def write(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def lexicon_order(responses) -> str:
    return "".join(LETTERS[i] for i in sorted(range(len(responses)), key=lambda i: -sentiment_score(responses[i])))


def random_order(responses) -> str:
    """An order blind to sentiment, the same for the same texts whatever order they are shown in (so the test's
    outcome does not hang on the shuffle): by a draw seeded with each text."""
    draws = [random.Random(text).random() for text in responses]
    return "".join(LETTERS[i] for i in sorted(range(len(responses)), key=draws.__getitem__))


def gold_shown(store) -> list[tuple[list[str], list[list[int]]]]:
    """Each gold ranking in import order: its answers in the order shown, and its gold tiers over those positions."""
    db = store.db()
    out = []
    for ranking_id, tiers in db.execute("SELECT ranking_id, tiers FROM gold_rankings ORDER BY ranking_id").fetchall():
        texts = [t for (t,) in db.execute("SELECT g.text FROM ranking_members m JOIN generations g"
                                          " ON g.id = m.generation_id WHERE m.ranking_id = ? ORDER BY m.position",
                                          [ranking_id])]
        out.append((texts, json.loads(tiers)))
    return out


def test_agreement_counts_the_gold_orders_strict_comparisons_by_hand():
    gold = [[0], [1, 2], [3]]  # 0 > 1 = 2 > 3: five comparisons, 1-2 is none
    assert ranking_agreement(gold, [[1], [0], [2], [3]]) == (5, 4)  # 0-1 reversed; 0-2, 0-3, 1-3, 2-3 kept
    assert ranking_agreement(gold, [[0, 1, 2], [3]]) == (5, 3)  # a tie of 0 and 1 (and 0, 2) the gold separates
    assert ranking_agreement(gold, None) == (5, 0)  # all bad


def test_gold_rankings_come_every_nth_to_every_annotator_and_never_train_or_count(store, tmp_path):
    result = import_gold_file(store, write(tmp_path / "gold.jsonl", gold_rows(4)))
    assert (result.added, result.known, result.summary()) == (4, 0, "Imported 4 gold rankings (0 were gold already).")
    assert import_gold_file(store, write(tmp_path / "gold.jsonl", gold_rows(4))).known == 4  # again: nothing new
    queue_rankings(store, [(f"Review {i}:", [f"{t} [{i}] ." for t in GRADED[:4]]) for i in range(8)], round=1)
    update_gold_settings(store, gold_every=3)
    for name in ("alice", "bob"):  # overlap 1: the regular rankings split between them, the gold ones go to both
        seen = []
        for _ in range(6):
            shown = next_ranking(store, name)
            seen.append(shown.prompt.startswith("Gold"))
            submit_ranking(store, name, shown.ranking_id, lexicon_order(shown.responses), uuid.uuid4().hex)
        assert seen == [False, False, True, False, False, True], (name, seen)
    for k, (texts, tiers) in enumerate(gold_shown(store)):  # the gold order kept through the shuffle shown
        r = gold_rows(4)[k]["responses"]
        expected = [{r[3]}, {r[2], r[1]}, {r[0]}] if k % 3 == 2 else [{r[3]}, {r[2]}, {r[1]}, {r[0]}]
        assert [{texts[p] for p in tier} for tier in tiers] == expected
    assert any(texts != gold_rows(4)[k]["responses"] for k, (texts, _) in enumerate(gold_shown(store)))  # 1 in 24**4
    scores = {s.annotator: (s.correct, s.judged) for s in gold_scores(store)}
    assert scores == {"alice": (6 + 6, 12), "bob": (12, 12)}  # 2 gold rankings of 6 strict comparisons each
    assert len(ranking_verdicts(store)) == 12
    trained = ranking_verdicts(store, training=True)
    assert len(trained) == 8 == round_ranking_count(store, 1) and not any(v.prompt.startswith("Gold") for v in trained)
    assert len(ranking_comparison_pairs(store)) == 8 * 6
    examples, _ = load_examples(store)
    assert sorted(e.label_id for e in examples) == sorted(v.label_id for v in trained)
    export_labels(store, "rankings", tmp_path / "out.jsonl")
    exported = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert sorted(r["label_id"] for r in exported) == sorted(v.label_id for v in trained)  # the gold verdicts: none

    first = trained[0]  # a regular verdict marked gold: it stops training, and its own verdict scores no one
    assert mark_gold_ranking(store, first.label_id) == first.ranking_id
    with pytest.raises(Conflict):
        mark_gold_ranking(store, first.label_id)
    assert len(ranking_verdicts(store, training=True)) == 7 and count_all_gold(store) == 5
    assert first.ranking_id not in {e.ranking_id for e in load_examples(store)[0]}
    assert {s.annotator: s.judged for s in gold_scores(store)} == {"alice": 12, "bob": 12}


def test_a_flagged_annotators_rankings_are_left_out_and_back_in(store, tmp_path):
    import_gold_file(store, write(tmp_path / "gold.jsonl", gold_rows(1)))
    queue_rankings(store, [("r", ["x", "y", "z"])], round=1)
    update_gold_settings(store, gold_min_judgements=6, gold_exclude_flagged=True, gold_every=1)
    shown = next_ranking(store, "bob")  # the gold ranking first (every ranking is a gold turn); bob reverses it
    assert shown.prompt.startswith("Gold")
    submit_ranking(store, "bob", shown.ranking_id, lexicon_order(shown.responses)[::-1], "v1")
    shown = next_ranking(store, "bob")
    submit_ranking(store, "bob", shown.ranking_id, "ABC", "v2")
    [score] = gold_scores(store)
    assert (score.correct, score.judged, score.flagged, score.left_out) == (0, 6, True, True)
    assert ranking_verdicts(store, training=True) == [] and round_ranking_count(store, 1) == 1  # kept, counted
    lift_flag(store, "bob")
    assert [v.annotator for v in ranking_verdicts(store, training=True)] == ["bob"]


def test_through_the_api_and_status_a_lexicon_ranker_and_a_random_one_are_told_apart(store, serve_studio, tmp_path):
    gold = write(tmp_path / "gold.jsonl", gold_rows(10))
    result = subprocess.run([sys.executable, "app.py", "import-gold", "--db", str(store.path), str(gold)], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "Imported 10 gold rankings" in result.stdout, result.stderr
    queue_rankings(store, [(f"Review {i}:", [f"{t} [{i}] ." for t in GRADED[:4]]) for i in range(10)], round=1)
    update_queue_settings(store, overlap=2)
    client = Client(serve_studio(store).local_url, verbose=False)
    choose = {"lexi": lexicon_order, "rando": random_order}
    for name in ("lexi", "rando"):
        shown = client.predict(name, api_name="/next_ranking")
        while shown["ranking_id"] is not None:
            answer = client.predict(name, shown["ranking_id"], choose[name](shown["responses"]), uuid.uuid4().hex,
                                    api_name="/submit_ranking")
            shown = answer["next"]
    scores = {row["annotator"]: row for row in client.predict(api_name="/gold_accuracy")}
    judged = 7 * 6 + 3 * 5  # rows 2, 5 and 8 tie two answers: 5 strict comparisons
    assert scores["lexi"]["judged"] == scores["rando"]["judged"] == judged
    assert scores["lexi"]["accuracy"] == 1.0 and scores["rando"]["accuracy"] <= 0.65, scores
    assert scores["rando"]["flagged"] and not scores["lexi"]["flagged"]
    status = subprocess.run([sys.executable, "app.py", "status", "--db", str(store.path)], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert f"gold accuracy lexi: {judged}/{judged} gold (100%)" in status.stdout
    assert f"gold accuracy rando: {scores['rando']['correct']}/{judged} gold" in status.stdout
    assert "flagged" in status.stdout
    marked = next(v for v in ranking_verdicts(store) if v.annotator == "lexi" and not v.prompt.startswith("Gold"))
    said, _ = client.predict(marked.label_id, api_name="/mark_gold_ranking")  # the message, the refreshed table
    assert said == (f"Ranking order {marked.label_id} is gold now: its ranking ({marked.ranking_id}) is a gold "
                    "ranking, that order its answer.")
    after = {row["annotator"]: row["judged"] for row in client.predict(api_name="/gold_accuracy")}
    assert after == {"lexi": judged, "rando": judged + 6}  # rando's verdict on it counts, lexi's (its origin) not


BAD_ROWS = {
    "order letters": ({"order": "ABCE"}, "line 2: 'order' the order holds 'E'"),
    "order indices": ({"order": [0, 1, 2, 2]}, "line 2: 'order' must list each index"),
    "two answers": ({"responses": ["good .", "bad ."], "order": [0, 1]}, "line 2: 'responses' holds 2 answers"),
    "seven answers": ({"responses": [f"a{i}" for i in range(7)], "order": list(range(7))}, "holds 7 answers"),
    "duplicate": ({"responses": ["same .", "other .", "same .", "x ."]}, "line 2: responses A and C are the same"),
    "ties apart": ({"ties": [[3, 1]]}, "line 2: tie group [3, 1] must name 2 or more indices that neighbour"),
    "all bad": ({"all_bad": True, "order": []}, "line 2: an all-bad row"),
    "all tied": ({"order": "A=B=C=D"}, "line 2: the order ties every answer"),
}


@pytest.mark.parametrize("case", sorted(BAD_ROWS))
def test_a_bad_gold_ranking_row_is_refused_in_one_line_naming_it_and_nothing_is_stored(store, tmp_path, case):
    change, message = BAD_ROWS[case]
    [good, bad] = gold_rows(2)
    with pytest.raises(InvalidInput) as refused:
        import_gold_file(store, write(tmp_path / "gold.jsonl", [good, {**bad, **change}]))
    assert message in str(refused.value) and "\n" not in str(refused.value), str(refused.value)
    assert count_all_gold(store) == 0


def test_the_import_command_refuses_a_bad_row_in_one_line(store, tmp_path):
    gold = write(tmp_path / "gold.jsonl", [{**gold_rows(1)[0], "order": "ABC"}])
    result = subprocess.run([sys.executable, "app.py", "import-gold", "--db", str(store.path), str(gold)], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "line 1: 'order' the order must name each of ABCD once; missing D" in result.stderr
