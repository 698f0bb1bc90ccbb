"""Rankings of K answers (storage/rankings.py, labeling/queue/ranking.py) and how they train (trainers/reward/data.py,
the reward job's examples): the notation, every comparison by hand, the queue with reservations, overlap, replays and
undo; the 1/C(K,2) loss against a hand computation; a batch sized in pairs' worth of answers (a ranking of K counts
K/2 pairs); a ranking never split across training and validation, drawn whole by the bootstrap."""

import json
import math
from dataclasses import asdict

import datasets
import pytest
import torch

from labeling.queue.annotation import update_queue_settings
from labeling.queue.ranking import (
    comparisons,
    next_ranking,
    order_text,
    parse_order,
    ranking_comparison_pairs,
    submit_ranking,
    undo_ranking,
)
from labeling.transfer.export import export_labels
from storage.errors import Conflict, InvalidInput
from storage.generations import NewGeneration, add_generations
from storage.prompts import add_prompts, list_prompts
from storage.rankings import NewRanking, add_rankings, list_rankings, ranking_verdicts
from storage.types import Outcome
from tests.helpers import label_pairs
from trainers.jobs.reward_job import load_examples
from trainers.models.loading import load_chat_format, load_reward_model, load_tokenizer
from trainers.reporting import Reporter
from trainers.reward.batches import whole_rows
from trainers.reward.config import RewardConfig
from trainers.reward.data import (
    PreferenceCollator,
    PreferenceExample,
    RankingExample,
    bootstrap,
    example_from_dict,
    examples_per_batch,
    lineage_split,
    split_by_pair,
    tokenize_examples,
)
from trainers.reward.loss import preference_loss
from trainers.reward.scorer import sequence_scores
from trainers.reward.trainer import PreferenceTrainer, train_member, training_arguments


def queue_rankings(store, items, round=0, job_id=None):
    """`items`: [(prompt, [answers...])] queued as rankings in that shown order (owned by loop job `job_id`; None: the
    people's queue); returns their ids."""
    add_prompts(store, [prompt for prompt, _ in items])
    ids = {p.text: p.id for p in list_prompts(store)}
    new = []
    for prompt, answers in items:
        generations = add_generations(store, [NewGeneration(ids[prompt], a) for a in answers])
        new.append(NewRanking(ids[prompt], tuple(generations), "random", round=round))
    return add_rankings(store, new, job_id)


# ---- notation and comparisons -------------------------------------------------------------------------------------

def test_an_order_is_letters_best_first_with_ties_between_neighbours():
    assert parse_order("BA=CD", 4) == ("ranked", [[1], [0, 2], [3]])
    assert parse_order("b, a = c, d", 4) == ("ranked", [[1], [0, 2], [3]])
    assert parse_order("all_bad", 3) == ("all_bad", None) and parse_order("skip", 3) == ("skip", None)
    assert order_text([[1], [0, 2], [3]]) == "BA=CD"
    for bad, message in (("ABC", "missing D"), ("ABCDD", "twice D"), ("AB=CE", "'E'"), ("=ABCD", "between"),
                         ("AB==CD", "between"), ("ABCD=", "between"), (4, "must be text")):
        with pytest.raises(InvalidInput, match=message):
            parse_order(bad, 4)


def test_every_comparison_of_a_ranking_by_hand():
    # B > A = C > D: A-B 0, A-C tie, A-D 1, B-C 1, B-D 1, C-D 1
    assert comparisons([[1], [0, 2], [3]]) == [(0, 1, 0.0), (0, 2, 0.5), (0, 3, 1.0), (1, 2, 1.0), (1, 3, 1.0),
                                               (2, 3, 1.0)]
    assert len(comparisons([[p] for p in range(6)])) == math.comb(6, 2)


# ---- the queue ----------------------------------------------------------------------------------------------------

