"""Builders shared by the reward-model tests (the fixtures `corpus_sentences` and `tiny_gpt2_dir` are in
tests/trainer_fixtures.py): a store filled with one policy's responses and oracle-labelled pairs, fast training
settings, a progress reporter, and a snapshot of what a failed training must leave unchanged."""

from __future__ import annotations

from assets.lexicon import sentiment_score
from labeling.queue.selection import candidate_pairs, select_random
from storage.generations import NewGeneration, add_generations, list_generations
from storage.metrics import read_metrics
from storage.pairs import add_pairs, list_pairs
from storage.policies import add_policy
from storage.prompts import add_prompts, list_prompts
from storage.reward_models import list_reward_models
from storage.types import Outcome
from tests.helpers import label_pairs
from trainers.reporting import Reporter

FAST = dict(epochs=3.0, learning_rate=1e-3, batch_size=16, logging_steps=5)


class Progress(Reporter):
    """Hands each progress report (steps done, total steps) to `seen`."""

    def __init__(self, seen):
        self.seen = seen

    def progress(self, done, total):
        self.seen(done, total)


def split_sentence(sentence):
    words = sentence.split(" ")
    return " ".join(words[:3]), " " + " ".join(words[3:])


def fill_store(store, policy_dir, sentences, n_labels, samples=4, seed=0):
    """Prompts (first three words), `samples` responses each from one policy, `n_labels` oracle-labelled pairs."""
    responses = {}
    for sentence in sentences:
        prompt, response = split_sentence(sentence)
        responses.setdefault(prompt, []).append(response)
    prompts = sorted(p for p, r in responses.items() if len(set(r)) >= samples)
    add_prompts(store, prompts)
    policy = add_policy(store, str(policy_dir))
    ids = {p.text: p.id for p in list_prompts(store)}
    add_generations(store, [NewGeneration(ids[p], r, policy_id=policy) for p in prompts
                            for r in sorted(set(responses[p]))[:samples]])
    label_more(store, policy, n_labels, seed)
    return policy


def label_more(store, policy, n_labels, seed=0):
    """Queue `n_labels` new pairs of `policy`'s responses (none queued before) and label them by the oracle; returns
    {pair id: label id}."""
    queued = [(p.first_id, p.second_id) for p in list_pairs(store)]
    pairs = select_random(candidate_pairs(list_generations(store, policy_id=policy), exclude=queued), n=n_labels,
                          seed=seed)
    texts = {g.id: g.text for g in list_generations(store)}
    outcomes = {}
    for pair_id, pair in zip(add_pairs(store, pairs), pairs, strict=True):
        first, second = sentiment_score(texts[pair.first_id]), sentiment_score(texts[pair.second_id])
        outcomes[pair_id] = Outcome.FIRST if first > second else Outcome.SECOND if second > first else Outcome.TIE
    return label_pairs(store, "oracle", outcomes)


def snapshot(store):
    """The reward models, metrics and reward-model folder a refused training must leave as they were."""
    folder = store.data_dir / "reward_models"
    return (list_reward_models(store), read_metrics(store), sorted(folder.iterdir()) if folder.exists() else None)
