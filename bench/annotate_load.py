"""Labeling under load: N concurrent gradio_client annotators against a studio served in a subprocess.

Each annotator asks `/next_pair`, then votes with `/submit_label` (which returns the next pair: one round trip per
vote) for a fixed time. The same clients then call a no-op endpoint of the same app, in alternating slices of the
same run, to show Gradio's own cost. Afterwards the store must hold exactly the acknowledged votes, and no pair may
have been handed to two annotators (overlap 1, no skips).

    python bench/annotate_load.py [--annotators 1 4 16] [--seconds 12] [--slices 3] [--pairs 20000]

Prints a table: calls/s, p50/p95 latency in ms, the studio process's CPU time per call (what our code adds on top
of Gradio's own work, independent of how busy the machine is), and our votes/s as a fraction of the no-op's calls/s.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr  # noqa: E402
import psutil  # noqa: E402
from gradio_client import Client  # noqa: E402

from bench.studio_driver import Ledger, free_port  # noqa: E402
from storage import Store  # noqa: E402
from storage.generations import NewGeneration, add_generations  # noqa: E402
from storage.labels import list_labels  # noqa: E402
from storage.pairs import NewPair, add_pairs  # noqa: E402
from storage.prompts import add_prompts, list_prompts  # noqa: E402


def fill(store: Store, n_pairs: int, seed: int = 0) -> None:
    """`n_pairs` pairs of two generations each, one prompt per pair, random selector scores."""
    rng = random.Random(seed)
    add_prompts(store, [f"Prompt {i}: write a short movie review." for i in range(n_pairs)])
    prompts = list_prompts(store)
    ids = add_generations(store, [NewGeneration(p.id, f"{side} review {p.id}: " + "the film was fine. " * 5,
                                                source="sample")
                                  for p in prompts for side in ("first", "second")])
    add_pairs(store, [NewPair(p.id, ids[2 * i], ids[2 * i + 1], "random", rng.random()) for i, p in enumerate(prompts)])


def serve(db: str, port: int) -> None:
    """The studio's app plus a no-op endpoint (this benchmark's only), launched like `python app.py serve`."""
    from app.door.ui import build_app, launch_options
    from app.label.label_screen import QUEUE_WORKERS

    def noop(annotator: str, request: gr.Request) -> dict:
        """Does nothing: Gradio's own cost per call."""
        return {"pair_id": None}

    blocks = build_app(Store(db))
    with blocks:
        gr.api(noop, api_name="noop", concurrency_id="noop", concurrency_limit=QUEUE_WORKERS)
    blocks.launch(server_name="127.0.0.1", server_port=port, quiet=True, **launch_options())


def wait_for(url: str, process: subprocess.Popen, timeout: float = 120) -> None:
    import urllib.request

    deadline = time.time() + timeout
    while time.time() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the studio exited with code {process.returncode}")
        try:
            urllib.request.urlopen(url + "config", timeout=2)
            return
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"the studio did not answer at {url} within {timeout} s")


class Tally:
    """Calls, latencies and studio CPU time summed over the slices of one measurement."""

    def __init__(self):
        self.latencies: list[float] = []
        self.seconds = 0.0
        self.cpu_s = 0.0
        self.client_cpu_s = 0.0

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.seconds

    @property
    def cpu_ms_per_call(self) -> float:
        return 1000 * self.cpu_s / max(len(self.latencies), 1)

    def cells(self) -> str:
        return (f"{self.rate:.1f} | {1000 * percentile(self.latencies, 50):.0f} | "
                f"{1000 * percentile(self.latencies, 95):.0f} | {self.cpu_ms_per_call:.1f}")


def run_slice(clients: list, seconds: float, work, server: psutil.Process, tally: Tally) -> None:
    """All clients run `work(client, name, stop_at, latencies)` at once for `seconds`; adds the results to `tally`."""
    latencies: list[list[float]] = [[] for _ in clients]
    errors: list[BaseException] = []
    start = threading.Barrier(len(clients) + 1)

    def client_thread(i: int) -> None:
        start.wait()
        try:
            work(clients[i], f"annotator-{i}", stop_at, latencies[i])
        except BaseException as exc:  # reported after the run
            errors.append(exc)

    threads = [threading.Thread(target=client_thread, args=(i,)) for i in range(len(clients))]
    for thread in threads:
        thread.start()
    cpu, client_cpu, began = server_cpu_s(server), time.process_time(), time.perf_counter()
    stop_at = began + seconds
    start.wait()
    for thread in threads:
        thread.join()
    if errors:
        raise SystemExit(f"a client failed: {errors[0]!r}")
    tally.seconds += time.perf_counter() - began
    tally.cpu_s += server_cpu_s(server) - cpu
    tally.client_cpu_s += time.process_time() - client_cpu
    tally.latencies.extend(x for per_client in latencies for x in per_client)


