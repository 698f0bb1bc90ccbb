"""Helpers shared by tests (and by the benches that measure the same things at scale): serving a studio in this
process exactly as `python app.py serve` does, auth files of hashed passwords, waiting, and N annotators labeling
through the API with an audit of what the store kept; labeling given pairs the way the Label tab does; a finished
loop's traces written into a store (`fill_synthetic_run`, for the Curves and Samples tabs)."""

from __future__ import annotations

import math
import os
import random
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import psutil
from gradio_client import Client

from app.auth import AuthFile, AuthLine, write_auth_file
from app.context import Studio
from app.passwords import ScryptCost, hash_password
from labeling.annotation import Choice, next_pair, submit_label, update_queue_settings
from storage import JobStatus, Outcome, Store
from storage import jobs as job_rows
from storage.generations import EVAL_SOURCE, NewGeneration, add_generations, get_generations
from storage.labels import list_labels
from storage.metrics import log_metrics, read_metrics
from storage.pairs import NewPair, add_pairs, get_pair
from storage.policies import add_policy
from storage.prompts import add_prompts, list_prompts
from storage.reward_models import add_reward_model
from storage.rounds import add_round

TEST_SCRYPT_COST = ScryptCost(n=16, r=1, p=1)  # a fast hash for tests; the product's cost is app.passwords.DEFAULT_COST
VOTE_CHOICES = ["left", "right", "tie", "both_bad"]
EMPTY_QUEUE_POLL_S = 0.5  # an annotator facing an empty queue asks again after this long (the Label tab polls too)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(condition, timeout: float = 120, every: float = 0.1):
    """Poll `condition()` until it returns something truthy (returned), or fail after `timeout` seconds."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every)
    raise AssertionError("timed out waiting")


def hashed_auth_file(path, passwords: dict[str, str], admins=(), cost: ScryptCost = TEST_SCRYPT_COST) -> AuthFile:
    """An auth file of hashed passwords (`add-user`'s format, at a cost fast enough for tests; `cost=` sets it) for
    `{name: password}`, `admins` marked, written whole at once (as `add-user` does, so a running studio never reads
    half of it); returns it as a served studio holds it."""
    lines = [AuthLine(name, hash_password(password, cost), name in admins) for name, password in passwords.items()]
    write_auth_file(Path(path), lines)
    return AuthFile(path)


class FakeTime:
    """Stands in for the `time` module of app.sessions (monkeypatch it): a monotonic clock moved by hand."""

    def __init__(self, now: float = 1000.0):
        self.now = now

    def monotonic(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def launch_studio(store: Store, users=None, **options):
    """The studio served in this process the way `python app.py serve` serves it (`app.server.serve`: orphaned jobs
    reaped, `--auth` users (an AuthFile, see `hashed_auth_file`) behind the login gate, the upload cap and styling of
    `app.ui.launch_options`) on 127.0.0.1 and a free port, without blocking. `options`: serve's keywords, e.g.
    `max_upload_mb`, `root_path`, `idle_timeout_s`. Returns the running Blocks; its URL is
    `.local_url`; call `.close()` when done (the `serve_studio` fixture does)."""
    from app.server import serve

    return serve(store, host="127.0.0.1", port=free_port(), users=users, block=False, **options)


# ---- labeling given pairs ------------------------------------------------------------------------------------------

class _FixedCoin(random.Random):
    """`next_pair`'s left/right coin, fixed: a new reservation shows the first generation left, or always right."""

    def __init__(self, first_on_left: bool):
        super().__init__(0)
        self.value = 0.0 if first_on_left else 0.75

    def random(self) -> float:
        return self.value


def label_pairs(store: Store, annotator: str, outcomes: Mapping[int, Outcome], first_on_left: bool = True,
                decision_ms: int | None = None) -> dict[int, int]:
    """Label pairs as `annotator` through the Label tab's path (`next_pair`, then `submit_label`); returns
    {pair id: label id}.

    `outcomes` maps pair id -> outcome (relative to the pair's first/second); each pair is shown with its first
    generation on the left (`first_on_left`) or on the right, and the on-screen choice meaning that outcome is sent.
    The queue hands pairs in its own order (newest round, highest score, lowest id): a pair it hands that is not in
    `outcomes`, or an empty queue, fails the test. Two annotators on one pair need overlap 2
    (`update_queue_settings`), as in the product.
    """
    coin = _FixedCoin(first_on_left)
    label_ids: dict[int, int] = {}
    while len(label_ids) < len(outcomes):
        wanted = sorted(set(outcomes) - set(label_ids))
        shown = next_pair(store, annotator, rng=coin)
        assert shown is not None, f"the queue has nothing for {annotator}; pairs {wanted} stay unlabeled"
        assert shown.pair_id in wanted, (f"the queue handed {annotator} pair {shown.pair_id}, not one of {wanted}: "
                                         "label pairs in the queue's order")
        pair = get_pair(store, shown.pair_id)
        left_id = pair.first_id if first_on_left else pair.second_id
        assert shown.left == get_generations(store, [left_id])[left_id].text, (
            f"{annotator} held pair {shown.pair_id} with the other side on the left")
        choice = next(c for c in Choice if c.outcome(pair.first_id, left_id) is Outcome(outcomes[shown.pair_id]))
        label_ids[shown.pair_id] = submit_label(store, annotator, shown.pair_id, choice.value, str(uuid.uuid4()),
                                                decision_ms)
    return label_ids


# ---- annotators under load ------------------------------------------------------------------------------------------

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
    labeled_twice = store.db().execute("SELECT count(*) FROM (SELECT pair_id FROM labels WHERE undone IS NULL AND"
                                       " outcome != 'skip' GROUP BY pair_id HAVING count(*) > 1)").fetchone()[0]
    return {"lost": len(set(ledger.acknowledged) - set(stored)),
            "changed": sum(1 for v, row in ledger.acknowledged.items() if v in stored and stored[v] != row),
            "double_assigned": len(handed) - len(set(handed)),
            "labeled_twice": labeled_twice}


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


def workerless_studio(store: Store, monkeypatch, users) -> Studio:
    """A studio on `store`, with 16 training prompts and the demo policy, whose Train tab writes job rows (start,
    resume) but starts no worker."""
    from app import train_tab
    from storage.policies import add_policy
    from storage.prompts import add_prompts

    add_prompts(store, [f"Review {i}: the film" for i in range(16)])
    add_policy(store, str(Path(__file__).resolve().parent.parent / "assets" / "demo_policy"), round=0, note="SFT")
    monkeypatch.setattr(train_tab, "start_job",
                        lambda store, kind, config, accelerate_config: job_rows.create_job(store, kind, config))
    monkeypatch.setattr(train_tab, "resume_job", lambda store, job_id: job_rows.requeue_job(store, job_id))
    return Studio(store, users)


# ---- a finished loop's traces in a store ----------------------------------------------------------------------------

SYNTHETIC_HELDOUT = ["Describe the sea.", "Name a fruit.", "Say something <b>kind</b> & true."]


def fill_synthetic_run(store, rounds=3, reward_steps=12, policy_iterations=20, in_progress=False,
                       algorithm="ppo") -> dict:
    """A loop job's traces: per round, reward metrics (steps continue), a reward model, PPO metrics (iterations
    continue; GRPO's with `algorithm="grpo"`), a new policy with held-out samples (reward and oracle scores) and a
    round row with its summary. `in_progress` adds a running round's first reward steps and leaves the job running."""
    job_id = job_rows.create_job(store, "loop", {"rounds": rounds, "algorithm": algorithm})
    job_rows.claim_job(store, job_id, os.getpid())
    add_prompts(store, ["Tell a story.", "Write a poem."])
    add_prompts(store, SYNTHETIC_HELDOUT, heldout=True)
    heldout = list_prompts(store, heldout=True)
    policies = [add_policy(store, "/synthetic/sft", round=0, note="SFT policy")]
    add_eval_samples(store, policies[0], heldout, 0)
    reward_step = ppo_step = 0
    for g in range(1, rounds + 1):
        _add_synthetic_labels(store, policies[-1], g)
        for i in range(1, reward_steps + 1):
            reward_step += 1
            values = {"reward/loss": 0.7 * math.exp(-i / 6), "reward/accuracy": 0.5 + 0.4 * i / reward_steps}
            if i % 4 == 0:
                values.update({"reward/val_loss": 0.7 - 0.02 * i, "reward/val_accuracy": 0.55 + 0.05 * g + 0.01 * i})
            log_metrics(store, job_id, reward_step, values)
        rm = add_reward_model(store, f"/synthetic/rm-{g}", labels_used=50 * g, metrics={"val_accuracy": 0.7},
                              norm_mean=0.0, norm_std=1.0, policy_id=policies[-1], round=g, job_id=job_id)
        for i in range(policy_iterations):
            ppo_step += 1
            t = ppo_step / (rounds * policy_iterations)
            own = ({"policy_loss": -0.01, "value_loss": 0.3 * (1 - t), "explained_variance": t} if algorithm == "ppo"
                   else {"loss": -0.01, "kl_token": 0.01 * t, "zero_variance_groups": 0.25})
            log_metrics(store, job_id, ppo_step, {f"{algorithm}/{name}": value for name, value in {
                "score": 0.2 + t + 0.05 * math.sin(i), "kl": 0.3 * t, "kl_coef": 0.05, "entropy": 2.0 - 0.4 * t,
                "clipfrac": 0.1, "approx_kl": 0.01, "response_length": 20 + 5 * t, "eos_rate": 0.8 + 0.1 * t,
                "episodes_per_s": 30.0, **own}.items()})
        policies.append(add_policy(store, f"/synthetic/policy-{g}", parent_id=policies[-1], round=g))
        add_eval_samples(store, policies[-1], heldout, g)
        summary = {"labels": 50 * g, "reward_val_accuracy": 0.6 + 0.05 * g, "score": 0.3 * g, "kl": 0.1 * g,
                   "oracle_score": 0.4 + 0.1 * g, "check_agreement": 0.95 - 0.05 * g}
        add_round(store, job_id, g, {}, summary, policies[-1], rm)
        log_metrics(store, job_id, g, {f"round/{k}": v for k, v in summary.items()})
        log_metrics(store, job_id, g, {"annotator/alice/rm_agreement": 0.75,
                                       "annotator/bob/rm_agreement": 0.5 + 0.1 * g})
    if in_progress:
        for i in range(1, 5):
            log_metrics(store, job_id, reward_step + i, {"reward/loss": 0.6, "reward/accuracy": 0.5})
    else:
        job_rows.finish_job(store, job_id, JobStatus.COMPLETED)
    return {"job_id": job_id, "policy_ids": policies, "reward_steps": reward_steps,
            "policy_iterations": policy_iterations}


def _add_synthetic_labels(store, policy_id, g) -> None:
    """Four pairs of the policy's samples labeled by alice and bob, who disagree on the last one."""
    prompt = list_prompts(store, heldout=False)[0]
    texts = [f"round {g} sample {k}" for k in range(8)]
    ids = add_generations(store, [NewGeneration(prompt.id, t, policy_id=policy_id, source="policy") for t in texts])
    pairs = add_pairs(store, [NewPair(prompt.id, ids[k], ids[k + 4], "random", round=g) for k in range(4)])
    update_queue_settings(store, overlap=2)
    for k, pair in enumerate(pairs):
        label_pairs(store, "alice", {pair: Outcome.FIRST}, first_on_left=True, decision_ms=2000)
        label_pairs(store, "bob", {pair: Outcome.SECOND if k == 3 else Outcome.FIRST}, first_on_left=False,
                    decision_ms=4000)


def add_eval_samples(store, policy_id, prompts, g) -> None:
    """Two held-out samples of each prompt by the policy of round `g`, with oracle (and, after round 0, reward)
    scores."""
    texts = [(p, f"{p.text} answer {k} of version {g} <i>as written</i>") for p in prompts for k in range(2)]
    scores = {"oracle": 0.4 + 0.1 * g} if g == 0 else {"oracle": 0.4 + 0.1 * g, "reward": 0.2 * g}
    add_generations(store, [NewGeneration(p.id, text, policy_id=policy_id, source=EVAL_SOURCE) for p, text in texts],
                    scores=[scores] * len(texts))
