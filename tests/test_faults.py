"""Faults while people label: the studio killed with SIGKILL under 8 annotators, a store locked by another process,
a full disk, a read-only store, and a registered policy whose model directory was deleted or damaged.

Each fault must end in a clear one-line error (or none at all), no acknowledged label lost or stored twice, and a
store that passes `PRAGMA integrity_check`.

How the faults are made: SIGKILL is real (the studio runs as `python app.py serve`). The lock is a second process
holding a write transaction. A full disk is SQLite's own page cap (`PRAGMA max_page_count` on the studio's
connections), which fails writes with the same SQLITE_FULL error a full disk gives. A read-only store is a store file
the studio's process really cannot write: file mode 0444, and when the tests run as root (who ignores file modes)
the studio runs without the capabilities that let root write anyway (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH).
"""

import ctypes
import hashlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from gradio_client import Client

import storage.db
from bench.studio_driver import free_port
from storage import JobStatus, Store
from storage import jobs as job_rows
from storage.labels import list_labels
from storage.policies import add_policy
from tests.helpers import wait_for
from trainers.entry import worker
from trainers.loop.config import LoopConfig

ROOT = Path(__file__).resolve().parent.parent
DEMO_POLICY = ROOT / "assets" / "demo_policy"
N_ANNOTATORS = 8
KILL_AFTER_ACKS = 40
PR_CAPBSET_DROP, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 24, 1, 2


def start_studio(db: Path, preexec_fn=None) -> tuple[subprocess.Popen, str]:
    """`python app.py serve` on a free port; returns the process and its URL once it answers."""
    port = free_port()
    log = tempfile.TemporaryFile()  # not a pipe: a studio writing more than a pipe holds would block
    process = subprocess.Popen([sys.executable, "app.py", "serve", "--db", str(db), "--no-demo", "--port", str(port)],
                               cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, preexec_fn=preexec_fn)
    process.log = log
    url = f"http://127.0.0.1:{port}/"

    def answers() -> bool:
        if process.poll() is not None:
            log.seek(0)
            raise AssertionError(f"the studio exited: {log.read().decode()[-2000:]}")
        try:
            urllib.request.urlopen(url + "config", timeout=2)
            return True
        except OSError:
            return False

    wait_for(answers)
    return process, url


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.kill()
    process.wait(timeout=30)
    process.log.close()


@pytest.fixture
def serve_in_process(serve_studio):
    """`serve_in_process(store)`: the studio in this process (so a test can change how it reaches SQLite); returns
    its URL."""
    return lambda store: serve_studio(store).local_url


def integrity(store: Store) -> str:
    return store.db().execute("PRAGMA integrity_check").fetchone()[0]


def labels_by_vote(store: Store) -> dict[str, list]:
    found: dict[str, list] = {}
    for label in list_labels(store, include_undone=True):
        found.setdefault(label.vote_id, []).append(label)
    return found


# ---- SIGKILL under load ---------------------------------------------------------------------------------------------

def test_studio_killed_under_eight_annotators_loses_no_acknowledged_label(store, queue_pairs, serve_in_process):
    queue_pairs([(f"prompt {i}", f"good {i}", f"bad {i}") for i in range(400)])
    studio, url = start_studio(store.path)
    acknowledged: dict[str, tuple[int, int, str]] = {}  # vote id -> (label id, pair id, annotator)
    in_flight: dict[str, tuple[int, str, str]] = {}  # annotator -> (pair id, choice, vote id) sent, not answered
    lock = threading.Lock()

    def annotate(name: str) -> None:
        try:
            client, rng = Client(url, verbose=False), random.Random(name)
            shown = client.predict(name, api_name="/next_pair")
            while shown["pair_id"] is not None:
                vote = (shown["pair_id"], rng.choice(["left", "right", "tie", "both_bad"]), uuid.uuid4().hex)
                with lock:
                    in_flight[name] = vote
                answer = client.predict(name, *vote, api_name="/submit_label")
                with lock:
                    acknowledged[vote[2]] = (answer["label_id"], vote[0], name)
                    del in_flight[name]
                shown = answer["next"]
        except Exception:  # the studio was killed under this client
            return

    threads = [threading.Thread(target=annotate, args=(f"annotator-{i}",)) for i in range(N_ANNOTATORS)]
    try:
        for thread in threads:
            thread.start()
        wait_for(lambda: len(acknowledged) >= KILL_AFTER_ACKS or studio.poll() is not None, every=0.01)
        studio.send_signal(signal.SIGKILL)
        studio.wait(timeout=30)
        for thread in threads:
            thread.join(timeout=60)
        assert not any(thread.is_alive() for thread in threads)
    finally:
        stop(studio)

    assert integrity(store) == "ok"
    stored = labels_by_vote(store)
    for vote_id, (label_id, pair_id, name) in acknowledged.items():  # every acknowledged label, exactly once
        assert [(label.id, label.pair_id, label.annotator) for label in stored[vote_id]] == [(label_id, pair_id, name)]
    assert all(len(labels) == 1 for labels in stored.values())
    unacknowledged = set(stored) - set(acknowledged)
    assert unacknowledged <= {vote_id for _, _, vote_id in in_flight.values()}  # only votes cut off mid-answer
    per_pair = store.db().execute("SELECT pair_id, count(*) FROM labels WHERE undone IS NULL GROUP BY pair_id"
                                  " HAVING count(*) > 1").fetchall()
    assert per_pair == []  # overlap 1: no pair labeled twice

    client = Client(serve_in_process(Store(store.path)), verbose=False)  # restarted: clients retry unanswered votes
    for name, (pair_id, choice, vote_id) in in_flight.items():
        answer = client.predict(name, pair_id, choice, vote_id, api_name="/submit_label")
        assert [label.id for label in labels_by_vote(store)[vote_id]] == [answer["label_id"]]
    shown = {name: client.predict(name, api_name="/next_pair")["pair_id"]
             for name in (f"annotator-{i}" for i in range(N_ANNOTATORS))}
    assert None not in shown.values() and len(set(shown.values())) == N_ANNOTATORS
    assert integrity(store) == "ok"
    assert all(len(labels) == 1 for labels in labels_by_vote(store).values())


