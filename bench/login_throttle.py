"""Logins under --auth: the scrypt cost, login latency through the login gate, throttling of wrong passwords, and
whether an annotator stays served while a burst of logins is checked (hashes in the gate's thread pool, as shipped,
against the same burst with each hash computed on the event loop).

    python bench/login_throttle.py [--burst-threads 8] [--burst-logins 64] [--probes 30]

Prints three tables. Studios are served in this process (bench.studio_driver.launch_studio), with the product's cost.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import Executor, Future
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import httpx  # noqa: E402
from gradio_client import Client  # noqa: E402

from app.door import sessions  # noqa: E402
from app.passwords import DEFAULT_COST, hash_password, verify_password  # noqa: E402
from bench.studio_driver import hashed_auth_file, launch_studio  # noqa: E402
from storage import Store  # noqa: E402
from storage.generations import NewGeneration, add_generations  # noqa: E402
from storage.pairs import NewPair, add_pairs  # noqa: E402
from storage.prompts import add_prompts, list_prompts  # noqa: E402

PASSWORDS = {"alice": "alice-pw", "bob": "bob-pw", "owner": "owner-pw"}


class InlineExecutor(Executor):
    """Runs each job at once in the caller's thread: with it, the gate hashes on the event loop (the comparison)."""

    def submit(self, fn, /, *args, **kwargs):
        future = Future()
        future.set_result(fn(*args, **kwargs))
        return future


def ms(values: list[float], q: int) -> float:
    """The q-th percentile in milliseconds."""
    if len(values) == 1:
        return 1000 * values[0]
    return 1000 * statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def seed(store: Store, pairs: int) -> None:
    add_prompts(store, [f"prompt {i}" for i in range(pairs)])
    new = []
    for prompt in list_prompts(store):
        a, b = add_generations(store, [NewGeneration(prompt.id, "good film"), NewGeneration(prompt.id, "bad film")])
        new.append(NewPair(prompt.id, a, b, selector="random"))
    add_pairs(store, new)


def serve(folder: Path, inline_hashing: bool = False):
    store = Store(folder / ("inline.db" if inline_hashing else "studio.db"))
    seed(store, 400)
    users = hashed_auth_file(folder / f"users-{store.path.stem}.txt", PASSWORDS, admins={"owner"}, cost=DEFAULT_COST)
    real_pool = sessions.ThreadPoolExecutor
    if inline_hashing:  # the gate is built at the first request, which launch() itself makes
        sessions.ThreadPoolExecutor = lambda *args, **kwargs: InlineExecutor()
    try:
        return launch_studio(store, users)
    finally:
        sessions.ThreadPoolExecutor = real_pool


def login(url: str, name: str, password: str, address: str = "127.0.0.1") -> httpx.Response:
    return httpx.post(f"{url}/login", data={"username": name, "password": password},
                      headers={"X-Forwarded-For": address}, timeout=120)


def hashing_table(url: str) -> None:
    entry = hash_password("pw")
    hashes = []
    for _ in range(20):
        started = time.perf_counter()
        verify_password("pw", entry)
        hashes.append(time.perf_counter() - started)
    logins = []
    for i in range(20):
        started = time.perf_counter()
        assert login(url, "alice", "alice-pw", f"10.1.0.{i}").status_code == 200
        logins.append(time.perf_counter() - started)
    cost = DEFAULT_COST
    print(f"scrypt N={cost.n} r={cost.r} p={cost.p} ({cost.memory_bytes // 2**20} MB)\n")
    print("| what | p50 ms | p95 ms | max ms |\n|---|---|---|---|")
    for name, values in (("one hash (verify_password)", hashes), ("a correct login (POST /login)", logins)):
        print(f"| {name} | {ms(values, 50):.0f} | {ms(values, 95):.0f} | {1000 * max(values):.0f} |")


