"""Reward-model quality per pair selector on the demo: how well the reward model one round's labels train predicts the
oracle, without PPO's noise on top (what a selector can change first; the label-efficiency bench measures the rest).

Per arm and seed: a copy of the demo-seeded store, one loop round with the loop's settings (its prompts x K samples,
the arm's N pairs labelled by the oracle annotator, check pairs included, one reward model) and no PPO; then the
Pearson correlation of the reward model's scores with the oracle's on the held-out prompts' SFT samples (16 each,
fixed seed) and its accuracy on their within-prompt pairs the oracle does not tie. Arms: the loop's selectors, and
two that read the oracle, which no selector can: `oracle_untied` (random pairs among those the oracle does not tie)
and `oracle_margin` (the pairs with the largest oracle difference), bounds on what choosing pairs can gain; and
`rank4`: N rankings of 4 random answers of a prompt instead of pairs (`rank_k` 4, 100 prompts: the label-efficiency
bench's rank4 arm), each ranking one label, so N rankings read as many answers as 2N pairs.
Prints a table (mean with a 95% t-interval over seeds, paired difference to random) and writes bench/out/<name>.json.

    python bench/reward_quality.py                                  # 108 labels (a 150-label loop's first round)
    python bench/reward_quality.py --arms all --labels 108 216 --seeds 0 1 2 3 4
    python bench/reward_quality.py --config '{"reward_lr": 5e-4}' --name reward_quality_lr5e-4
    python bench/reward_quality.py --arms random --labels 108 && python bench/reward_quality.py --arms rank4 \
        --labels 54 --name reward_quality_rank4                    # the same answers read: 108 pairs, 54 rankings
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import shutil
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import OUT, interval  # noqa: E402
from bench.demo_runs import WORK, fresh_store, heldout_samples, run_loop, seeded_template  # noqa: E402

SELECTORS = ("random", "thompson", "info_gain", "diverse", "d_optimal")
BOUNDS = ("oracle_untied", "oracle_margin")
RANKINGS = {"rank4": {"rank_k": 4, "prompts_per_round": 100}}  # label_efficiency's rank4 arm
ARMS = (*SELECTORS, *BOUNDS, *RANKINGS)
DEFAULT_ARMS = ("random", "d_optimal", *BOUNDS)
HELDOUT_SAMPLES, HELDOUT_SEED = 16, 99


def oracle_choice(arm: str, oracle):
    """A stand-in for the loop's `choose_pairs` that reads the oracle: untied random pairs, or the widest margins."""
    from dataclasses import replace

    from labeling.queue.selection import candidate_pairs, select_random
    from storage.pairs import list_pairs

    def choose(store, config, samples, prompts, wanted, seed, round):
        candidates = candidate_pairs(samples, exclude=[(p.first_id, p.second_id) for p in list_pairs(store)])
        margin = {c.key: abs(oracle(c.first.text) - oracle(c.second.text)) for c in candidates}
        if arm == "oracle_untied":
            return select_random([c for c in candidates if margin[c.key] > 0], wanted, seed, round)
        rng = random.Random(seed)  # the widest margins first (the queue's order), ties in a seeded random order
        ranked = sorted(candidates, key=lambda c: (-margin[c.key], rng.random()))[:wanted]
        pairs = {(p.first_id, p.second_id): p for p in select_random(ranked, None, seed, round)}
        return [replace(pairs[c.key], score=margin[c.key]) for c in ranked]

    return choose


