"""Stored text is counted in the reward model's own tokens before it is fed (trainers/reward/scorer.py): a sampled
response whose decoded text re-tokenizes longer than it was sampled (lone bytes decode to replacement characters,
three tokens each in the demo's tokenizer) can put a prompt and response over the reward model's 64-token context.
Such a row is never fed (nothing is cut): its score is NaN and the scorer counts it; the loop's check pairs and its
disagreement and posterior selectors leave such pairs out, where they raised `IndexError: index out of range in self`
in every later loop, and the round logs how many of its samples were too long, naming them."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from storage.generations import NewGeneration, add_generations, list_generations
from storage.policies import add_policy
from storage.prompts import add_prompts, list_prompts
from storage.reward_models import add_reward_model
from trainers.loop.check_pairs import pick_check_pairs
from trainers.loop.config import LoopConfig
from trainers.loop.prompt_use import samples_too_long_line
from trainers.loop.selecting import choose_pairs
from trainers.models.chat_format import ChatFormat
from trainers.reward.scorer import INFO_FILE, RewardScorer, pair_probabilities

DEMO = Path(__file__).resolve().parent.parent / "assets" / "demo_policy"
PROMPT = "The film was long and the plot was thin, but the cast was good and the music was great; was it worth it?"
SAMPLED_TOKENS = 11


@pytest.fixture
def demo_chat() -> ChatFormat:
    return ChatFormat.from_dir(DEMO)


@pytest.fixture
def long_response(demo_chat) -> str:
    """A response sampled as 11 lone bytes: what the policy's sampler kept fits the context after the 36-token
    prompt, its decoded text (11 replacement characters, 33 tokens) does not."""
    lone_byte = demo_chat.tokenizer.encode("\ufffd").ids[0]
    text = demo_chat.decode([lone_byte] * SAMPLED_TOKENS)
    prompt_tokens = len(demo_chat.prompt_ids(PROMPT))
    assert prompt_tokens + SAMPLED_TOKENS + 1 <= 64  # as sampled (36 + 11 and the end id): fits
    assert len(demo_chat.sequences_ids([PROMPT], [text])[0]) == prompt_tokens + 34 > 64  # as the model reads it
    return text


@pytest.fixture
def samples(store, tmp_path, long_response):
    """Three samples of the prompt by the demo policy, the last one the long one, and two reward-model members (the
    demo policy with a fresh head: the scores need not mean anything here)."""
    add_prompts(store, [PROMPT])
    [prompt] = list_prompts(store)
    policy = add_policy(store, str(DEMO))
    add_generations(store, [NewGeneration(prompt.id, text, policy_id=policy)
                            for text in (" great fun .", " a dull film .", long_response)])
    members = tmp_path / "rm"
    shutil.copytree(DEMO, members)
    (members / INFO_FILE).write_text(json.dumps({"val_pair_ids": []}))
    for k in range(2):
        add_reward_model(store, str(members), 10, {}, 0.0, 1.0, policy_id=policy, ensemble_index=k, ensemble_size=2)
    return list_generations(store), {prompt.id: PROMPT}


def test_a_row_over_the_context_is_not_fed_but_nan_and_counted(store, samples):
    generations, prompts = samples
    scorer = RewardScorer.from_store(store)
    assert scorer.context == 64
    raw = scorer.raw_scores([PROMPT] * 3, [g.text for g in generations]).numpy()  # (K, 3)
    assert np.isfinite(raw[:, :2]).all() and np.isnan(raw[:, 2]).all() and scorer.too_long == 1
    features = scorer.features([PROMPT] * 3, [g.text for g in generations]).numpy()  # (K, 3, d)
    assert np.isfinite(features[:, :2]).all() and np.isnan(features[:, 2]).all() and scorer.too_long == 2


def test_the_check_pairs_leave_out_a_pair_over_the_context(store, samples):
    generations, prompts = samples
    checks, reward_model_id = pick_check_pairs(store, generations, prompts, n=3, taken=[], round=1)
    assert [(a.pair.first_id, a.pair.second_id) for a in checks] == [(generations[0].id, generations[1].id)]
    assert np.isfinite(checks[0].prob_first)


@pytest.mark.parametrize("selector", ["disagreement", "info_gain"])
def test_the_selectors_leave_out_a_pair_over_the_context(store, samples, selector):
    generations, prompts = samples
    config = LoopConfig(selector=selector, ensemble=2)
    pairs = choose_pairs(store, config, generations, prompts, wanted=3, seed=0, round=1)
    assert [(p.first_id, p.second_id) for p in pairs] == [(generations[0].id, generations[1].id)]


def test_pair_probabilities_are_nan_only_for_the_pairs_over_the_context(store, samples):
    from labeling.queue.selection import candidate_pairs

    generations, prompts = samples
    candidates = candidate_pairs(generations)
    probabilities = pair_probabilities(RewardScorer.from_store(store), candidates, prompts)  # (K, 3)
    long_id = generations[2].id
    over = np.array([long_id in (c.first.id, c.second.id) for c in candidates])
    assert np.isnan(probabilities[:, over]).all() and np.isfinite(probabilities[:, ~over]).all()


def test_the_round_names_its_samples_too_long_for_the_reward_model(store, samples):
    generations, prompts = samples
    assert samples_too_long_line(store, generations, prompts) == (
        f"1 of the round's 3 samples are too long for the reward model's context of 64 as it reads them (samples "
        f"{generations[2].id}): left out of the round's pairs")
    assert samples_too_long_line(store, generations[:2], prompts) == ""
