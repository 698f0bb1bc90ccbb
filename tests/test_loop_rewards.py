"""Loops whose reward holds reward functions: the functions alone (no pairs, labels or reward model: rounds sample,
optimise and evaluate), the reward model plus `length`, and the settings' checks."""

import os
import re

import pytest

from app.versions.function_scores import function_score_lines, function_scores_html
from storage import jobs as job_rows
from storage.errors import InvalidInput
from storage.generations import eval_samples, function_scores
from storage.labels import count_labels
from storage.metrics import read_metrics
from storage.pairs import list_pairs
from storage.policies import list_policies
from storage.reward_models import list_reward_models
from storage.rounds import list_rounds
from trainers.loop.config import LoopConfig, job_settings
from trainers.loop.rounds import Loop

pytestmark = pytest.mark.usefixtures("one_thread")

LENGTH = [{"name": "length", "target": 12, "unit": "chars"}]
FAST = {"rounds": 1, "policy_iterations": 2, "policy_batch_size": 8, "policy_epochs": 1, "response_length": 8,
        "eval_prompts": 4, "eval_samples": 1, "winrate_pairs": 0}


def run_loop(store, settings: dict) -> int:
    config = LoopConfig.from_dict({**FAST, **settings})
    job_id = job_rows.create_job(store, "loop", config.to_dict())
    job_rows.claim_job(store, job_id, os.getpid())
    Loop(store, job_rows.get_job(store, job_id), log=lambda line: None).run()
    return job_id


def test_a_functions_loop_samples_optimises_and_evaluates_without_labels(demo_store):
    pairs_before, labels_before = len(list_pairs(demo_store)), count_labels(demo_store)
    job_id = run_loop(demo_store, {"reward": "functions", "reward_functions": LENGTH, "algorithm": "grpo",
                                   "group_size": 2})
    assert len(list_pairs(demo_store)) == pairs_before and count_labels(demo_store) == labels_before
    assert [m for m in list_reward_models(demo_store) if m.job_id == job_id] == []
    assert [r["round"] for r in list_rounds(demo_store, job_id)] == [1]
    assert list_policies(demo_store)[-1].round == 1
    rows = read_metrics(demo_store, job_id, names=["grpo/length/mean", "grpo/length/pass_rate"])
    assert {(r["name"], r["step"]) for r in rows} == {(n, s) for n in ("grpo/length/mean", "grpo/length/pass_rate")
                                                      for s in (1, 2)}
    held_out = read_metrics(demo_store, job_id, names=["round/fn/length"])
    assert [r["step"] for r in held_out] == [0, 1]  # the SFT policy's, then round 1's version's
    sft, trained = list_policies(demo_store)[0], list_policies(demo_store)[-1]
    scores = function_scores(demo_store)
    for policy, row in zip((sft, trained), held_out, strict=True):
        samples = eval_samples(demo_store, policy.id)
        mean = sum(s["fn:length"] for s in samples) / len(samples)
        assert scores[policy.id]["length"] == (pytest.approx(mean), len(samples))
        assert row["value"] == pytest.approx(mean)
    lines = function_score_lines(demo_store)
    assert lines[0].startswith("reward functions on the held-out evaluation samples")
    assert lines[1].startswith("  v0: length ") and len(lines) == 3
    assert "<th>length</th>" in function_scores_html(demo_store)


def test_a_loop_on_the_reward_model_plus_length(demo_store):
    job_id = run_loop(demo_store, {"reward": "rm+functions", "reward_functions": LENGTH, "rm_weight": 0.5,
                                   "prompts_per_round": 8, "labels_per_round": 12, "queue_reserve": 0,
                                   "reward_epochs": 1})
    assert len([m for m in list_reward_models(demo_store) if m.job_id == job_id]) == 1
    assert {r["step"] for r in read_metrics(demo_store, job_id, names=["ppo/length/mean"])} == {1, 2}


@pytest.mark.parametrize("settings,message", [
    ({"reward": "functions"}, "reward functions needs reward_functions"),
    ({"reward_functions": LENGTH}, "reward_functions go with reward functions or rm+functions"),
    ({"reward": "oracle"}, "reward must be one of rm, functions, rm+functions"),
    ({"reward": "functions", "reward_functions": LENGTH, "algorithm": "dpo"}, "use algorithm ppo or grpo"),
    ({"reward": "functions", "reward_functions": [{"name": "nope"}]}, "unknown reward function 'nope'"),
    ({"reward": "functions", "reward_functions": "math_answer"}, "must be list"),
])
def test_bad_loop_reward_settings_are_refused_in_one_line(settings, message):
    with pytest.raises(InvalidInput, match=re.escape(message)):
        LoopConfig.from_dict(settings)


def test_the_policy_job_of_a_loop_carries_its_reward():
    config = LoopConfig.from_dict({"reward": "functions", "reward_functions": LENGTH})
    assert job_settings("ppo", config)["reward_functions"] == LENGTH