class Annotators:
    """Annotators who keep the pair on their screen from one slice to the next."""

    def __init__(self, ledger: Ledger):
        self.ledger = ledger
        self.on_screen: dict[str, dict] = {}

    def warm_up(self, clients: list) -> None:
        """Before timing: each client's first calls (connections, the studio's per-thread store handles)."""
        for i, client in enumerate(clients):
            name = f"annotator-{i}"
            client.predict(name, api_name="/noop")
            if name not in self.on_screen:
                self.on_screen[name] = client.predict(name, api_name="/next_pair")
                self.ledger.hand(self.on_screen[name]["pair_id"], name)

    def work(self, client, name: str, stop_at: float, latencies: list[float]) -> None:
        rng = random.Random(name)
        while time.perf_counter() < stop_at and self.on_screen[name]["pair_id"] is not None:
            pair_id, vote_id = self.on_screen[name]["pair_id"], uuid.uuid4().hex
            began = time.perf_counter()
            answer = client.predict(name, pair_id, rng.choice(["left", "right", "tie", "both_bad"]), vote_id,
                                    api_name="/submit_label")
            latencies.append(time.perf_counter() - began)
            self.ledger.ack(vote_id, answer["label_id"], pair_id, name)
            self.on_screen[name] = answer["next"]
            self.ledger.hand(answer["next"]["pair_id"], name)


def noop(client, name: str, stop_at: float, latencies: list[float]) -> None:
    while time.perf_counter() < stop_at:
        began = time.perf_counter()
        client.predict(name, api_name="/noop")
        latencies.append(time.perf_counter() - began)


def server_cpu_s(server: psutil.Process) -> float:
    """CPU seconds the studio process has used so far (user + system, all threads)."""
    times = server.cpu_times()
    return times.user + times.system


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--annotators", type=int, nargs="+", default=[1, 4, 16], help="concurrent clients per run")
    parser.add_argument("--seconds", type=float, default=12.0, help="measured time per endpoint and client count")
    parser.add_argument("--slices", type=int, default=3, help="alternations of our endpoint and the no-op")
    parser.add_argument("--pairs", type=int, default=20_000, help="pairs in the queue (enough for every run)")
    parser.add_argument("--serve", nargs=2, metavar=("DB", "PORT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve[0], int(args.serve[1]))
        return 0

    folder = Path(tempfile.mkdtemp(prefix="annotate-load-"))
    db = folder / "studio.db"
    started = time.perf_counter()
    fill(Store(db), args.pairs)
    print(f"store: {args.pairs} pairs in {time.perf_counter() - started:.1f} s ({db})", file=sys.stderr)
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    process = subprocess.Popen([sys.executable, __file__, "--serve", str(db), str(port)], cwd=ROOT)
    ledger = Ledger()
    annotators = Annotators(ledger)
    rows = []
    try:
        wait_for(url, process)
        server = psutil.Process(process.pid)
        for n in args.annotators:
            clients = [Client(url, verbose=False) for _ in range(n)]
            ours, base = Tally(), Tally()
            annotators.warm_up(clients)
            for _ in range(args.slices):  # alternate, so a change in the machine's load hits both alike
                run_slice(clients, args.seconds / args.slices, annotators.work, server, ours)
                run_slice(clients, args.seconds / args.slices, noop, server, base)
            rows.append((n, ours, base))
            print(f"  {n} annotators: {ours.rate:.1f} votes/s, no-op {base.rate:.1f} calls/s", file=sys.stderr)
    finally:
        process.terminate()
        process.wait(timeout=30)

    print("| annotators | votes/s (submit + next) | p50 ms | p95 ms | studio CPU ms/vote | no-op calls/s | p50 ms "
          "| p95 ms | studio CPU ms/call | votes/s ÷ no-op calls/s |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n, ours, base in rows:
        print(f"| {n} | {ours.cells()} | {base.cells()} | {ours.rate / base.rate:.2f} |")
    print("\nCPU of this benchmark's own client process per call (gradio_client polls): "
          + ", ".join(f"{n} annotators {1000 * ours.client_cpu_s / max(len(ours.latencies), 1):.0f} ms (votes) / "
                      f"{1000 * base.client_cpu_s / max(len(base.latencies), 1):.0f} ms (no-op)"
                      for n, ours, base in rows))

    labels = list_labels(Store(db), include_undone=True)
    stored = {label.vote_id: (label.id, label.pair_id, label.annotator) for label in labels}
    lost = set(ledger.acknowledged) - set(stored)
    unacknowledged = set(stored) - set(ledger.acknowledged)
    changed = [v for v in ledger.acknowledged if v in stored and stored[v] != ledger.acknowledged[v]]
    pairs_handed = [pair for pair, _ in set(ledger.handed)]
    double_assigned = len(pairs_handed) - len(set(pairs_handed))
    print(f"\nacknowledged votes: {len(ledger.acknowledged)}, stored labels: {len(labels)}, lost: {len(lost)}, "
          f"stored but never acknowledged: {len(unacknowledged)}, mismatched: {len(changed)}, "
          f"pairs handed to two annotators: {double_assigned}")
    return 0 if not (lost or changed or double_assigned) else 1


if __name__ == "__main__":
    sys.exit(main())
