"""The login gate of a served studio (`app.door.sessions`), over HTTP with the clock driven by hand: wrong passwords are
throttled per name and per address while other users log in and label undisturbed, unknown names answer like wrong
passwords, hashing runs off the event loop, idle sessions end, and a changed auth file ends the sessions it should."""

import os
import threading
import uuid

import httpx
import pytest
from gradio_client import Client

from app import passwords
from app.auth import AuthFile, add_user, read_auth_file, write_auth_file
from app.door import sessions
from app.passwords import hash_password
from bench.studio_driver import TEST_SCRYPT_COST, hashed_auth_file
from storage.errors import InvalidInput
from storage.labels import list_labels
from tests.helpers import FakeTime

PASSWORDS = {"alice": "alice-pw", "bob": "bob-pw", "owner": "owner-pw"}
ATTACKER = {"X-Forwarded-For": "10.0.0.66"}  # uvicorn takes the client address from a proxy on 127.0.0.1


@pytest.fixture
def clock(monkeypatch) -> FakeTime:
    fake = FakeTime()
    monkeypatch.setattr(sessions, "time", fake)
    return fake


@pytest.fixture
def users(tmp_path):
    return hashed_auth_file(tmp_path / "users.txt", PASSWORDS, admins={"owner"})


@pytest.fixture
def url(store, queue_pairs, serve_studio, users, clock):
    queue_pairs([(f"prompt {i}", f"a{i}", f"b{i}") for i in range(6)])
    return serve_studio(store, users, idle_timeout_s=600).local_url.rstrip("/")


def login(url: str, name: str, password: str, headers: dict | None = None) -> httpx.Response:
    return httpx.post(f"{url}/login", data={"username": name, "password": password}, headers=headers, timeout=30)


def label_one(client: Client) -> int:
    """Label the next pair as the client's user; returns the label id."""
    shown = client.predict("", api_name="/next_pair")
    return client.predict("", shown["pair_id"], "left", uuid.uuid4().hex, api_name="/submit_label")["label_id"]


def test_thirty_wrong_passwords_are_throttled_while_others_log_in_and_label(url, store, clock):
    alice = Client(url, auth=("alice", "alice-pw"), verbose=False)
    answers, labels = [], []
    for attempt in range(30):  # one wrong password for owner each second, from the attacker's address
        response = login(url, "owner", f"guess-{attempt}", ATTACKER)
        answers.append((response.status_code, response.headers.get("retry-after")))
        if response.status_code == 429:
            wait = response.headers["retry-after"]
            assert response.json()["detail"] == f"too many failed logins; try again in {wait} s"
        else:
            assert response.json() == {"detail": "Incorrect credentials."}
        if attempt in (8, 20):  # meanwhile, annotators log in and label
            labels.append(label_one(alice))
            labels.append(label_one(Client(url, auth=("bob", "bob-pw"), verbose=False)))
        clock.advance(1.0)
    # by hand: failures at t=0..4 are free, the 5th locks 1 s; then each failure doubles it (2, 4, 8, 16 s)
    checked, refused = (400, None), lambda s: (429, str(s))
    assert answers == ([checked] * 6 + [refused(1)] + [checked] + [refused(s) for s in (3, 2, 1)] + [checked]
                       + [refused(s) for s in range(7, 0, -1)] + [checked] + [refused(s) for s in range(15, 5, -1)])
    assert login(url, "owner", "owner-pw", ATTACKER).json()["detail"].endswith("try again in 5 s")  # even right
    clock.advance(5.0)
    assert login(url, "owner", "owner-pw", ATTACKER).status_code == 200  # after the back-off
    assert login(url, "owner", "wrong", ATTACKER).status_code == 400  # the success cleared the name's count
    assert sorted(label.annotator for label in list_labels(store)) == ["alice", "alice", "bob", "bob"]
    assert len(set(labels)) == 4


def test_failures_from_one_address_lock_that_address_only(url, clock):
    for i in range(20):
        assert login(url, f"name-{i}", "guess", ATTACKER).status_code == 400
    assert login(url, "alice", "alice-pw", ATTACKER).status_code == 429  # the address is locked, for every name
    assert login(url, "alice", "alice-pw").status_code == 200  # the name is fine from elsewhere
    clock.advance(1.0)
    assert login(url, "alice", "alice-pw", ATTACKER).status_code == 200


def test_an_oversized_login_form_is_refused_unread_and_long_names_share_a_count(url):
    assert login(url, "alice", "x" * 20_000).status_code == 413
    for i in range(5):  # names longer than any user's (64 characters) cannot exist: they count as one
        assert login(url, "n" * 70 + str(i), "guess", {"X-Forwarded-For": f"10.0.1.{i}"}).status_code == 400
    assert login(url, "n" * 80, "guess", {"X-Forwarded-For": "10.0.1.9"}).status_code == 429
    assert login(url, "alice", "alice-pw").status_code == 200


