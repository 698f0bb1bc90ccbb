"""Scale out on the CPU: one PPO phase, 1 process against the shipped 2-process config; prints a markdown table.

Each row is a PPO job (oracle reward, the demo policy, demo prompts) started through the launcher as the Train tab
starts it and timed to its end: in the worker's own process (no accelerate config), under `accelerate launch` with 1
CPU process, and under accelerate/cpu-2proc.yaml (2 gloo processes). The global batch is the same in every row
(a process's batch is the global batch over the processes), so every row does the same work per iteration.
Episodes/s is the trainer's own `ppo/episodes_per_s` (median over the iterations); "job s" counts everything from
the button to the registered policy (worker start, model loading, the phase's start).

    python bench/scale_out.py                             # about 5 minutes on 2 CPU cores
    python bench/scale_out.py --iterations 8 --batch 32 --threads 1
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from assets.corpus import build_corpus  # noqa: E402
from storage import JobStatus, Store  # noqa: E402
from storage import jobs as job_rows  # noqa: E402
from storage.metrics import read_metrics  # noqa: E402
from storage.policies import add_policy  # noqa: E402
from storage.prompts import add_prompts  # noqa: E402
from trainers.jobs.launcher import start_job  # noqa: E402

ONE_CPU_PROCESS = "compute_environment: LOCAL_MACHINE\ndistributed_type: 'NO'\nuse_cpu: true\nnum_processes: 1\n"


def run_policy(store: Store, policy_id: int, config: Path | None, processes: int, args: argparse.Namespace) -> dict:
    """One PPO job with `args.batch` episodes per iteration over `processes`; its time and episodes/s."""
    settings = {"iterations": args.iterations, "reward": "oracle", "policy_id": policy_id,
                "settings": {"batch_size": args.batch // processes, "num_mini_batches": 1, "epochs": 1,
                        "response_length": args.response_length}}
    started = time.perf_counter()
    job_id = start_job(store, "ppo", settings, config)
    while job_rows.get_job(store, job_id).status.active:
        time.sleep(0.2)
    seconds = time.perf_counter() - started
    job = job_rows.get_job(store, job_id)
    if job.status is not JobStatus.COMPLETED:
        raise SystemExit(f"job {job_id} ended {job.status.value}: {job.error}")
    rates = [r["value"] for r in read_metrics(store, job_id, names=["ppo/episodes_per_s"])]
    return {"seconds": seconds, "episodes_per_s": statistics.median(rates)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=6)
    parser.add_argument("--batch", type=int, default=16, help="episodes per iteration, over every process")
    parser.add_argument("--response-length", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of every process")
    parser.add_argument("--work", default=None, help="folder for the store (default: a temp folder)")
    args = parser.parse_args()
    os.environ.update(OMP_NUM_THREADS=str(args.threads), CUDA_VISIBLE_DEVICES="")
    work = Path(args.work or tempfile.mkdtemp(prefix="scale-out-"))
    store = Store(work / "studio.db")
    add_prompts(store, build_corpus(4 * args.batch, seed=1))
    policy_id = add_policy(store, str(ROOT / "assets" / "demo_policy"), round=0, note="SFT")
    one = work / "cpu-1proc.yaml"
    one.write_text(ONE_CPU_PROCESS)
    setups = [("in the worker (no config)", None, 1), ("accelerate launch, 1 process", one, 1),
              ("accelerate/cpu-2proc.yaml", ROOT / "accelerate" / "cpu-2proc.yaml", 2)]
    print(f"PPO, {args.iterations} iterations x {args.batch} episodes, response length {args.response_length}, "
          f"OMP_NUM_THREADS={args.threads}, {os.cpu_count()} CPU cores, load average {os.getloadavg()[0]:.1f}")
    print("\n| runs on | processes | job s | episodes/s (median) | s per iteration | episodes/s vs in the worker |")
    print("|---|---:|---:|---:|---:|---:|")
    base = None
    for name, config, processes in setups:
        result = run_policy(store, policy_id, config, processes, args)
        base = base or result["episodes_per_s"]
        print(f"| {name} | {processes} | {result['seconds']:.0f} | {result['episodes_per_s']:.1f} | "
              f"{args.batch / result['episodes_per_s']:.2f} | {result['episodes_per_s'] / base:.2f}x |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
