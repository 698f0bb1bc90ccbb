"""A loop with `rank_k` 4 (trainers/loop/ranking_round.py): the round queues rankings of 4 of a prompt's samples in a
stored random order, the oracle ranks them, the reward model trains on them, and the loop completes on the demo."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from storage import jobs as job_rows
from storage.errors import InvalidInput
from storage.labels import count_labels
from storage.rankings import list_rankings, ranking_verdicts
from storage.reward_models import list_reward_models
from storage.rounds import list_rounds
from trainers.loop.config import LoopConfig
from trainers.loop.label_schedule import labels_in_round
from trainers.loop.ranking_round import choose_rankings
from trainers.reward.scorer import INFO_FILE

ROOT = Path(__file__).resolve().parent.parent
RANKED = {"rank_k": 4, "samples_per_prompt": 4, "prompts_per_round": 24, "queue_reserve": 4, "reward_epochs": 3,
          "policy_iterations": 2, "policy_batch_size": 8, "policy_epochs": 1, "eval_samples": 2}


def test_rank_k_is_checked_against_the_samples():
    assert LoopConfig.from_dict({"rank_k": 4, "labels_per_round": 48}).rank_k == 4
    for bad in ({"rank_k": 5, "samples_per_prompt": 4}, {"rank_k": 7, "samples_per_prompt": 8}, {"rank_k": 1}):
        with pytest.raises(InvalidInput, match="rank_k"):
            LoopConfig.from_dict(bad)
    with pytest.raises(InvalidInput, match="labels_per_round"):  # C(4, 4) = 1 set per prompt
        LoopConfig.from_dict({"rank_k": 4, "prompts_per_round": 10, "labels_per_round": 11})


def test_k_sets_spread_over_the_prompts_in_a_random_stored_order(demo_store):
    config = LoopConfig.from_dict({"rank_k": 3, "samples_per_prompt": 4, "labels_per_round": 10})
    samples = demo_store_samples(demo_store)
    chosen = choose_rankings(demo_store, config, samples, {}, wanted=10, seed=0, round=1)
    assert len(chosen) == 10 and all(len(r.generation_ids) == 3 for r in chosen)
    prompts = [r.prompt_id for r in chosen]
    assert len(set(prompts)) == min(10, len({g.prompt_id for g in samples}))  # one set a prompt before a second
    shown_orders = [r.generation_ids for r in chosen]
    assert any(list(ids) != sorted(ids) for ids in shown_orders)  # shuffled, not in sample order


def demo_store_samples(store):
    from storage.generations import list_generations

    by_prompt = {}
    for g in list_generations(store):
        by_prompt.setdefault(g.prompt_id, []).append(g)
    return [g for gens in by_prompt.values() if len(gens) >= 4 for g in gens[:4]]


def test_a_loop_of_rankings_of_4_with_the_oracle_completes_and_trains_on_them(demo_store):
    result = subprocess.run([sys.executable, "app.py", "loop", "--db", str(demo_store.path), "--rounds", "2",
                             "--labels-per-round", "20", "--config", json.dumps(RANKED)], cwd=ROOT,
                            capture_output=True, text=True, timeout=1200, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-2000:]
    [job] = job_rows.list_jobs(demo_store)
    rounds = list_rounds(demo_store, job.id)
    wanted = [labels_in_round(20, LoopConfig().label_decay, i) for i in range(2)]
    assert [r["summary"]["labels"] for r in rounds] == wanted
    verdicts = ranking_verdicts(demo_store)
    assert len(verdicts) == sum(wanted) and all(v.outcome == "ranked" and len(v.responses) == 4 for v in verdicts)
    assert all(len(r.generation_ids) == 4 for r in list_rankings(demo_store))
    assert count_labels(demo_store, evaluation=False) == 0  # no pairs but the win-rate ones
    last = [m for m in list_reward_models(demo_store) if m.round == rounds[-1]["round"]]
    info = json.loads((Path(last[0].path) / INFO_FILE).read_text())
    assert info["labels_used"] == sum(wanted)  # every verdict, as one example each
    assert all(str(unit).startswith("ranking-") for unit in info["val_pair_ids"]) and info["val_pair_ids"]