def test_a_ranking_is_reserved_judged_replayed_and_undone(store):
    [first, second] = queue_rankings(store, [("p1", ["a", "b", "c", "d"]), ("p2", ["e", "f", "g"])])
    shown = next_ranking(store, "alice")
    assert (shown.ranking_id, shown.responses, shown.letters) == (first, ("a", "b", "c", "d"), "ABCD")
    assert next_ranking(store, "alice").ranking_id == first  # her reservation comes back
    assert next_ranking(store, "bob").ranking_id == second  # overlap 1: bob gets the other one
    with pytest.raises(InvalidInput, match="missing"):
        submit_ranking(store, "alice", first, "ABC", "v1")
    label_id = submit_ranking(store, "alice", first, "BA=CD", "v1", decision_ms=1200)
    assert submit_ranking(store, "alice", first, "BA=CD", "v1") == label_id  # a replay stores nothing
    with pytest.raises(Conflict, match="not reserved"):
        submit_ranking(store, "alice", second, "ABC", "v2")
    [verdict] = ranking_verdicts(store)
    assert (verdict.tiers, verdict.decision_ms, verdict.responses) == ([[1], [0, 2], [3]], 1200, ("a", "b", "c", "d"))
    assert list_rankings(store)[0].votes == 1
    again = undo_ranking(store, "alice")
    assert again.ranking_id == first and ranking_verdicts(store) == [] and list_rankings(store)[0].votes == 0
    submit_ranking(store, "alice", first, "all_bad", "v3")
    assert [v.outcome for v in ranking_verdicts(store)] == ["all_bad"]
    assert len(ranking_verdicts(store, include_undone=True)) == 2  # the undone verdict is kept


def test_overlap_two_serves_a_ranking_to_two_annotators(store):
    [ranking] = queue_rankings(store, [("p", ["a", "b", "c"])])
    update_queue_settings(store, overlap=2)
    for name, order in (("alice", "ABC"), ("bob", "C=BA")):
        shown = next_ranking(store, name)
        assert shown.ranking_id == ranking
        submit_ranking(store, name, ranking, order, f"v-{name}")
    assert next_ranking(store, "carol") is None and next_ranking(store, "alice") is None
    assert [v.annotator for v in ranking_verdicts(store)] == ["alice", "bob"]


def test_comparisons_reach_dpo_and_the_export_as_pairs(store):
    [ranking] = queue_rankings(store, [("p", ["a", "b", "c"])])
    next_ranking(store, "alice")
    submit_ranking(store, "alice", ranking, "B=CA", "v1")
    got = [(lp.first, lp.second, lp.outcome, lp.pair_id) for lp in ranking_comparison_pairs(store)]
    assert got == [("a", "b", Outcome.SECOND, None), ("a", "c", Outcome.SECOND, None), ("b", "c", Outcome.TIE, None)]


# ---- training -----------------------------------------------------------------------------------------------------

def test_a_verdict_is_one_example_of_its_comparisons(store):
    queue_rankings(store, [("p", ["a", "b", "c"]), ("q", ["d", "e", "f"])])
    for order in ("CAB", "all_bad"):
        shown = next_ranking(store, "alice")
        submit_ranking(store, "alice", shown.ranking_id, order, f"v-{order}")
    examples, _ = load_examples(store)
    assert [(e.responses, e.comparisons) for e in examples] == [
        (("a", "b", "c"), [(0, 1, 1.0), (0, 2, 0.0), (1, 2, 0.0)]),
        (("d", "e", "f"), [(0, 1, 0.5), (0, 2, 0.5), (1, 2, 0.5)])]
    assert [len(e.comparisons) for e in load_examples(store, both_bad_as_tie=False)[0]] == [3]


