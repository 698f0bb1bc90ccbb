"""Failure warnings on deliberately broken demo loops, and silence on healthy ones: which rule fired in which round.

Every arm runs the headless oracle loop on its own copy of a demo-seeded store (bench scale: `BASE`, the loop's
defaults with a smaller budget so a run takes minutes on a CPU), each at 3 seeds (`SEEDS`: which labels, samples and
updates a run draws decides how far its reward model agrees with the oracle), then lists the warnings the loop recorded:

- **defaults**: the loop's defaults at bench scale: should fire nothing;
- **no KL anchor, lr 1e-3**: β = 0 and a PPO learning rate of 1e-3 (the run from issue 17);
- **few labels, many epochs**: 8 labels a round, the reward model trained 50 epochs;
- **labels flipped**: the oracle annotator's votes stored the wrong way round (the oracle that scores the policy,
  and its judgements of the blind win-rate pairs, are the true ones);
- **worse than SFT**: labels flipped over two rounds: the policy learns the opposite of what people want while the
  reward-model score rises, and people's win-rate judgements of it against the SFT policy say so
  (`winrate_below_sft`);
- **oracle 50% noise**: half of the oracle's votes are coin flips.

Every broken arm should fire by the end of its first (bad) round; the 50%-noise arm misses at seeds whose reward model
still ranks the policy's samples as a healthy one does (`oracle_uncorrelated` in `trainers.loop.diagnostics` gives the
numbers). Prints the table and writes bench/out/failure_warnings.json.

    python bench/failure_warnings.py                       # every arm at 3 seeds, ~30 min on 2 cores
    python bench/failure_warnings.py --arms no_kl --seeds 0
    python bench/failure_warnings.py --rejudge             # the stored runs judged again by the current rules
    python bench/failure_warnings.py --arms flipped --config '{"rounds": 2}' --tag r2   # settings on top of each arm
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.demo_runs import seeded_template  # noqa: E402

OUT = ROOT / "bench" / "out"
WORK = OUT / "failure_warnings"
BASE = {"rounds": 2, "prompts_per_round": 20, "labels_per_round": 100, "queue_reserve": 10, "policy_iterations": 6,
        "policy_batch_size": 16}
# arm: (settings on top of BASE, labels flipped, broken)
ARMS = {
    "defaults": ({}, False, False),
    "no_kl": ({"kl_coef": 0.0, "policy_lr": 1e-3, "rounds": 1}, False, True),
    "few_labels": ({"labels_per_round": 8, "reward_epochs": 50, "rounds": 1}, False, True),
    "flipped": ({"rounds": 1}, True, True),
    "worse_than_sft": ({"rounds": 2}, True, True),
    "noisy_oracle": ({"oracle_noise": 0.5, "rounds": 1}, False, True),
}
SEEDS = (0, 1, 2)


def flip_oracle_votes(store) -> None:
    """Store every oracle vote on a training pair the wrong way round (left for right), as a bug in a label import
    would; its judgements of win-rate pairs stay right (people judging the versions are not the broken import)."""
    from labeling.queue.synthetic import OracleAnnotator
    from storage.winrate import list_winrate_pairs

    choose = OracleAnnotator.choose

    def flipped(self, shown):
        if shown.pair_id in {p.pair_id for p in list_winrate_pairs(store)}:
            return choose(self, shown)
        return {"left": "right", "right": "left"}.get(choose(self, shown), "tie")

    OracleAnnotator.choose = flipped


def run_arm(arm: str, seed: int, folder: Path, extra: dict | None = None, template: Path | None = None) -> dict:
    """Run one arm's loop (settings `extra` on top) in this process on a copy of a demo-seeded store (`template`, by
    default the bench's own); returns what fired, in order."""
    from storage import Store
    from storage import jobs as job_rows
    from storage.db import copy_store
    from storage.job_warnings import list_warnings
    from trainers.entry.worker import run_job
    from trainers.loop.config import LoopConfig
    from trainers.loop.rounds import Loop

    settings, flipped, broken = ARMS[arm]
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    copy_store(template or seeded_template(WORK), folder / "studio.db")
    store = Store(folder / "studio.db")
    if flipped:
        flip_oracle_votes(store)
    config = LoopConfig.from_dict({**BASE, **settings, "seed": seed, **(extra or {})})
    job_id = job_rows.create_job(store, "loop", config.to_dict())
    job = job_rows.claim_job(store, job_id, os.getpid())
    status = run_job(store, job, runner=lambda s, j: Loop(s, j, log=lambda line: None).run())
    warnings = list_warnings(store, job_id)
    return {"arm": arm, "seed": seed, "broken": broken, "status": status.value, "rounds": config.rounds,
            "fired": [{"rule": w.rule, "round": w.round, "step": w.step, "detail": w.detail} for w in warnings]}


