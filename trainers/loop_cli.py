"""`python app.py loop`: the same rounds as the Train tab's Start loop, in the terminal, with a progress bar.

Imports nothing heavy at module level (app.py builds its parser from here)."""

from __future__ import annotations

import argparse
import os
import sys

from storage import Store
from storage import jobs as job_rows
from storage.types import JobStatus


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=3, help="rounds to run")
    parser.add_argument("--labels-per-round", type=int, default=100, help="N: new labels per round")
    parser.add_argument("--annotator", choices=("human", "oracle"), default="oracle",
                        help="oracle labels synthetically; human waits for labels from the studio's Label tab")
    parser.add_argument("--selector", choices=("random", "disagreement"), default="random", help="pair selector")
    parser.add_argument("--ensemble", type=int, default=None, help="reward-model ensemble size (disagreement: 2+)")
    parser.add_argument("--ppo-iterations", type=int, default=None, help="M: PPO iterations per round")
    parser.add_argument("--seed", type=int, default=0, help="seed of sampling, selection and training")
    parser.add_argument("--config", default="{}", metavar="JSON",
                        help='any other LoopConfig settings as a JSON object, e.g. \'{"kl_coef": 0.2, "lora": true}\'')
    parser.add_argument("--resume", type=int, default=None, metavar="JOB", help="continue a stopped or killed loop job")


def run(args: argparse.Namespace, store: Store) -> int:
    from tqdm import tqdm

    from .loop_config import LoopConfig, settings_from_json
    from .worker import run_job

    if args.resume is not None:
        job_id = job_rows.requeue_job(store, args.resume).id
    else:
        settings = {"rounds": args.rounds, "labels_per_round": args.labels_per_round, "annotator": args.annotator,
                    "selector": args.selector, "seed": args.seed}
        if args.ensemble is not None:
            settings["ensemble"] = args.ensemble
        elif args.selector == "disagreement":
            settings["ensemble"] = 3
        if args.ppo_iterations is not None:
            settings["ppo_iterations"] = args.ppo_iterations
        settings.update(settings_from_json(args.config))
        job_id = job_rows.create_job(store, "loop", LoopConfig.from_dict(settings).to_dict())
    job = job_rows.claim_job(store, job_id, os.getpid())
    bar = tqdm(total=1000, desc="loop", unit="‰", file=sys.stderr, bar_format="{l_bar}{bar}| {elapsed} {postfix}")

    def progress(fraction: float, phase: str) -> None:
        bar.update(int(fraction * 1000) - bar.n)
        bar.set_postfix_str(phase)

    from . import loop

    status = run_job(store, job, runner=lambda s, j: loop.Loop(s, j, log=bar.write, progress=progress).run())
    bar.close()
    print(f"loop job {job_id}: {status.value}")
    if status is JobStatus.FAILED:
        print(job_rows.get_job(store, job_id).error.splitlines()[-1], file=sys.stderr)
    return 0 if status in (JobStatus.COMPLETED, JobStatus.CANCELLED) else 1
