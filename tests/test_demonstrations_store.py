"""storage.demonstrations against a real store file: write, check the rows they point to, undo, import, list."""

import pytest

from storage import Conflict, InvalidInput, NotFound, generations, pairs, policies, prompts
from storage.demonstrations import (
    LABEL_TAB,
    ImportedDemonstration,
    NewDemonstration,
    add_demonstration,
    count_demonstrations,
    import_demonstrations,
    list_demonstrations,
    undo_last_demonstration,
)
from storage.generations import NewGeneration
from storage.pairs import NewPair


@pytest.fixture
def pair(store):
    prompts.add_prompts(store, ["the movie was", "another prompt"])
    policy = policies.add_policy(store, "/models/sft")
    g1, g2 = generations.add_generations(store, [NewGeneration(1, " great .", policy_id=policy),
                                                 NewGeneration(1, " awful .", policy_id=policy)])
    [pair_id] = pairs.add_pairs(store, [NewPair(1, g1, g2, selector="random", policy_id=policy)])
    return pair_id, g1, g2


def test_written_from_a_pair_keeps_its_origin_and_time(store, pair):
    pair_id, g1, _ = pair
    demo_id = add_demonstration(store, NewDemonstration(1, " wonderful .", "ada", LABEL_TAB, pair_id, g1, 12.5),
                                now=100.0)
    [demo] = list_demonstrations(store)
    assert (demo.id, demo.prompt, demo.text, demo.author, demo.source) == (demo_id, "the movie was", " wonderful .",
                                                                           "ada", "label")
    assert (demo.pair_id, demo.generation_id, demo.seconds, demo.created) == (pair_id, g1, 12.5, 100.0)
    assert demo.prompt_content == "the movie was"


def test_rows_it_points_to_are_checked(store, pair):
    pair_id, g1, _ = pair
    with pytest.raises(NotFound, match="prompt 9"):
        add_demonstration(store, NewDemonstration(9, "x", "ada", LABEL_TAB))
    with pytest.raises(NotFound, match="pair 7"):
        add_demonstration(store, NewDemonstration(1, "x", "ada", LABEL_TAB, pair_id=7))
    with pytest.raises(InvalidInput, match="not on prompt 2"):
        add_demonstration(store, NewDemonstration(2, "x", "ada", LABEL_TAB, pair_id=pair_id))
    with pytest.raises(InvalidInput, match="not one of pair"):
        add_demonstration(store, NewDemonstration(1, "x", "ada", LABEL_TAB, pair_id=pair_id, generation_id=99))
    with pytest.raises(NotFound, match="not a response to prompt 2"):
        add_demonstration(store, NewDemonstration(2, "x", "ada", LABEL_TAB, generation_id=g1))
    with pytest.raises(InvalidInput, match="from 0 to 86400 seconds"):
        add_demonstration(store, NewDemonstration(1, "x", "ada", LABEL_TAB, seconds=-1))
    assert count_demonstrations(store) == 0


def test_undo_takes_back_the_authors_newest_and_keeps_it(store, pair):
    first = add_demonstration(store, NewDemonstration(1, "one", "ada", LABEL_TAB))
    second = add_demonstration(store, NewDemonstration(1, "two", "ada", LABEL_TAB))
    other = add_demonstration(store, NewDemonstration(2, "three", "bob", LABEL_TAB))
    assert undo_last_demonstration(store, "ada", now=5.0).id == second
    assert [d.id for d in list_demonstrations(store)] == [first, other]
    assert [d.id for d in list_demonstrations(store, author="ada")] == [first]
    undone = [d for d in list_demonstrations(store, include_undone=True) if d.undone is not None]
    assert [(d.id, d.undone) for d in undone] == [(second, 5.0)]
    undo_last_demonstration(store, "ada")
    with pytest.raises(Conflict, match="ada has no demonstration to undo"):
        undo_last_demonstration(store, "ada")
    assert count_demonstrations(store) == 1 and count_demonstrations(store, "bob") == 1


def test_import_reuses_prompts_and_counts_duplicates(store, pair):
    turns = [{"role": "user", "content": "hi"}]
    rows = [ImportedDemonstration("the movie was", " fine ."), ImportedDemonstration("Human: hi", "hello", turns)]
    result = import_demonstrations(store, rows, "hand")
    assert (result.added, result.duplicates, result.prompt_ids) == (2, 0, (3,))
    again = import_demonstrations(store, rows, "hand")
    assert (again.added, again.duplicates) == (0, 2)
    stored = list_demonstrations(store, source="import:hand")
    assert [(d.prompt_id, d.author, d.prompt_content) for d in stored] == [(1, "hand", "the movie was"),
                                                                          (3, "hand", turns)]
    assert prompts.get_prompt(store, 3).source == "hand"
