"""A round's pairs by each selector on the demo (trainers.loop.selecting): before any reward model (the reward base's
features, the prior alone) and after one (its members' features, a posterior calibrated on its validation labels);
the features the posterior reads are those the reward model scores."""

import numpy as np
import pytest

from labeling.queue.selection import POSTERIOR_SELECTORS, candidate_pairs
from labeling.queue.synthetic import OracleAnnotator
from storage.generations import SAMPLE_SOURCE, list_generations
from storage.pairs import list_pairs
from storage.policies import latest_policy
from storage.prompts import list_prompts
from storage.types import Selector
from trainers.jobs.reward_job import train_reward_model
from trainers.loop.config import LoopConfig
from trainers.loop.selecting import PosteriorView, choose_pairs
from trainers.reward.config import RewardConfig
from trainers.reward.scorer import RewardScorer

PROMPTS = 12  # the first prompts' samples (4 each) are the round's candidates


def round_inputs(store):
    prompts = {p.id: p.content for p in list_prompts(store, heldout=False)[:PROMPTS]}
    samples = [g for g in list_generations(store, policy_id=latest_policy(store).id, source=SAMPLE_SOURCE)
               if g.prompt_id in prompts]
    return samples, prompts


def check_choice(store, selector: str, wanted: int, round: int) -> list:
    samples, prompts = round_inputs(store)
    queued = {(p.first_id, p.second_id) for p in list_pairs(store)}
    config = LoopConfig(selector=selector, ensemble=2 if selector == Selector.DISAGREEMENT else 1)
    pairs = choose_pairs(store, config, samples, prompts, wanted, seed=3, round=round)
    assert len(pairs) == wanted and {p.selector for p in pairs} == {selector} and {p.round for p in pairs} == {round}
    keys = [(p.first_id, p.second_id) for p in pairs]
    assert len(set(keys)) == wanted and not set(keys) & queued  # new pairs only
    assert all(p.prompt_id in prompts for p in pairs)
    scores = [p.score for p in pairs]
    assert scores == sorted(scores, reverse=True) and all(np.isfinite(scores))  # the queue serves them in order
    assert pairs == choose_pairs(store, config, samples, prompts, wanted, seed=3, round=round)  # seeded
    return pairs


@pytest.mark.parametrize("selector", sorted(POSTERIOR_SELECTORS))
def test_before_any_reward_model_the_posterior_selectors_choose_from_the_reward_base(demo_store, selector):
    check_choice(demo_store, selector, wanted=10, round=1)


def test_after_a_reward_model_every_selector_chooses_from_its_posterior(demo_store):
    OracleAnnotator.from_spec(seed=0).label(demo_store, 40)
    train_reward_model(demo_store, RewardConfig(epochs=2, ensemble=2, seed=0))
    samples, prompts = round_inputs(demo_store)
    queued = [(p.first_id, p.second_id) for p in list_pairs(demo_store)]
    view = PosteriorView.build(demo_store, candidate_pairs(samples, exclude=queued), prompts)
    assert view.response_features.shape[0] == 2 == len(view.posteriors)  # one posterior per member
    assert [np.allclose(p.mean, head) for p, head in zip(view.posteriors, view.heads, strict=True)] == [True, True]
    assert all(np.linalg.eigvalsh(p.precision).min() > 0 for p in view.posteriors)
    chosen = {selector: check_choice(demo_store, selector, wanted=8, round=2)
              for selector in (*sorted(POSTERIOR_SELECTORS), Selector.DISAGREEMENT)}
    assert len({tuple((p.first_id, p.second_id) for p in pairs) for pairs in chosen.values()}) > 1


def test_the_features_are_what_the_head_scores(demo_store):
    OracleAnnotator.from_spec(seed=0).label(demo_store, 20)
    train_reward_model(demo_store, RewardConfig(epochs=1, seed=0))
    scorer = RewardScorer.from_store(demo_store)
    samples, prompts = round_inputs(demo_store)
    texts = [prompts[g.prompt_id] for g in samples], [g.text for g in samples]
    features = scorer.features(*texts)  # (K, N, d)
    assert features.shape == (1, len(samples), scorer.heads().shape[1])
    raw = scorer.raw_scores(*texts)
    assert np.allclose((features[0] @ scorer.heads()[0]).numpy(), raw[0].numpy(), atol=1e-4)
