"""Pair selection: candidates, the seeded random selector and the ensemble-disagreement selector."""

import numpy as np
import pytest

from labeling.selection import Candidate, candidate_pairs, disagreement_scores, select_by_disagreement, select_random
from storage.errors import InvalidInput
from storage.generations import NewGeneration, add_generations, list_generations
from storage.pairs import add_pairs, list_pairs
from storage.policies import add_policy
from storage.prompts import add_prompts, list_prompts
from storage.types import Generation


def gen(id, prompt_id, text, policy_id=7):
    return Generation(id, prompt_id, policy_id, text, None, {}, None, None, None)


def test_candidates_pair_distinct_texts_of_the_same_prompt():
    gens = [gen(1, 10, "a"), gen(2, 10, "b"), gen(3, 11, "c"), gen(4, 10, "a"), gen(5, 11, "d"), gen(6, 12, "e")]
    keys = [c.key for c in candidate_pairs(gens)]
    # prompt 10: 1-2, 2-4 (1 and 4 share a text); prompt 11: 3-5; prompt 12 has one response only
    assert keys == [(1, 2), (2, 4), (3, 5)]
    assert [c.prompt_id for c in candidate_pairs(gens)] == [10, 10, 11]


def test_candidates_exclude_already_queued_pairs_in_either_order():
    gens = [gen(1, 10, "a"), gen(2, 10, "b"), gen(3, 10, "c")]
    assert [c.key for c in candidate_pairs(gens, exclude=[(2, 1)])] == [(1, 3), (2, 3)]


def test_random_selector_is_seeded_ordered_by_score_and_limited():
    gens = [gen(i, 10 + i // 4, f"text {i}") for i in range(1, 21)]
    candidates = candidate_pairs(gens)
    pairs = select_random(candidates, n=5, seed=3, round=2)
    assert len(pairs) == 5
    scores = [p.score for p in pairs]
    assert scores == sorted(scores, reverse=True)
    assert all(0.0 <= s < 1.0 for s in scores)
    assert {p.selector for p in pairs} == {"random"} and {p.round for p in pairs} == {2}
    assert {p.policy_id for p in pairs} == {7}
    assert pairs == select_random(candidates, n=5, seed=3, round=2)
    assert pairs != select_random(candidates, n=5, seed=4, round=2)
    assert len(select_random(candidates, seed=3)) == len(candidates)
    for p in pairs:  # each pair is two different generations of its prompt
        first, second = gens[p.first_id - 1], gens[p.second_id - 1]
        assert first.prompt_id == second.prompt_id == p.prompt_id and first.id != second.id


def test_random_selector_rejects_a_negative_count():
    with pytest.raises(InvalidInput):
        select_random(candidate_pairs([gen(1, 1, "a"), gen(2, 1, "b")]), n=-1)


def test_selected_pairs_store_with_their_scores(store):
    add_prompts(store, ["p1", "p2"])
    policy = add_policy(store, "/nowhere")
    prompt_ids = [p.id for p in list_prompts(store)]
    add_generations(store, [NewGeneration(pid, f"r{k} of {pid}", policy_id=policy)
                            for pid in prompt_ids for k in range(3)])
    pairs = select_random(candidate_pairs(list_generations(store, policy_id=policy)), n=4, seed=0, round=1)
    add_pairs(store, pairs)
    stored = list_pairs(store, round=1)
    assert [(p.first_id, p.second_id, p.score, p.selector, p.policy_id) for p in stored] == \
        [(p.first_id, p.second_id, p.score, "random", policy) for p in pairs]


def test_disagreement_scores_are_the_std_across_members():
    probs = np.array([[0.5, 0.9, 0.2],
                      [0.5, 0.1, 0.4]])
    # population std of two values is half their distance
    assert disagreement_scores(probs) == pytest.approx([0.0, 0.4, 0.1])
    with pytest.raises(InvalidInput):
        disagreement_scores(probs[:1])


def test_disagreement_selector_puts_the_most_disputed_pairs_first():
    candidates = [Candidate(gen(2 * i + 1, i, "a"), gen(2 * i + 2, i, "b")) for i in range(4)]
    probs = np.array([[0.5, 0.9, 0.2, 0.6],
                      [0.5, 0.1, 0.4, 0.6],
                      [0.5, 0.5, 0.3, 0.6]])
    pairs = select_by_disagreement(candidates, probs, n=2, round=3)
    assert [p.prompt_id for p in pairs] == [1, 2]
    assert pairs[0].score == pytest.approx(np.std([0.9, 0.1, 0.5]))
    assert {p.selector for p in pairs} == {"disagreement"} and {p.round for p in pairs} == {3}
    with pytest.raises(ValueError):
        select_by_disagreement(candidates[:3], probs)
