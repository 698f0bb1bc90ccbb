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
import random
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402
from gradio_client import Client  # noqa: E402

from bench.annotate_load import Ledger, fill, free_port, percentile, wait_for  # noqa: E402
from storage import Store  # noqa: E402
from storage import jobs as job_rows  # noqa: E402
from storage.db import copy_store  # noqa: E402
from storage.labels import list_labels  # noqa: E402
from storage.metrics import read_metrics  # noqa: E402

POLL_S = 0.5  # an annotator facing an empty queue asks again after this long (the Label tab polls too)
CHOICES = ["left", "right", "tie", "both_bad"]


@dataclass
class Annotation:
    """What the clients saw in one run."""

    ledger: Ledger = field(default_factory=Ledger)
    latencies: list[float] = field(default_factory=list)
    empty_polls: int = 0
    errors: list[BaseException] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.seconds if self.seconds else 0.0


def annotate(url: str, annotators: int, seconds: float) -> Annotation:
    """`annotators` clients label as fast as they can for `seconds` (each vote: one submit that returns the next pair)."""
    run, lock = Annotation(), threading.Lock()
    clients = [Client(url, verbose=False) for _ in range(annotators)]
    begin = threading.Barrier(annotators + 1)

    def work(client: Client, name: str) -> None:
        rng, latencies, polls = random.Random(name), [], 0
        try:
            shown = client.predict(name, api_name="/next_pair")
            run.ledger.hand(shown["pair_id"], name)
            begin.wait()
            while time.perf_counter() < stop_at:
                if shown["pair_id"] is None:
                    polls += 1
                    time.sleep(POLL_S)
                    shown = client.predict(name, api_name="/next_pair")
                    run.ledger.hand(shown["pair_id"], name)
                    continue
                pair_id, vote_id, started = shown["pair_id"], uuid.uuid4().hex, time.perf_counter()
                answer = client.predict(name, pair_id, rng.choice(CHOICES), vote_id, api_name="/submit_label")
                latencies.append(time.perf_counter() - started)
                run.ledger.ack(vote_id, answer["label_id"], pair_id, name)
                shown = answer["next"]
                run.ledger.hand(shown["pair_id"], name)
        except BaseException as exc:  # reported by the caller
            run.errors.append(exc)
            begin.abort()  # nobody waits for a client that failed before the start
        with lock:
            run.latencies.extend(latencies)
            run.empty_polls += polls

    stop_at = float("inf")
    threads = [threading.Thread(target=work, args=(c, f"annotator-{i}")) for i, c in enumerate(clients)]
    for thread in threads:
        thread.start()
    try:
        begin.wait()
    except threading.BrokenBarrierError:
        pass
    started = time.perf_counter()
    stop_at = started + seconds
    for thread in threads:
        thread.join()
    run.seconds = time.perf_counter() - started
    return run


def audit(store: Store, ledger: Ledger) -> dict[str, int]:
    """Acknowledged votes missing or changed in the store, pairs handed to two annotators, pairs labeled twice."""
    stored = {label.vote_id: (label.id, label.pair_id, label.annotator) for label in list_labels(store, include_undone=True)}
    handed = [pair for pair, _ in set(ledger.handed)]
    labeled_twice = store.db().execute("SELECT count(*) FROM (SELECT pair_id FROM labels WHERE undone IS NULL AND"
                                       " outcome != 'skip' GROUP BY pair_id HAVING count(*) > 1)").fetchone()[0]
    return {"lost": len(set(ledger.acknowledged) - set(stored)),
            "changed": sum(1 for v, row in ledger.acknowledged.items() if v in stored and stored[v] != row),
            "double_assigned": len(handed) - len(set(handed)),
            "labeled_twice": labeled_twice}


def cpu_s(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


@dataclass(frozen=True)
class Progress:
    """How far a loop job got: its progress fraction, phase, PPO iterations and reward steps, the worker's CPU."""

    fraction: float
    phase: str
    ppo_iterations: int
    reward_steps: int
    worker_cpu_s: float


def job_progress(store: Store, job_id: int) -> Progress:
    job = job_rows.get_job(store, job_id)
    try:
        cpu = cpu_s(psutil.Process(job.pid))
    except (psutil.Error, TypeError):  # the worker has ended (or never started)
        cpu = float("nan")
    return Progress(job.progress or 0.0, job.phase or job.status.value,
                    len(read_metrics(store, job_id, names=["ppo/kl"])),
                    len(read_metrics(store, job_id, names=["reward/loss"])), cpu)


def stop_job(store: Store, job_id: int, timeout: float = 120) -> None:
    """Cancel the job and wait for its worker to stop (SIGKILL after `timeout`: the worker is ours)."""
    job_rows.request_cancel(store, job_id)
    deadline = time.time() + timeout
    while job_rows.get_job(store, job_id).status.active and time.time() < deadline:
        time.sleep(0.5)
    job = job_rows.get_job(store, job_id)
    if job.status.active and job.pid:
        psutil.Process(job.pid).kill()


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
        stop_job(store, job_id)
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
    subprocess.run([sys.executable, "-m", "trainers.demo_seed", "--db", str(template)], cwd=ROOT, check=True,
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
        print(f"| {name} | {labeling} | {progress.fraction:.3f} | {progress.phase} | {progress.ppo_iterations} | "
              f"{progress.reward_steps} | {progress.worker_cpu_s:.0f} | {run.studio_cpu_s:.0f} | {run.client_cpu_s:.0f} |")
    ratio = busy.progress.fraction / idle.progress.fraction if idle.progress.fraction else float("nan")
    print(f"\nworker progress with {args.annotators} annotators: {ratio:.0%} of the loop alone (worker CPU "
          f"{busy.progress.worker_cpu_s / idle.progress.worker_cpu_s:.0%}); {len(busy.votes.latencies)} votes "
          f"acknowledged, {busy.votes.empty_polls} empty-queue polls; {psutil.cpu_count()} CPUs shared by the worker, "
          "the studio and this benchmark's clients")
    checks = busy.checks
    bad = checks["lost"] or checks["changed"] or checks["double_assigned"] or checks["labeled_twice"] or busy.votes.errors
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