def one_run(arm: str, labels: int, seed: int, settings: dict, name: str) -> dict:
    """One arm at one label count and seed: {arm, labels, seed, correlation, accuracy}."""
    import numpy as np
    import torch

    from labeling.queue.synthetic import load_scorer
    from storage.policies import list_policies
    from trainers.loop import rounds
    from trainers.loop.config import LoopConfig
    from trainers.reward.scorer import RewardScorer

    torch.set_num_threads(1)
    selector = arm if arm in SELECTORS else "random"
    config = LoopConfig.from_dict({**settings, "seed": seed, "selector": selector, "rounds": 1,
                                   "labels_per_round": labels, **RANKINGS.get(arm, {})})
    oracle = load_scorer(config.oracle)
    folder = f"{name}-{arm}-N{labels}-s{seed}"
    store = fresh_store(folder)

    class RewardRound(rounds.Loop):
        def run_policy(self, index, g):  # the round's reward model is what is measured
            pass

        def judge_final_version(self):
            pass

    choose = rounds.choose_pairs
    try:
        if arm in BOUNDS:
            rounds.choose_pairs = oracle_choice(arm, oracle)
        run_loop(store, config, RewardRound)
        rows, texts = heldout_samples(store, list_policies(store)[0], config, HELDOUT_SAMPLES, HELDOUT_SEED)
        scores = RewardScorer.from_store(store).score(rows, texts).numpy()
    finally:
        rounds.choose_pairs = choose  # the worker process runs other arms next
        store.close()
        shutil.rmtree(WORK / folder, ignore_errors=True)
    truth = np.array([oracle(t) for t in texts])
    untied = [(a, b) for start in range(0, len(texts), HELDOUT_SAMPLES)
              for a, b in itertools.combinations(range(start, start + HELDOUT_SAMPLES), 2) if truth[a] != truth[b]]
    row = {"arm": arm, "labels": labels, "seed": seed, "correlation": float(np.corrcoef(scores, truth)[0, 1]),
           "accuracy": float(np.mean([(scores[a] > scores[b]) == (truth[a] > truth[b]) for a, b in untied]))}
    print(f"{arm:>14} N={labels:4d} seed {seed}: correlation {row['correlation']:.3f}, accuracy "
          f"{row['accuracy']:.3f}", flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arms", nargs="+", choices=[*ARMS, "all"], default=list(DEFAULT_ARMS))
    parser.add_argument("--labels", type=int, nargs="+", default=[108], help="N: the round's labels")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    parser.add_argument("--config", type=json.loads, default={}, help="JSON of other loop settings for every arm")
    parser.add_argument("--jobs", type=int, default=2, help="runs in parallel (one torch thread each)")
    parser.add_argument("--name", default="reward_quality", help="file name of the JSON under bench/out/")
    args = parser.parse_args()
    arms = list(ARMS) if "all" in args.arms else args.arms
    seeded_template()
    tasks = [(arm, labels, seed) for labels in args.labels for arm in arms for seed in args.seeds]
    with ProcessPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(one_run, *zip(*tasks, strict=True), itertools.repeat(args.config),
                             itertools.repeat(args.name)))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{args.name}.json").write_text(json.dumps({"args": vars(args), "runs": rows}, indent=2))

    print(f"\nDemo, one round's reward model (settings {args.config or 'the loop defaults'}); held-out: 20 prompts x "
          f"{HELDOUT_SAMPLES} SFT samples; seeds {args.seeds}; ± is a 95% t-interval over seeds\n")
    print("| arm | labels | seeds | correlation with the oracle | minus random (paired) | accuracy on untied pairs |")
    print("|---|---:|---:|---:|---:|---:|")
    for labels, arm in itertools.product(args.labels, arms):
        mine = {r["seed"]: r for r in rows if (r["arm"], r["labels"]) == (arm, labels)}
        base = {r["seed"]: r["correlation"] for r in rows if (r["arm"], r["labels"]) == ("random", labels)}
        shared = sorted(set(mine) & set(base))
        versus = "—" if arm == "random" or not shared else "{:+.3f} ± {:.3f}".format(
            *interval([mine[s]["correlation"] - base[s] for s in shared]))
        correlation = interval([r["correlation"] for r in mine.values()])
        print(f"| {arm} | {labels} | {len(mine)} | {correlation[0]:.3f} ± {correlation[1]:.3f} | {versus} | "
              f"{statistics.fmean(r['accuracy'] for r in mine.values()):.3f} |")
    print(f"\nwrote {OUT / args.name}.json")


if __name__ == "__main__":
    main()