def test_a_rankings_comparisons_weigh_one_over_c_k_2_by_hand():
    """Ranking of 3, scores (2, 1, 0), order A > B = C: -log s(1) = 0.31326, -log s(2) = 0.12693, and the tie at
    d = 1: (0.31326 + 1.31326) / 2 = 0.81326; its mean 0.41782. A pair with d = 0.5 won by the first:
    log(1 + e^-0.5) = 0.47408. The batch of the two elements: (0.41782 + 0.47408) / 2 = 0.44595."""
    first = torch.tensor([2.0, 2.0, 1.0, 0.5], dtype=torch.float64)
    second = torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=torch.float64)
    target = torch.tensor([1.0, 1.0, 0.5, 1.0], dtype=torch.float64)
    weight = torch.tensor([1 / 3, 1 / 3, 1 / 3, 1.0], dtype=torch.float64)
    assert preference_loss(first, second, target, weight=weight).item() == pytest.approx(0.445951, abs=1e-5)


def test_the_trainer_scores_each_answer_once_and_weighs_a_ranking_as_one_element(tiny_gpt2_dir, tmp_path, one_thread):
    ranking = RankingExample(1, 7, "the movie was", (" great .", " bad .", " ok ."), [(0, 1, 1.0), (0, 2, 1.0),
                                                                                      (1, 2, 0.5)])
    pair = PreferenceExample(2, 3, "the film", " fun .", " dull .", 0.0)
    rows = list(tokenize_examples(load_chat_format(tiny_gpt2_dir), [ranking, pair]))
    batch = PreferenceCollator(load_tokenizer(tiny_gpt2_dir).pad_token_id)(rows)
    assert batch["response_ids"].shape[0] == 5 and batch["prompt_ids"].shape[0] == 2  # not 2 x 4 comparisons
    assert batch["weight"].tolist() == pytest.approx([1 / 3] * 3 + [1.0])
    torch.manual_seed(0)
    model = load_reward_model(tiny_gpt2_dir)
    trainer = PreferenceTrainer(model=model, args=training_arguments(RewardConfig(), str(tmp_path), 0, False))
    s = sequence_scores(model, *whole_rows(batch)).double()
    ls = torch.nn.functional.logsigmoid
    tie = -(0.5 * ls(s[1] - s[2]) + 0.5 * ls(s[2] - s[1]))
    expected = ((-ls(s[0] - s[1]) - ls(s[0] - s[2]) + tie) / 3 - ls(s[4] - s[3])) / 2
    assert trainer.compute_loss(model, batch).item() == pytest.approx(expected.item(), rel=1e-5)


def ranking_of(k: int, i: int = 0) -> RankingExample:
    answers = tuple(f" answer {j} ." for j in range(k))
    return RankingExample(i, i, "the movie was", answers, [(a, b, 1.0) for a in range(k) for b in range(a + 1, k)])


def test_a_batch_holds_as_many_answers_as_its_pairs_by_hand():
    """round(16 x 2 x examples / answers): pairs alone 32n / 2n = 16; rankings of 4 alone 32n / 4n = 8; rankings of 3
    32 / 3 = 10.67 -> 11; 8 pairs and 8 rankings of 4: 32 x 16 / (16 + 32) = 10.67 -> 11; batch 1 of rankings of 6:
    2 / 6 -> 0, at least 1; no examples: the pairs' 16."""
    pairs = [PreferenceExample(i, i, "p", "a", "b", 1.0) for i in range(10)]
    fours = [ranking_of(4, i) for i in range(10)]
    assert examples_per_batch(pairs, 16) == 16
    assert examples_per_batch(fours, 16) == 8
    assert examples_per_batch([ranking_of(3, i) for i in range(5)], 16) == 11
    assert examples_per_batch(pairs[:8] + fours[:8], 16) == 11
    assert examples_per_batch([ranking_of(6)], 1) == 1
    assert examples_per_batch([], 16) == 16


class StepCounter(Reporter):
    def __init__(self):
        self.total = None

    def progress(self, done, total):
        self.total = total


