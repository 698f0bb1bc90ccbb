"""Runs on copies of the demo for the demo benches (bench/label_efficiency.py, reward_quality.py, round_cost.py,
failure_warnings.py): a demo-seeded template store made once and copied for each run, the headless loop run in this
process and timed by phase, and a policy's samples and oracle scores on the held-out prompts."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench.common import OUT, ROOT

WORK = OUT / "label_efficiency"  # the runs' stores, each in its own folder
EVAL_SEED = 4242


def seeded_template(work: Path = WORK) -> Path:
    """A demo-seeded store under `work`, made once and copied for every run (the failure-warnings bench's too)."""
    path = work / "template" / "studio.db"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "trainers.loop.demo_seed", "--db", str(path)], cwd=ROOT, check=True,
                       capture_output=True)
    return path


def fresh_store(name: str):
    """A copy of the template store in its own folder (checkpoints land beside it)."""
    from storage import Store
    from storage.db import copy_store

    folder = WORK / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    copy_store(seeded_template(), folder / "studio.db")
    return Store(folder / "studio.db")


def heldout_samples(store, policy, config, samples: int, seed: int = EVAL_SEED) -> tuple[list[str], list[str]]:
    """(prompt, response) texts of `policy` on the held-out prompts, `samples` each, prompt by prompt."""
    from storage.prompts import list_prompts
    from trainers.models.generation import HFGenerator
    from trainers.models.loading import load_policy, load_tokenizer

    prompts = [p.text for p in list_prompts(store, heldout=True)]
    generator = HFGenerator(load_policy(policy.path), load_tokenizer(policy.path))
    groups = generator.generate(prompts, samples, config.response_length, config.temperature, config.top_p,
                                seed=seed)
    return ([prompt for prompt, group in zip(prompts, groups, strict=True) for _ in group],
            [s.text for group in groups for s in group])


def heldout_scores(store, policy, config, samples: int) -> list[float]:
    """Oracle scores of `policy` on the held-out prompts (`samples` each, fixed seed), prompt by prompt."""
    from labeling.queue.synthetic import load_scorer

    oracle = load_scorer(config.oracle)
    return [oracle(text) for text in heldout_samples(store, policy, config, samples)[1]]


def oracle_win_rate(final: list[float], sft: list[float]) -> float:
    """The final policy's win rate against the SFT policy as the oracle judges them, sample k against sample k of the
    same prompt (a tie when the oracle scores them alike counts half), as people judge the loop's win-rate pairs."""
    from labeling.versions.winrate_stats import win_rate

    return win_rate([1.0 if a > b else 0.5 if a == b else 0.0 for a, b in zip(final, sft, strict=True)]).rate


def run_loop(store, config, loop=None) -> dict:
    """The headless loop (`loop`, a `trainers.loop.rounds.Loop` subclass, or that class), in this process, as the
    worker would run it; returns the seconds its reward-model and policy phases took, and each round's pair selection
    (candidates, features and the selector's choice; not the sampling) under "select"."""
    from storage import JobStatus
    from storage import jobs as job_rows
    from trainers.loop import rounds

    spent, choose = [], rounds.choose_pairs

    def timed_choose(*args, **kwargs):
        started = time.perf_counter()
        try:
            return choose(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - started)

    seconds = {"reward": 0.0, "policy": 0.0, "labels": 0.0}

    class TimedLoop(loop or rounds.Loop):
        def collect_labels(self, index, g, seed):
            started = time.perf_counter()
            super().collect_labels(index, g, seed)
            seconds["labels"] += time.perf_counter() - started

        def train_reward(self, g):
            started = time.perf_counter()
            super().train_reward(g)
            seconds["reward"] += time.perf_counter() - started

        def run_policy(self, index, g):
            started = time.perf_counter()
            super().run_policy(index, g)
            seconds["policy"] += time.perf_counter() - started

    job_id = job_rows.create_job(store, "loop", config.to_dict())
    job_rows.claim_job(store, job_id, os.getpid())
    rounds.choose_pairs = timed_choose
    try:
        TimedLoop(store, job_rows.get_job(store, job_id), log=lambda line: None).run()
    finally:
        rounds.choose_pairs = choose
    job_rows.finish_job(store, job_id, JobStatus.COMPLETED)
    return {**seconds, "select": spent}