def throttle_table(url: str) -> None:
    """30 wrong passwords for owner as fast as they go (real clock), then the lock-out sequence on a hand clock."""
    started, answers = time.perf_counter(), []
    for i in range(30):
        answers.append(login(url, "owner", f"guess-{i}", "10.2.0.1").status_code)
    wall = time.perf_counter() - started
    print("\n| 30 wrong passwords, one name, one address | value |\n|---|---|")
    print(f"| checked before the first refusal | {answers.index(429) if 429 in answers else 'none'} |")
    print(f"| checked / refused (HTTP 400 / 429) | {answers.count(400)} / {answers.count(429)} |")
    print(f"| wall time | {wall:.2f} s |")
    clock = FakeClock()
    real_time, sessions.time = sessions.time, clock
    try:  # keep guessing; when refused, wait exactly as told
        failures, waits = 0, []
        while len(waits) < 10:
            response = login(url, "carol", f"guess-{failures}", "10.3.0.1")  # an unknown name: throttled alike
            if response.status_code == 429:
                waits.append((failures, int(response.headers["retry-after"])))
                clock.now += waits[-1][1]
            else:
                failures += 1
    finally:
        sessions.time = real_time
    print(f"| failures before the first lock-out (hand clock) | {waits[0][0]} |")
    first = waits[0][0]
    print(f"| lock-out after failure {first}, {first + 1}, ... (s) | {', '.join(str(w) for _, w in waits)} |")


class FakeClock:
    def __init__(self):
        self.now = time.monotonic()

    def monotonic(self) -> float:
        return self.now


def probe_during_burst(url: str, threads: int, logins: int, probes: int) -> tuple[list[float], float]:
    """bob's /next_pair latencies while `threads` clients send `logins` wrong logins (distinct names and addresses,
    so none is throttled); returns the latencies and the burst's logins/s (0 without a burst)."""
    bob = Client(url, auth=("bob", "bob-pw"), verbose=False)
    bob.predict("", api_name="/next_pair")
    latencies = []

    def burst(worker: int) -> None:
        for i in range(logins // threads):
            login(url, f"guess-{worker}-{i}", "wrong", f"10.4.{worker}.{i % 250}")

    workers = [threading.Thread(target=burst, args=(w,)) for w in range(threads)]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    while len(latencies) < probes and (threads == 0 or any(w.is_alive() for w in workers)):
        t = time.perf_counter()
        bob.predict("", api_name="/next_pair")
        latencies.append(time.perf_counter() - t)
    for worker in workers:
        worker.join()
    rate = (logins // threads * threads) / (time.perf_counter() - started) if threads else 0.0
    return latencies, rate


def loop_table(shipped: str, inline: str, threads: int, logins: int, probes: int) -> None:
    print("\n| another user's /next_pair | p50 ms | p95 ms | max ms | probes | burst logins/s |")
    print("|---|---|---|---|---|---|")
    burst = f"burst of {logins} logins"
    for name, url, burst_threads in (("no burst", shipped, 0),
                                     (f"{burst}, hashing in the gate's threads (shipped)", shipped, threads),
                                     (f"{burst}, hashing on the event loop", inline, threads)):
        latencies, rate = probe_during_burst(url, burst_threads, logins, probes)
        print(f"| {name} | {ms(latencies, 50):.0f} | {ms(latencies, 95):.0f} | {1000 * max(latencies):.0f} | "
              f"{len(latencies)} | {rate:.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--burst-threads", type=int, default=8, help="clients sending wrong logins at once")
    parser.add_argument("--burst-logins", type=int, default=64, help="wrong logins in the burst")
    parser.add_argument("--probes", type=int, default=30, help="/next_pair calls measured at most")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        shipped = serve(Path(folder))
        inline = serve(Path(folder), inline_hashing=True)
        try:
            url = shipped.local_url.rstrip("/")
            hashing_table(url)
            throttle_table(url)
            loop_table(url, inline.local_url.rstrip("/"), args.burst_threads, args.burst_logins, args.probes)
        finally:
            shipped.close()
            inline.close()


if __name__ == "__main__":
    main()