def test_rankings_train_for_the_steps_of_the_pairs_they_stand_for(tiny_gpt2_dir, tmp_path, one_thread):
    """8 rankings of 4 read the 32 answers of 16 pairs: batch 4 (pairs) is 2 rankings a step, so one epoch is 4 steps
    for both, where 4 rankings a step would give the rankings 2."""
    chat = load_chat_format(tiny_gpt2_dir)
    config = RewardConfig(epochs=1, batch_size=4, logging_steps=100)
    pairs = [PreferenceExample(i, i, "the film", f" fun {i} .", " dull .", 1.0) for i in range(16)]
    steps = []
    for k, examples in enumerate(([ranking_of(4, i) for i in range(8)], pairs)):
        counter = StepCounter()
        train_member(config, 0, tiny_gpt2_dir, chat, examples, [], tmp_path / f"member-{k}", counter)
        steps.append(counter.total)
    assert steps == [4, 4]


def test_a_ranking_is_never_split_across_training_and_validation_and_is_drawn_whole():
    rankings = [RankingExample(i, i // 2, "p", ("a", "b", "c"), [(0, 1, 1.0), (0, 2, 1.0), (1, 2, 1.0)])
                for i in range(40)]  # 20 items, two verdicts each
    pairs = [PreferenceExample(100 + i, i, "p", "a", "b", 1.0) for i in range(20)]
    examples = rankings + pairs
    continued = lineage_split(examples, {"ranking-label-0"}, {"ranking-3"}, 0.3, seed=4)
    for train, val in (split_by_pair(examples, 0.3, seed=4), continued):
        assert val and not {e.unit for e in train} & {e.unit for e in val}
        assert sum(isinstance(e, RankingExample) for e in val) % 2 == 0  # both verdicts of an item on one side
    drawn = bootstrap(examples, seed=0)
    assert len(drawn) == len(examples) and all(e in examples for e in drawn)
    assert example_from_dict(json.loads(json.dumps(asdict(rankings[0])))) == rankings[0]  # a launched phase's plan


def test_the_export_has_a_rankings_comparisons_and_keeps_whole_orders(store, queue_pairs, tmp_path):
    [pair] = queue_pairs([("q", "x", "y")])
    [ranking, other] = queue_rankings(store, [("p", ["a", "b", "c"]), ("r", ["d", "e"])])
    for ranking_id, order in ((ranking, "B=CA"), (other, "skip")):
        next_ranking(store, "alice")
        submit_ranking(store, "alice", ranking_id, order, f"v{ranking_id}")
    label_pairs(store, "alice", {pair: Outcome.FIRST})
    trl = export_labels(store, "trl", tmp_path / "trl.jsonl")
    rows = [json.loads(line) for line in (tmp_path / "trl.jsonl").read_text().splitlines()]
    assert trl.rows == 3 and trl.ties == 1  # x > y; b > a, c > a; b = c left out
    assert [(r["prompt"], r["chosen"], r["rejected"]) for r in rows] == [("q", "x", "y"), ("p", "b", "a"),
                                                                         ("p", "c", "a")]
    export_labels(store, "soft", tmp_path / "soft.jsonl")
    soft = [json.loads(line) for line in (tmp_path / "soft.jsonl").read_text().splitlines()]
    assert [(r["pair_id"] is None, r["ranking_id"], r["target"]) for r in soft] == [
        (False, None, 1.0), (True, ranking, 0.0), (True, ranking, 0.0), (True, ranking, 0.5)]
    whole = export_labels(store, "rankings", tmp_path / "rankings.jsonl")
    [row] = [json.loads(line) for line in (tmp_path / "rankings.jsonl").read_text().splitlines()]
    assert (whole.rows, whole.skips) == (1, 1)
    assert {k: row[k] for k in ("prompt", "responses", "order", "ties", "all_bad")} == {
        "prompt": "p", "responses": ["a", "b", "c"], "order": [1, 2, 0], "ties": [[1, 2]], "all_bad": False}
    assert datasets.load_dataset("json", data_files=str(tmp_path / "rankings.jsonl"), split="train")[0]["order"] == \
        [1, 2, 0]
