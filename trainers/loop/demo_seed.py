"""Seeding a new store with the demo: prompts, the SFT policy as version 0, samples, and a queue of pairs.

    python -m trainers.loop.demo_seed --db studio.db     (app.py runs this for a new, empty store)
"""

from __future__ import annotations

import argparse
import sys

import torch

from assets.build_demo import ensure_demo_policy
from assets.corpus import demo_prompts
from storage import Store
from storage.generations import SAMPLE_SOURCE, list_generations
from storage.policies import add_policy, get_policy
from storage.prompts import add_prompts, list_prompts

from .sampling import SamplingConfig, queue_random_pairs, sample_policy

DEMO_PAIRS = 200
SEED = 0


def seed_demo(store: Store, log=print) -> None:
    """Fill an empty store with the demo, so that a new user can label straight away (all of it, or nothing)."""
    train, heldout = demo_prompts()
    policy_dir = str(ensure_demo_policy(log))
    k = SamplingConfig.samples_per_prompt
    log(f"seeding the demo: {len(train)} training and {len(heldout)} held-out prompts, the demo SFT policy as v0")
    with store.write():
        add_prompts(store, train, source="demo")
        add_prompts(store, heldout, source="demo", heldout=True)
        policy = get_policy(store, add_policy(store, policy_dir, round=0, note="demo SFT policy"))
        log(f"seeding the demo: sampling {len(train) * k} responses ({len(train)} prompts x {k}) from the demo "
            "policy …")
        sample_policy(store, policy, list_prompts(store, heldout=False), SamplingConfig(), seed=SEED)
        samples = list_generations(store, policy_id=policy.id, source=SAMPLE_SOURCE)
        log(f"seeding the demo: queueing {DEMO_PAIRS} random pairs of them for labeling")
        queued = queue_random_pairs(store, samples, DEMO_PAIRS, seed=SEED, round=0)
    log(f"demo ready: {len(queued)} pairs queued for labeling")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Seed a new store with the embedded demo.")
    parser.add_argument("--db", required=True)
    args = parser.parse_args(argv)
    torch.set_num_threads(min(2, torch.get_num_threads()))
    seed_demo(Store(args.db), log=lambda line: print(line, file=sys.stderr))
    return 0


if __name__ == "__main__":
    sys.exit(main())