def judge(arm: str, seed: int, folder: Path) -> dict:
    """A stored run judged again by the current rules (after a threshold changed), without training anything."""
    from storage import Store
    from storage import jobs as job_rows
    from trainers.loop.config import LoopConfig
    from trainers.loop.failure_warnings import policy_phase_findings, reward_phase_findings, winrate_findings

    store = Store(folder / "studio.db")
    [job] = job_rows.list_jobs(store)
    config = LoopConfig.from_dict(job.config)
    found = [f for g in range(1, config.rounds + 1) for f in (*reward_phase_findings(store, job.id, config, g),
                                                              *policy_phase_findings(store, job.id, config, g, 1))]
    found += [f for f in winrate_findings(store, job.id, config, 1) if (f.rule, f.round) not in
              {(g.rule, g.round) for g in found}]  # the final version, judged at the loop's end
    return {"arm": arm, "seed": seed, "broken": ARMS[arm][2], "status": job.status.value + " (rejudged)",
            "rounds": config.rounds,
            "fired": [{"rule": f.rule, "round": f.round, "step": f.step, "detail": f.detail} for f in found]}


def run_folder(arm: str, seed: int, tag: str) -> Path:
    return WORK / (f"{arm}-{seed}" + (f"-{tag}" if tag else ""))


def _run_in_child(arm: str, seed: int, config: str = "{}", tag: str = "") -> dict:
    """Each arm in its own process (the flipped arm patches the annotator)."""
    result = subprocess.run([sys.executable, __file__, "--child", arm, str(seed), "--config", config, "--tag", tag],
                            cwd=ROOT, capture_output=True, text=True)
    if result.returncode != 0:
        return {"arm": arm, "seed": seed, "broken": ARMS[arm][2], "status": "error: " + result.stderr[-300:],
                "rounds": 0, "fired": []}
    return json.loads(result.stdout.strip().splitlines()[-1])


def verdict(row: dict) -> str:
    """ok when a broken arm fired in round 1 and a healthy one fired nothing."""
    first = [f for f in row["fired"] if f["round"] <= 1]
    if row["broken"]:
        return "ok" if first else "MISSED"
    return "ok" if not row["fired"] else "FALSE ALARM"


def table(rows: list[dict]) -> str:
    lines = [f"{'arm':<14} {'seed':>4} {'status':<10} {'verdict':<11} fired (rule@round:step)", "-" * 96]
    for row in rows:
        fired = ", ".join(f"{f['rule']}@r{f['round']}:{f['step']}" for f in row["fired"]) or "-"
        lines.append(f"{row['arm']:<14} {row['seed']:>4} {row['status'][:10]:<10} {verdict(row):<11} {fired}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arms", nargs="*", default=list(ARMS), choices=list(ARMS))
    parser.add_argument("--seeds", nargs="*", type=int, default=None, help=f"seeds of every arm (default: {SEEDS})")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--rejudge", action="store_true", help="judge the stored runs again; train nothing")
    parser.add_argument("--config", default="{}", metavar="JSON", help="loop settings on top of every arm's")
    parser.add_argument("--tag", default="", help="names these runs' folders and JSON file apart")
    parser.add_argument("--child", nargs=2, metavar=("ARM", "SEED"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        arm, seed = args.child
        print(json.dumps(run_arm(arm, int(seed), run_folder(arm, int(seed), args.tag), json.loads(args.config))))
        return
    runs = [(arm, seed) for arm in args.arms for seed in (args.seeds or SEEDS)]
    if args.rejudge:
        rows = [judge(arm, seed, run_folder(arm, seed, args.tag)) for arm, seed in runs
                if run_folder(arm, seed, args.tag).exists()]
    else:
        seeded_template(WORK)
        with ProcessPoolExecutor(args.workers) as pool:
            rows = list(pool.map(_run_in_child, *zip(*runs, strict=True), [args.config] * len(runs),
                                 [args.tag] * len(runs)))
    OUT.mkdir(parents=True, exist_ok=True)
    name = "failure_warnings" + (f"-{args.tag}" if args.tag else "")
    (OUT / f"{name}.json").write_text(json.dumps({"base": BASE, "config": json.loads(args.config), "runs": rows},
                                                 indent=1) + "\n")
    print(table(rows))


if __name__ == "__main__":
    main()