# ---- a store locked by another process ------------------------------------------------------------------------------

LOCKER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
"""


def hold_write_lock(path: Path, seconds: float) -> subprocess.Popen:
    """Another process holding a write transaction on the store for `seconds` (returns once it holds it)."""
    process = subprocess.Popen([sys.executable, "-c", LOCKER, str(path), str(seconds)], stdout=subprocess.PIPE,
                               text=True)
    assert process.stdout.readline().strip() == "locked"
    return process


def test_a_locked_store_makes_requests_wait_then_fail_clearly(store, queue_pairs, serve_in_process):
    (pair_id,) = queue_pairs([("p", "a", "b")])
    busy_timeout_s = 2.0
    client = Client(serve_in_process(Store(store.path, busy_timeout_ms=int(busy_timeout_s * 1000))), verbose=False)
    shown = client.predict("alice", api_name="/next_pair")
    assert shown["pair_id"] == pair_id

    locker = hold_write_lock(store.path, 60)
    try:
        began = time.monotonic()
        with pytest.raises(Exception, match="locked by another process; wait for it to finish and retry"):
            client.predict("alice", pair_id, "left", "vote-1", api_name="/submit_label")
        assert time.monotonic() - began >= busy_timeout_s * 0.9  # it waited for the lock before giving up
    finally:
        locker.kill()
        locker.wait()
    assert list_labels(store) == []  # not acknowledged, not stored

    locker = hold_write_lock(store.path, busy_timeout_s / 4)  # released while the request waits: it goes through
    answer = client.predict("alice", pair_id, "left", "vote-1", api_name="/submit_label")
    locker.wait()
    assert [(label.id, label.vote_id) for label in list_labels(store)] == [(answer["label_id"], "vote-1")]
    assert integrity(store) == "ok"


# ---- a full disk ----------------------------------------------------------------------------------------------------

def test_a_full_disk_refuses_the_vote_clearly_and_keeps_every_stored_label(store, queue_pairs, serve_in_process,
                                                                          monkeypatch):
    queue_pairs([(f"prompt {i}", f"first answer {i}", f"second answer {i}") for i in range(300)])
    pages = store.db().execute("PRAGMA page_count").fetchone()[0]
    connect = storage.db._connect

    def capped(path, busy_timeout_ms):  # the studio's connections may not grow the file past today's size
        db = connect(path, busy_timeout_ms)
        db.conn.execute(f"PRAGMA max_page_count = {pages}")
        return db

    monkeypatch.setattr(storage.db, "_connect", capped)
    client = Client(serve_in_process(Store(store.path)), verbose=False)
    acknowledged, refused = {}, None
    shown = client.predict("alice", api_name="/next_pair")
    for _ in range(300):
        vote = (shown["pair_id"], "left", uuid.uuid4().hex)
        try:
            answer = client.predict("alice", *vote, api_name="/submit_label")
        except Exception as exc:
            refused = (vote, str(exc))
            break
        acknowledged[vote[2]] = answer["label_id"]
        shown = answer["next"]
    assert refused is not None, "the capped store never filled up"
    vote, message = refused
    assert "is full; free some space and retry" in message and len(message) < 300
    assert {label.vote_id: label.id for label in list_labels(store)} == acknowledged  # the refused vote is not there
    assert integrity(store) == "ok"

    monkeypatch.setattr(storage.db, "_connect", connect)  # space freed: the same vote, retried, is stored once
    client = Client(serve_in_process(Store(store.path)), verbose=False)
    answer = client.predict("alice", *vote, api_name="/submit_label")
    assert {label.vote_id: label.id for label in list_labels(store)} == {**acknowledged, vote[2]: answer["label_id"]}


# ---- a read-only store ----------------------------------------------------------------------------------------------

def without_root_write_override() -> None:
    """In the child before exec: drop the capabilities that let root write files whatever their mode."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
        if libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


