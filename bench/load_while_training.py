"""Labeling while a loop trains: N concurrent annotators (gradio_client) against `python app.py serve` for a fixed
time while a loop job started through `/start_loop` trains in its worker; the same loop alone is the baseline.

    python bench/load_while_training.py [--annotators 16] [--seconds 120] [--pairs 5000]

Both runs start from copies of one store (the demo seed plus `--pairs` extra pairs, so annotators never run dry),
with a studio serving it. Prints a table: votes/s, p50/p95 latency of a vote (submit + next pair in one call),
acknowledged votes lost, pairs handed to two annotators, and the worker's progress after the same time with and
without annotators (loop progress, PPO iterations, reward-training steps, worker CPU seconds).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402
from gradio_client import Client  # noqa: E402

from bench.annotate_load import fill, percentile, wait_for  # noqa: E402
from bench.studio_driver import Annotation, Progress, annotate, audit, cpu_s, free_port, job_progress, stop_and_wait  # noqa: E402
from storage import Store  # noqa: E402
from storage.db import copy_store  # noqa: E402


def start_studio(db: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    process = subprocess.Popen([sys.executable, "app.py", "serve", "--db", str(db), "--no-demo", "--port", str(port)],
                               cwd=ROOT, stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    wait_for(url, process)
    return process, url


@dataclass(frozen=True)
class Run:
    """One measured run: the loop's progress, the annotators' votes (None: the loop alone), the audit of the store,
    and the CPU seconds the studio process and this benchmark's clients used during the measured time."""

    progress: Progress
    votes: Annotation | None
    checks: dict | None
    studio_cpu_s: float
    client_cpu_s: float


def measure(template: Path, db: Path, config: dict, annotators: int, seconds: float) -> Run:
    """A studio on a copy of the store, a loop started through the API, then annotators (or none) for `seconds`."""
    copy_store(template, db)
    store = Store(db)
    studio, url = start_studio(db)
    try:
        job_id = Client(url, verbose=False).predict(json.dumps(config), api_name="/start_loop")["job_id"]
        studio_cpu, client_cpu = cpu_s(psutil.Process(studio.pid)), time.process_time()
        if annotators:
            votes = annotate(url, annotators, seconds)
        else:
            votes = None
            time.sleep(seconds)
        progress = job_progress(store, job_id)
        studio_cpu, client_cpu = cpu_s(psutil.Process(studio.pid)) - studio_cpu, time.process_time() - client_cpu
        stop_and_wait(store, job_id)
    finally:
        studio.terminate()
        studio.wait(timeout=30)
    return Run(progress, votes, audit(store, votes.ledger) if votes else None, studio_cpu, client_cpu)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--annotators", type=int, default=16, help="concurrent annotators while the loop trains")
    parser.add_argument("--seconds", type=float, default=120.0, help="measured time of each run")
    parser.add_argument("--pairs", type=int, default=5000, help="extra pairs queued so annotators never run dry")
    parser.add_argument("--config", default="{}", help="loop settings (JSON) on top of the demo preset")
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="load-while-training-"))
    template = folder / "template.db"
    subprocess.run([sys.executable, "-m", "trainers.loop.demo_seed", "--db", str(template)], cwd=ROOT, check=True,
                   capture_output=True)
    fill(Store(template), args.pairs)
    config = json.loads(args.config)
    print(f"store ready in {folder}; each run lasts {args.seconds:.0f} s", file=sys.stderr)
    idle = measure(template, folder / "idle.db", config, 0, args.seconds)
    busy = measure(template, folder / "busy.db", config, args.annotators, args.seconds)

    print(f"| run | votes/s | p50 ms | p95 ms | lost | double-assigned | errors | loop progress | phase at "
          f"{args.seconds:.0f} s | PPO iterations | reward steps | worker CPU s | studio CPU s | client CPU s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|")
    for name, run in (("loop alone", idle), (f"loop + {args.annotators} annotators", busy)):
        votes, checks, progress = run.votes, run.checks, run.progress
        labeling = ("— | — | — | — | — | —" if votes is None else
                    f"{votes.rate:.1f} | {1000 * percentile(votes.latencies, 50):.0f} | "
                    f"{1000 * percentile(votes.latencies, 95):.0f} | {checks['lost'] + checks['changed']} | "
                    f"{checks['double_assigned'] + checks['labeled_twice']} | {len(votes.errors)}")
        print(f"| {name} | {labeling} | {progress.fraction:.3f} | {progress.phase} | {progress.policy_iterations} | "
              f"{progress.reward_steps} | {progress.worker_cpu_s:.0f} | {run.studio_cpu_s:.0f} | "
              f"{run.client_cpu_s:.0f} |")
    ratio = busy.progress.fraction / idle.progress.fraction if idle.progress.fraction else float("nan")
    print(f"\nworker progress with {args.annotators} annotators: {ratio:.0%} of the loop alone (worker CPU "
          f"{busy.progress.worker_cpu_s / idle.progress.worker_cpu_s:.0%}); {len(busy.votes.latencies)} votes "
          f"acknowledged, {busy.votes.empty_polls} empty-queue polls; {psutil.cpu_count()} CPUs shared by the worker, "
          "the studio and this benchmark's clients")
    checks = busy.checks
    bad = (checks["lost"] or checks["changed"] or checks["double_assigned"] or checks["labeled_twice"]
           or busy.votes.errors)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
