"""A studio served in this process and driven from outside, for the load benches and the tests that measure the
same things small (bench/annotate_load.py, load_while_training.py, login_throttle.py; tests/conftest.py and the
serving tests): serving it exactly as `python app.py serve` does, auth files of hashed passwords, N annotators
labeling through the API with an audit of what the store kept, and a training job's progress seen from outside.

It lives in bench/ (the top room: nothing in the product imports it) so that benches import nothing from tests/;
tests import it from here."""

from __future__ import annotations

import random
import socket
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from gradio_client import Client

from app.auth import AuthFile, AuthLine, write_auth_file
from app.passwords import ScryptCost, hash_password
from storage import Outcome, Store
from storage import jobs as job_rows
from storage.labels import list_labels
from storage.metrics import read_metrics

TEST_SCRYPT_COST = ScryptCost(n=16, r=1, p=1)  # a fast hash for tests; the product's cost is app.passwords.DEFAULT_COST
VOTE_CHOICES = ["left", "right", "tie", "both_bad"]
EMPTY_QUEUE_POLL_S = 0.5  # an annotator facing an empty queue asks again after this long (the Label tab polls too)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def hashed_auth_file(path, passwords: dict[str, str], admins=(), cost: ScryptCost = TEST_SCRYPT_COST) -> AuthFile:
    """An auth file of hashed passwords (`add-user`'s format, at a cost fast enough for tests; `cost=` sets it) for
    `{name: password}`, `admins` marked, written whole at once (as `add-user` does, so a running studio never reads
    half of it); returns it as a served studio holds it."""
    lines = [AuthLine(name, hash_password(password, cost), name in admins) for name, password in passwords.items()]
    write_auth_file(Path(path), lines)
    return AuthFile(path)


def launch_studio(store: Store, users=None, **options):
    """The studio served in this process the way `python app.py serve` serves it (`app.door.server.serve`: orphaned jobs
    reaped, `--auth` users (an AuthFile, see `hashed_auth_file`) behind the login gate, the upload cap and styling of
    `app.door.ui.launch_options`) on 127.0.0.1 and a free port, without blocking. `options`: serve's keywords, e.g.
    `max_upload_mb`, `root_path`, `idle_timeout_s`. Returns the running Blocks; its URL is
    `.local_url`; call `.close()` when done (the `serve_studio` fixture does)."""
    from app.door.server import serve

    return serve(store, host="127.0.0.1", port=free_port(), users=users, block=False, **options)


# ---- annotators under load -------------------------------------------------------------------------------------------

class Ledger:
    """What the clients saw: pairs handed out and votes acknowledged (thread-safe)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.handed: list[tuple[int, str]] = []
        self.acknowledged: dict[str, tuple[int, int, str]] = {}

    def hand(self, pair_id: int | None, name: str) -> None:
        if pair_id is not None:
            with self.lock:
                self.handed.append((pair_id, name))

    def ack(self, vote_id: str, label_id: int, pair_id: int, name: str) -> None:
        with self.lock:
            self.acknowledged[vote_id] = (label_id, pair_id, name)


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


def label_for(client: Client, name: str, seconds: float, begin: threading.Barrier,
              ledger: Ledger) -> tuple[list[float], int]:
    """One annotator: take a pair, wait for the others, then vote (submit + next pair in one call) for `seconds`;
    an empty queue is asked again after EMPTY_QUEUE_POLL_S. Returns the votes' latencies and the empty polls."""
    rng, latencies, polls = random.Random(name), [], 0
    shown = client.predict(name, api_name="/next_pair")
    ledger.hand(shown["pair_id"], name)
    begin.wait()
    stop_at = time.perf_counter() + seconds
    while time.perf_counter() < stop_at:
        if shown["pair_id"] is None:
            polls += 1
            time.sleep(EMPTY_QUEUE_POLL_S)
            shown = client.predict(name, api_name="/next_pair")
            ledger.hand(shown["pair_id"], name)
            continue
        pair_id, vote_id, started = shown["pair_id"], uuid.uuid4().hex, time.perf_counter()
        answer = client.predict(name, pair_id, rng.choice(VOTE_CHOICES), vote_id, api_name="/submit_label")
        latencies.append(time.perf_counter() - started)
        ledger.ack(vote_id, answer["label_id"], pair_id, name)
        shown = answer["next"]
        ledger.hand(shown["pair_id"], name)
    return latencies, polls


def annotate(url: str, annotators: int, seconds: float) -> Annotation:
    """`annotators` gradio_client annotators label as fast as they can for `seconds`, all starting together."""
    run, lock = Annotation(), threading.Lock()
    clients = [Client(url, verbose=False) for _ in range(annotators)]
    begin = threading.Barrier(annotators + 1)

    def work(client: Client, name: str) -> None:
        try:
            latencies, polls = label_for(client, name, seconds, begin, run.ledger)
        except BaseException as exc:  # reported by the caller
            run.errors.append(exc)
            begin.abort()  # nobody waits for a client that failed before the start
            return
        with lock:
            run.latencies.extend(latencies)
            run.empty_polls += polls

    threads = [threading.Thread(target=work, args=(c, f"annotator-{i}")) for i, c in enumerate(clients)]
    for thread in threads:
        thread.start()
    try:
        begin.wait()
    except threading.BrokenBarrierError:
        pass
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    run.seconds = time.perf_counter() - started
    return run


def audit(store: Store, ledger: Ledger) -> dict[str, int]:
    """Acknowledged votes missing or changed in the store, pairs handed to two annotators, pairs labeled twice."""
    stored = {label.vote_id: (label.id, label.pair_id, label.annotator)
              for label in list_labels(store, include_undone=True)}
    handed = [pair for pair, _ in set(ledger.handed)]
    kept = Counter(label.pair_id for label in list_labels(store) if label.outcome is not Outcome.SKIP)
    return {"lost": len(set(ledger.acknowledged) - set(stored)),
            "changed": sum(1 for v, row in ledger.acknowledged.items() if v in stored and stored[v] != row),
            "double_assigned": len(handed) - len(set(handed)),
            "labeled_twice": sum(1 for count in kept.values() if count > 1)}


# ---- a training job seen from outside -------------------------------------------------------------------------------

def cpu_s(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


@dataclass(frozen=True)
class Progress:
    """How far a loop job got: its progress fraction, phase, PPO iterations and reward steps, the worker's CPU."""

    fraction: float
    phase: str
    policy_iterations: int
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


def stop_and_wait(store: Store, job_id: int, timeout: float = 120) -> None:
    """Stop the job as the studio does (`trainers.jobs.launcher.stop_job`) and wait for its worker to end it (SIGKILL
    after `timeout`: the worker is ours)."""
    from trainers.jobs.launcher import stop_job

    stop_job(store, job_id)
    deadline = time.time() + timeout
    while job_rows.get_job(store, job_id).status.active and time.time() < deadline:
        time.sleep(0.5)
    job = job_rows.get_job(store, job_id)
    if job.status.active and job.pid:
        psutil.Process(job.pid).kill()
