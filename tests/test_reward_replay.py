"""Incremental reward training's share (trainers/reward/replay.py): every new label, and a seeded replay sample of the
older ones that differs by seed, so the rounds of a loop replay every older label sooner or later."""

from trainers.reward.data import PreferenceExample
from trainers.reward.replay import incremental_share


def examples(label_ids):
    return [PreferenceExample(i, 100 + i, "p", "a", "b", 1.0) for i in label_ids]


def ids(rows):
    return [e.label_id for e in rows]


def test_the_share_is_every_new_label_and_a_replay_sample_of_the_seen_ones():
    rows = examples(range(1, 41))
    new, replayed = incremental_share(rows, seen_label_ids=range(1, 31), replay=5, seed=3)
    assert ids(new) == list(range(31, 41))
    assert len(replayed) == 5 and set(ids(replayed)) <= set(range(1, 31)) and ids(replayed) == sorted(ids(replayed))


def test_the_replay_is_seeded_and_differs_by_seed():
    rows = examples(range(1, 101))
    draw = [ids(incremental_share(rows, range(1, 91), 10, seed)[1]) for seed in (7, 7, 8)]
    assert draw[0] == draw[1] and draw[0] != draw[2]
    shuffled = incremental_share(list(reversed(rows)), range(1, 91), 10, 7)[1]
    assert ids(shuffled) == draw[0]  # the store's order does not matter, only the seed


def test_the_rounds_seeds_replay_every_older_label():
    rows = examples(range(1, 201))
    covered = set()
    for seed in range(40):  # 40 rounds of 25 replayed among 100: each label missed with chance 0.75^40 ~ 1e-5
        covered |= set(ids(incremental_share(rows, range(1, 101), 25, seed)[1]))
    assert covered == set(range(1, 101))


def test_fewer_older_labels_than_the_replay_are_all_replayed_and_zero_replays_none():
    rows = examples(range(1, 11))
    assert ids(incremental_share(rows, {2, 4, 99}, 5, 0)[1]) == [2, 4]
    assert incremental_share(rows, {2, 4}, 0, 0) == (examples([1, 3, 5, 6, 7, 8, 9, 10]), [])