def test_an_unknown_name_answers_and_costs_like_a_wrong_password(url, monkeypatch):
    hashes = []
    real = passwords._derive

    def derive(*args):
        hashes.append((threading.current_thread().name, os.getpriority(os.PRIO_PROCESS, threading.get_native_id())))
        return real(*args)

    monkeypatch.setattr(passwords, "_derive", derive)
    seen = {}
    for name, address in (("alice", "10.0.0.1"), ("nobody", "10.0.0.2")):
        seen[name] = [(r.status_code, r.text) for r in (login(url, name, "wrong", {"X-Forwarded-For": address})
                                                       for _ in range(7))]
    assert seen["alice"] == seen["nobody"]  # the same answers, throttled alike
    assert [status for status, _ in seen["alice"]] == [400] * 5 + [429] * 2
    assert len(hashes) == 10  # one hash per checked attempt, known name or not; none for a refused one
    assert all(thread.startswith("login-hash") for thread, _ in hashes)  # never on the event loop's thread...
    assert all(priority >= sessions.HASH_NICENESS for _, priority in hashes)  # ...and yielding the CPU to it


def session(url: str, name: str) -> httpx.Client:
    http = httpx.Client(base_url=url, timeout=30)
    assert http.post("/login", data={"username": name, "password": PASSWORDS[name]}).status_code == 200
    return http


def test_a_session_unused_for_the_idle_timeout_ends(url, clock):
    alice, bob = session(url, "alice"), session(url, "bob")
    assert alice.get("/config").status_code == 200
    clock.advance(590)
    assert alice.get("/config").status_code == 200  # used: the idle time starts again
    clock.advance(590)
    assert alice.get("/config").status_code == 200
    assert bob.get("/config").status_code == 401  # 1180 s unused
    assert bob.get("/config").status_code == 401
    assert session(url, "bob").get("/config").status_code == 200  # logging in again works


def test_a_changed_auth_file_ends_the_sessions_of_changed_and_removed_users(url, users):
    alice, bob, owner = session(url, "alice"), session(url, "bob"), session(url, "owner")
    alice_line = f"alice:{hash_password('new-pw', TEST_SCRYPT_COST)}"  # alice: a new password; bob: removed;
    write_auth_file(users.path, [alice_line if line.startswith("alice:") else line.removesuffix(":admin")
                                 for line in users.path.read_text().splitlines() if not line.startswith("bob:")])
    # owner: the same password, no admin any more
    assert alice.get("/config").status_code == 401 and bob.get("/config").status_code == 401
    assert owner.get("/config").status_code == 200  # the same password: the session goes on...
    event = owner.post("/gradio_api/call/export_labels", json={"data": ["trl", ".jsonl"]}).json()["event_id"]
    assert "only an admin" in owner.get(f"/gradio_api/call/export_labels/{event}").text  # ...without admin rights
    assert login(url, "alice", "alice-pw").status_code == 400 and login(url, "alice", "new-pw").status_code == 200
    assert login(url, "bob", "bob-pw").status_code == 400


NFC, NFD = "zo\u00e9", "zoe\u0301"  # `zoé` written as one character, and as e plus a combining accent


def test_two_spellings_of_one_name_are_one_account_whichever_is_typed(store, queue_pairs, serve_studio, tmp_path):
    path = tmp_path / "users.txt"
    assert add_user(path, NFC, "first-pw", cost=TEST_SCRYPT_COST)
    assert not add_user(path, NFD, "second-pw", cost=TEST_SCRYPT_COST)  # the same user: her password changed
    assert [line.split(":")[0] for line in path.read_text().splitlines()] == [NFC]
    url = serve_studio(store, AuthFile(path)).local_url.rstrip("/")
    queue_pairs([("prompt", "a", "b")])
    assert login(url, NFC, "first-pw").status_code == 400
    assert login(url, NFD, "second-pw").status_code == 200 and login(url, NFC, "second-pw").status_code == 200
    zoe = Client(url, auth=(NFD, "second-pw"), verbose=False)
    shown = zoe.predict(NFD, api_name="/next_pair")  # her name typed as she types it is her own
    zoe.predict(NFC, shown["pair_id"], "left", "v1", api_name="/submit_label")
    assert [label.annotator for label in list_labels(store)] == [NFC]
    hand_written = tmp_path / "both.txt"  # a file edited by hand with both spellings is refused, naming the line
    hand_written.write_text(path.read_text() + path.read_text().replace(NFC, NFD))
    with pytest.raises(InvalidInput, match="line 2: user .* is listed twice"):
        read_auth_file(hand_written)
