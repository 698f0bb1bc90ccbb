"""Pair selection: candidates, the seeded random selector, the ensemble-disagreement selector, and the posterior
selectors' scores on hand-computed cases (double Thompson sampling, information gain, BAL-PM-style diversity,
D-optimal design)."""

import numpy as np
import pytest

from labeling.queue.selection import (
    Candidate,
    candidate_pairs,
    d_optimal_order,
    disagreement_scores,
    information_gain,
    select_by_disagreement,
    select_by_information_gain,
    select_d_optimal,
    select_diverse,
    select_double_thompson,
    select_random,
)
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


def test_candidates_pair_new_responses_with_an_earlier_versions_but_never_two_earlier_ones():
    new = [gen(5, 10, "a"), gen(6, 10, "b"), gen(7, 11, "c")]
    older = [gen(1, 10, "x", 3), gen(2, 10, "a", 3), gen(3, 11, "y", 3), gen(4, 12, "z", 3), gen(8, 11, "w", 3)]
    keys = [c.key for c in candidate_pairs(new, older=older)]
    # prompt 10: 5-6 among the new, 1-5, 1-6 and 2-6 across (2 and 5 share a text), never 1-2; prompt 11: 3-7 and
    # 7-8 across, never 3-8; prompt 12 has no new response
    assert keys == [(1, 5), (1, 6), (2, 6), (5, 6), (3, 7), (7, 8)]
    assert [c.key for c in candidate_pairs(new, exclude=[(6, 1), (7, 3)], older=older)] == [(1, 5), (2, 6), (5, 6),
                                                                                          (7, 8)]


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


def one_prompt(n_responses: int, prompt_id: int = 1, first_id: int = 1) -> list[Candidate]:
    gens = [gen(first_id + i, prompt_id, f"response {first_id + i}") for i in range(n_responses)]
    return candidate_pairs(gens)


def test_double_thompson_pairs_the_best_response_of_one_seeded_draw_with_the_best_partner_under_another():
    candidates = one_prompt(3)  # responses 1, 2, 3: pairs (1,2), (1,3), (2,3)
    rewards = np.array([[3.0, 2.0, 1.0],   # draw 0: 1 > 2 > 3
                        [1.0, 2.0, 3.0]])  # draw 1: 3 > 2 > 1
    # by hand: (first draw, second draw) -> a = best under the first; b = a's best partner under the second
    expected = {(0, 0): (1, 2), (0, 1): (1, 3), (1, 0): (1, 3), (1, 1): (2, 3)}
    for seed in range(6):
        rng = np.random.default_rng(seed)
        rng.permutation([1])  # the pass's prompt order (one prompt)
        draws = (int(rng.integers(2)), int(rng.integers(2)))
        [pair] = select_double_thompson(candidates, rewards, [1, 2, 3], n=1, seed=seed, round=4)
        assert (pair.first_id, pair.second_id) == expected[draws]
        assert pair.selector == "thompson" and pair.round == 4
    assert select_double_thompson(candidates, rewards, [1, 2, 3], n=3, seed=3) == \
        select_double_thompson(candidates, rewards, [1, 2, 3], n=3, seed=3)


def test_double_thompson_with_a_certain_reward_model_compares_its_two_best_responses_one_prompt_at_a_time():
    candidates = one_prompt(4, prompt_id=1, first_id=1) + one_prompt(3, prompt_id=2, first_id=11)
    rewards = np.tile([0.0, 5.0, 1.0, 4.0, 9.0, 7.0, 8.0], (3, 1))  # every draw the same: 2 > 4 > 3 > 1; 11 > 13 > 12
    pairs = select_double_thompson(candidates, rewards, [1, 2, 3, 4, 11, 12, 13], n=3, seed=0)
    keys = [(p.first_id, p.second_id) for p in pairs]
    assert sorted(keys[:2]) == [(2, 4), (11, 13)]  # one pair per prompt per pass: each prompt's best two
    assert keys[2] in {(2, 3), (11, 12)}  # the next pass: the best response against its best remaining partner
    assert [p.score for p in pairs] == sorted((p.score for p in pairs), reverse=True)
    with pytest.raises(ValueError):
        select_double_thompson(candidates, rewards[:, :3], [1, 2, 3])


