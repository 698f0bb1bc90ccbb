"""The synthetic demonstrator (trainers/loop/demonstrator.py): the oracle's best of M samples of the policy, one
demonstration per prompt, by `demonstrator`; on the demo policy each one scores at least as well as any other of the
samples it was chosen from."""

import pytest

from assets.lexicon import sentiment_score
from storage.demonstrations import list_demonstrations
from storage.labels import training_labels
from storage.policies import latest_policy
from storage.prompts import list_prompts
from storage.types import Outcome
from trainers.loop.demonstrator import best_of, write_synthetic_demonstrations
from trainers.models.generation import HFGenerator
from trainers.models.loading import load_policy, load_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")


def test_best_of_keeps_the_first_of_equals():
    assert best_of(["a dull film", "a great film", "a brilliant film"], sentiment_score) == "a great film"


def test_each_demonstration_is_the_oracles_best_of_its_samples(demo_store):
    policy, prompts = latest_policy(demo_store), list_prompts(demo_store, heldout=False)[:6]
    generator = HFGenerator(load_policy(policy.path), load_tokenizer(policy.path))
    ids = write_synthetic_demonstrations(demo_store, policy, prompts, sentiment_score, m=6, max_new_tokens=12,
                                         seed=3, generator=generator)
    samples = generator.generate([p.text for p in prompts], 6, 12, 1.0, 1.0, seed=3)  # the same draw again
    demos = list_demonstrations(demo_store)
    assert [d.id for d in demos] == ids and len(ids) == 6
    for demo, prompt, group in zip(demos, prompts, samples, strict=True):
        assert (demo.prompt_id, demo.author, demo.source) == (prompt.id, "demonstrator", "synthetic")
        assert demo.text in [s.text for s in group]
        assert sentiment_score(demo.text) == max(sentiment_score(s.text) for s in group)


def test_shown_records_each_demonstration_over_as_many_other_samples(demo_store):
    policy, prompts = latest_policy(demo_store), list_prompts(demo_store, heldout=False)[:4]
    generator = HFGenerator(load_policy(policy.path), load_tokenizer(policy.path))
    write_synthetic_demonstrations(demo_store, policy, prompts, sentiment_score, m=6, max_new_tokens=12, seed=3,
                                   generator=generator, shown=2)
    samples = generator.generate([p.text for p in prompts], 6, 12, 1.0, 1.0, seed=3)
    labels = [label for label in training_labels(demo_store) if label.annotator == "edits:demonstrator"]
    expected = []
    for demo, prompt, group in zip(list_demonstrations(demo_store), prompts, samples, strict=True):
        others = [s.text for s in group if s.text.strip() and s.text != demo.text][:2]
        expected += [(prompt.text, demo.text, other) for other in others]
    assert len(expected) >= 6  # the demo's samples differ: most demonstrations are preferred to two others
    assert sorted((label.prompt, label.first, label.second) for label in labels) == sorted(expected)
    assert {label.outcome for label in labels} == {Outcome.FIRST}