def test_a_read_only_store_refuses_votes_clearly_and_still_serves_reads(store, queue_pairs):
    first, second = queue_pairs([("p1", "a", "b"), ("p2", "c", "d")])
    from labeling.queue.annotation import next_pair, submit_label

    next_pair(store, "alice")
    kept = submit_label(store, "alice", first, "left", "vote-kept")
    assert next_pair(store, "bob").pair_id == second  # bob is looking at a pair when the store turns read-only
    store.close()
    store.path.chmod(0o444)
    before = hashlib.sha256(store.path.read_bytes()).hexdigest()
    studio, url = start_studio(store.path, preexec_fn=without_root_write_override if os.geteuid() == 0 else None)
    try:
        client = Client(url, verbose=False)
        for call, args in (("/submit_label", ("bob", second, "right", "vote-lost")), ("/next_pair", ("carol",))):
            with pytest.raises(Exception, match="is read-only; fix its permissions") as error:
                client.predict(*args, api_name=call)
            assert len(str(error.value)) < 300
        table, _ = client.predict(api_name="/annotator_stats")  # reading still works
        assert table["data"][0][:2] == ["alice", 1]
    finally:
        stop(studio)
        store.path.chmod(0o644)
    assert hashlib.sha256(store.path.read_bytes()).hexdigest() == before
    assert [(label.id, label.vote_id) for label in list_labels(store)] == [(kept, "vote-kept")]
    assert integrity(store) == "ok"


# ---- a policy's model directory deleted or damaged ------------------------------------------------------------------

TINY_LOOP = {"rounds": 1, "prompts_per_round": 2, "labels_per_round": 1, "queue_reserve": 0, "policy_iterations": 1,
             "policy_batch_size": 2}


def register_copy_of_demo_policy(store: Store, tmp_path: Path) -> Path:
    path = tmp_path / "policy-v0"
    shutil.copytree(DEMO_POLICY, path)
    add_policy(store, str(path), round=0, note="SFT")
    return path


def run_loop_job(store: Store) -> int:
    """Run a tiny loop job in this process, as a worker would; returns its id."""
    job_id = job_rows.create_job(store, "loop", LoopConfig.from_dict(TINY_LOOP).to_dict())
    job = job_rows.claim_job(store, job_id, pid=1)
    worker.run_job(store, job)
    return job.id


@pytest.mark.parametrize("damage,message", [
    (shutil.rmtree, "model directory {path} does not exist"),
    (lambda p: (p / "model.safetensors").write_bytes(b""), "cannot load a causal language model from {path}"),
    (lambda p: os.truncate(p / "model.safetensors", 1000), "cannot load a causal language model from {path}"),
    (lambda p: (p / "config.json").write_text("{not json"), "cannot load the tokenizer in {path}"),
    (lambda p: (p / "tokenizer.json").unlink(), "cannot load the tokenizer in {path}"),
], ids=["deleted", "empty-weights", "truncated-weights", "broken-config", "no-tokenizer"])
def test_a_damaged_policy_directory_fails_the_job_naming_it(store, queue_pairs, tmp_path, damage, message):
    queue_pairs([("p1", "a", "b"), ("p2", "c", "d")])
    path = register_copy_of_demo_policy(store, tmp_path)
    damage(path)
    job = job_rows.get_job(store, run_loop_job(store))
    assert job.status is JobStatus.FAILED
    last_line = job.error.splitlines()[-1]
    assert message.format(path=path) in last_line and "ModelError" in last_line, last_line


def test_with_a_policy_directory_gone_the_studio_still_works(store, queue_pairs, serve_in_process, tmp_path):
    (pair_id, _) = queue_pairs([("p1", "a", "b"), ("p2", "c", "d")])
    shutil.rmtree(register_copy_of_demo_policy(store, tmp_path))
    job_id = run_loop_job(store)
    client = Client(serve_in_process(store), verbose=False)
    status = client.predict(job_id, api_name="/job_status")
    assert status["status"] == "failed" and "does not exist" in status["error"]
    assert client.predict("alice", api_name="/next_pair")["pair_id"] == pair_id
    assert client.predict("alice", pair_id, "tie", "v1", api_name="/submit_label")["label_id"]
    assert client.predict(api_name="/annotator_stats")[0]["data"][0][:2] == ["alice", 1]
    assert not job_rows.get_job(store, job_id).status.active  # nothing left running that would block a new job