def test_information_gain_is_zero_for_a_certain_pair_and_for_a_coin_toss_all_draws_agree_on():
    probs = np.array([[1.0, 0.9, 0.5, 0.9],
                      [1.0, 0.9, 0.5, 0.1]])
    h_09 = -(0.9 * np.log(0.9) + 0.1 * np.log(0.1))  # 0.3251 nats
    assert information_gain(probs) == pytest.approx([0.0, 0.0, 0.0, np.log(2) - h_09])
    assert information_gain(probs)[3] == pytest.approx(0.368064, abs=1e-6)
    with pytest.raises(InvalidInput):
        information_gain(probs[:1])


def test_information_gain_selector_puts_the_pair_the_draws_dispute_first():
    candidates = [Candidate(gen(2 * i + 1, i, "a"), gen(2 * i + 2, i, "b")) for i in range(3)]
    probs = np.array([[0.99, 0.9, 0.6],
                      [0.99, 0.1, 0.4]])
    pairs = select_by_information_gain(candidates, probs, n=2, round=1)
    assert [p.prompt_id for p in pairs] == [1, 2] and {p.selector for p in pairs} == {"info_gain"}


def test_d_optimal_picks_the_direction_the_labels_know_least_then_updates_what_it_knows():
    precision = np.diag([10.0, 1.0])  # the labels so far pin the first feature down, not the second
    diffs = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    order, gains = d_optimal_order(diffs, np.full(3, 0.25), precision, n=3)
    # gains log(1 + w zᵀΛ⁻¹z): second axis log(1 + 0.25 / 1) first; then, Λ[1,1] = 1.25, log(1 + 0.25 / 1.25) for
    # the same direction again, still above the first axis' log(1 + 0.25 / 10)
    assert order == [1, 2, 0]
    assert gains == pytest.approx([np.log(1.25), np.log(1.2), np.log(1.025)])
    candidates = [Candidate(gen(2 * i + 1, i, "a"), gen(2 * i + 2, i, "b")) for i in range(3)]
    pairs = select_d_optimal(candidates, diffs, np.full(3, 0.25), precision, n=2, round=2)
    assert [p.prompt_id for p in pairs] == [1, 2] and [p.score for p in pairs] == pytest.approx(gains[:2])
    assert {p.selector for p in pairs} == {"d_optimal"}


def test_d_optimal_weights_a_direction_by_its_fisher_information():
    diffs = np.array([[1.0, 0.0], [0.0, 1.0]])
    order, _ = d_optimal_order(diffs, np.array([0.25, 0.01]), np.eye(2), n=1)  # the second pair is all but decided
    assert order == [0]


def test_diverse_selector_spreads_the_batch_over_prompts_before_taking_a_second_pair_of_one():
    candidates = one_prompt(3, prompt_id=1, first_id=1)[:2] + one_prompt(2, prompt_id=2, first_id=11)
    probs = np.array([[0.9, 0.9, 0.8],
                      [0.1, 0.1, 0.2]])  # the second prompt's pair is a little less disputed
    features = {1: np.array([0.0, 0.0]), 2: np.array([3.0, 4.0])}
    by_gain = select_by_information_gain(candidates, probs)
    assert [p.prompt_id for p in by_gain] == [1, 1, 2]
    pairs = select_diverse(candidates, probs, features, n=3, round=5)
    assert [p.prompt_id for p in pairs] == [1, 2, 1]
    gain = information_gain(probs) / information_gain(probs).mean()
    assert pairs[0].score == pytest.approx(gain[0] + np.log(1e6))  # nothing taken yet: the distance term's cap
    assert {p.selector for p in pairs} == {"diverse"}
    labelled_near_1 = np.array([[0.0, 0.0]])  # prompt 1 was labelled before: prompt 2 comes first
    assert [p.prompt_id for p in select_diverse(candidates, probs, features, labelled_near_1, n=1)] == [2]


def test_every_selector_refuses_a_negative_count():
    candidates = one_prompt(3)
    probs = np.full((2, 3), 0.5)
    with pytest.raises(InvalidInput):
        select_by_information_gain(candidates, probs, n=-1)
    with pytest.raises(InvalidInput):
        select_d_optimal(candidates, np.eye(3)[:, :2], np.ones(3), np.eye(2), n=-1)
    with pytest.raises(InvalidInput):
        select_double_thompson(candidates, np.ones((2, 3)), [1, 2, 3], n=-1)
