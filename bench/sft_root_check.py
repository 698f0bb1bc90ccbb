"""The new-root check and the fewest demonstrations SFT needs, on the demo: per seed and per demonstration count D, SFT
at the demo's preset (a full fine-tune at 1e-3 for 6 epochs: `trainers.loop.sft_steps.sft_settings(LoopConfig())`)
through the studio's own path (`trainers.jobs.sft_job.run_sft`, as a new root), then

- the new-root check's fluency ratio (`trainers.policy.fluency`: v0's samples on 16 held-out prompts, their NLL under
  the new version over under v0), whether it kept the version from the root, and its cost against the whole job;
- the held-out oracle score of v0 and of the new version (the loop's evaluation: `evaluate_policy`, 64 held-out
  prompts x 1 sample at the demo's sampling).

Demonstrations: `--kind synthetic` (default) the synthetic demonstrator's (the oracle's best of 4 of v0's samples, on D
training prompts drawn by the seed); `--kind written` D copies of one hand-written positive review on D prompts (a
person's demonstration in the Label tab: text v0 does not write itself, the issue's case).

`--no-stored-samples` measures the check as a fresh project gets it: v0 has no stored sample, so it writes short ones.

    python bench/sft_root_check.py --counts 1 2 4 8 16 32 --seeds 0 1 --kind written
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from labeling.queue.synthetic import load_scorer  # noqa: E402
from storage import Store  # noqa: E402
from storage.demonstrations import NewDemonstration, add_demonstration  # noqa: E402
from storage.policies import get_policy, latest_policy, list_policies  # noqa: E402
from storage.prompts import list_prompts  # noqa: E402
from trainers.jobs import sft_job  # noqa: E402
from trainers.jobs.sft_job import run_sft  # noqa: E402
from trainers.loop.config import LoopConfig  # noqa: E402
from trainers.loop.demo_seed import seed_demo  # noqa: E402
from trainers.loop.demonstrator import write_synthetic_demonstrations  # noqa: E402
from trainers.loop.evaluation import evaluate_policy  # noqa: E402
from trainers.loop.sft_steps import sft_settings  # noqa: E402
from trainers.policy import sft_config  # noqa: E402
from trainers.policy.sft_config import SFTRun  # noqa: E402

WRITTEN = " a wonderful , moving film with brilliant acting and a great story . i loved every minute of it ."
EVAL = LoopConfig(eval_prompts=64, eval_samples=1)


def one_run(template: Path, folder: Path, count: int, seed: int, kind: str, overrides: dict) -> dict:
    path = folder / f"{kind}-{count}-{seed}.db"
    for suffix in ("", "-wal", "-shm"):  # the template's write-ahead log holds its newest pages
        if Path(f"{template}{suffix}").exists():
            shutil.copy(f"{template}{suffix}", f"{path}{suffix}")
    store = Store(str(path))
    base = latest_policy(store)
    prompts = random.Random(seed).sample(list_prompts(store, heldout=False), count)
    if kind == "synthetic":
        write_synthetic_demonstrations(store, base, prompts, load_scorer(), m=4, max_new_tokens=24, seed=seed)
    else:
        for prompt in prompts:
            add_demonstration(store, NewDemonstration(prompt.id, WRITTEN, "bench", "written"))
    settings = {**sft_settings(LoopConfig(), 0), "seed": seed, **overrides}
    started = time.perf_counter()
    outcome = run_sft(store, SFTRun(as_root=True, settings=settings))
    job_s = time.perf_counter() - started
    check = outcome.check
    new = get_policy(store, outcome.policy_id)
    before, after = evaluate_policy(store, base, EVAL, True), evaluate_policy(store, new, EVAL, True)
    return {"count": count, "seed": seed, "ratio": check.ratio, "root": new.parent_id is None,
            "check_s": check.seconds, "job_s": job_s, "share": check.seconds / (job_s - check.seconds),
            "before": before, "after": after, "versions": len(list_policies(store))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--kind", choices=["synthetic", "written"], default="synthetic")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-stored-samples", action="store_true",
                        help="check as on a fresh project: v0's stored samples unseen, so v0 writes short new ones")
    parser.add_argument("--config", default="{}", help="SFT settings over the preset's, as JSON (a broken run: "
                                                        "'{\"learning_rate\": 1e-2}')")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    sft_config.MIN_ROOT_DEMONSTRATIONS = 1  # the bench measures below the minimum the studio asks for
    if args.no_stored_samples:
        sft_job.list_generations = lambda store, **kwargs: []  # the new-root check finds none of v0's samples
    with tempfile.TemporaryDirectory(prefix="sft-root-check-") as scratch:
        folder = Path(scratch)
        template = folder / "template.db"
        seed_demo(Store(str(template)), log=lambda line: None)
        print("D  seed  fluency ratio  made root  check s  job s  check/rest  oracle v0 -> new")
        for count in args.counts:
            for seed in args.seeds:
                r = one_run(template, folder, count, seed, args.kind, json.loads(args.config))
                print(f"{r['count']:<3}{r['seed']:<6}{r['ratio']:<15.2f}{str(r['root']):<11}{r['check_s']:<9.2f}"
                      f"{r['job_s']:<7.1f}{r['share']:<12.1%}{r['before']:.3f} -> {r['after']:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
