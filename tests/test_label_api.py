"""The public labeling API through gradio_client: 8 concurrent annotators, replays, bad input, and --auth rules."""

import random
import threading
import urllib.error
import urllib.request
import uuid

import pytest
from gradio_client import Client

from bench.studio_driver import hashed_auth_file
from labeling.queue.annotation import queue_settings
from storage.labels import list_labels

N_ANNOTATORS = 8
N_PAIRS = 32


@pytest.fixture
def serve(store, serve_studio):
    """`serve(users=None)`: the studio on `store` (as `python app.py serve` runs it); returns its URL."""
    return lambda users=None: serve_studio(store, users).local_url


def stored(store):
    return sorted((label.id, label.pair_id, label.annotator, label.vote_id)
                  for label in list_labels(store, include_undone=True))


def test_eight_concurrent_annotators_share_nothing_and_lose_nothing(store, queue_pairs, serve):
    pair_ids = queue_pairs([(f"prompt {i}", f"good {i}", f"bad {i}") for i in range(N_PAIRS)])
    url = serve()
    handed, acknowledged, errors = [], {}, []
    lock = threading.Lock()

    def annotate(name: str):
        try:
            client, rng = Client(url, verbose=False), random.Random(name)
            shown = client.predict(name, api_name="/next_pair")
            while shown["pair_id"] is not None:
                with lock:
                    handed.append((shown["pair_id"], name))
                vote_id = uuid.uuid4().hex
                choice = rng.choice(["left", "right", "tie", "both_bad"])
                answer = client.predict(name, shown["pair_id"], choice, vote_id, api_name="/submit_label")
                if rng.random() < 0.25:  # a retried request: same vote id, stored once, same label id
                    replay = client.predict(name, shown["pair_id"], choice, vote_id, api_name="/submit_label")
                    assert replay["label_id"] == answer["label_id"]
                with lock:
                    acknowledged[vote_id] = (answer["label_id"], shown["pair_id"], name)
                shown = answer["next"]
        except Exception as exc:  # surfaced by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=annotate, args=(f"annotator-{i}",)) for i in range(N_ANNOTATORS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=240)
    assert errors == [] and not any(thread.is_alive() for thread in threads)
    assert sorted(pair for pair, _ in handed) == sorted(pair_ids)  # each pair handed to exactly one annotator
    assert len({name for _, name in handed}) > 1
    expected = sorted((label_id, pair, name, vote) for vote, (label_id, pair, name) in acknowledged.items())
    assert stored(store) == expected


def test_bad_requests_get_one_line_errors_and_change_nothing(store, queue_pairs, serve):
    mine, theirs = queue_pairs([("p1", "a", "b"), ("p2", "a", "b")])
    client = Client(serve(), verbose=False)
    assert client.predict("alice", api_name="/next_pair")["pair_id"] == mine
    assert client.predict("bob", api_name="/next_pair")["pair_id"] == theirs
    first = client.predict("alice", mine, "left", "vote-1", api_name="/submit_label")
    before = stored(store)
    bad_calls = [
        (("alice", 12345, "left", "v2"), "does not exist"),
        (("alice", theirs, "left", "v3"), "not reserved for alice"),
        (("bob", theirs, "sideways", "v4"), "choice must be one of"),
        (("bob", theirs, "<script>alert(1)</script>", "v5"), "choice must be one of"),
        (("bob", theirs, "left", "vote-1"), "already used"),
        (("bob\x00", theirs, "left", "v6"), "control or invisible"),
        (("b" * 10_000, theirs, "left", "v7"), "at most 64"),
        (("bob", "1; DROP TABLE labels", "left", "v8"), "pair id"),
        (("bob", theirs, "left", ""), "vote id"),
    ]
    for args, message in bad_calls:
        with pytest.raises(Exception, match=message) as error:
            client.predict(*args, api_name="/submit_label")
        assert len(str(error.value)) < 200
    with pytest.raises(Exception, match="control or invisible"):
        client.predict("car\nol", api_name="/next_pair")
    assert client.predict("alice", mine, "left", "vote-1", api_name="/submit_label")["label_id"] == first["label_id"]
    assert stored(store) == before


def test_undo_through_the_api_shows_the_pair_again(store, queue_pairs, serve):
    (pair_id,) = queue_pairs([("p", "a", "b")])
    client = Client(serve(), verbose=False)
    shown = client.predict("alice", api_name="/next_pair")
    client.predict("alice", pair_id, "tie", "v1", api_name="/submit_label")
    again = client.predict("alice", api_name="/undo_label")
    assert (again["pair_id"], again["left"], again["right"]) == (pair_id, shown["left"], shown["right"])
    assert again["labeled_today"] == 0 and list_labels(store) == []
    with pytest.raises(Exception, match="no label to undo"):
        client.predict("bob", api_name="/undo_label")


def test_next_pair_gives_a_conversations_turns_as_messages(store, queue_pairs, serve):
    turns = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
             {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "<script>x</script>?"}]
    chat, text = queue_pairs([(turns, "a", "b"), ("a plain prompt", "c", "d")], scores=[2.0, 1.0])
    client = Client(serve(), verbose=False)
    shown = client.predict("alice", api_name="/next_pair")
    assert (shown["pair_id"], shown["messages"]) == (chat, turns)
    assert shown["prompt"] == "System: Be brief.\n\nHuman: Hi\n\nAssistant: Hello.\n\nHuman: <script>x</script>?"
    plain = client.predict("alice", chat, "left", "v1", api_name="/submit_label")["next"]
    assert (plain["pair_id"], plain["prompt"], plain["messages"]) == (text, "a plain prompt", None)
    assert client.predict("alice", api_name="/undo_label")["messages"] == turns


@pytest.fixture
def users(tmp_path):
    return hashed_auth_file(tmp_path / "users.txt", {"alice": "alice-pw", "bob": "bob-pw", "owner": "owner-pw"},
                            admins={"owner"})


def test_with_auth_nothing_answers_without_login(store, queue_pairs, serve, users):
    queue_pairs([("p", "a", "b")])
    url = serve(users)
    with pytest.raises(Exception, match="credentials"):
        Client(url, verbose=False)
    for path in ("gradio_api/call/next_pair", "gradio_api/call/submit_label", "gradio_api/queue/join"):
        request = urllib.request.Request(url + path, data=b'{"data": ["alice"]}',
                                         headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as error:
            urllib.request.urlopen(request, timeout=30)
        assert error.value.code == 401
    with pytest.raises(ValueError, match="Could not login"):  # gradio_client's AuthenticationError, or its bare one
        Client(url, auth=("alice", "wrong"), verbose=False)
    assert store.db().execute("SELECT count(*) FROM reservations").fetchone()[0] == 0


def test_with_auth_annotators_label_only_as_themselves(store, queue_pairs, serve, users, tmp_path):
    alice_pair, _ = queue_pairs([("p1", "a", "b"), ("p2", "a", "b")])
    url = serve(users)
    alice = Client(url, auth=("alice", "alice-pw"), verbose=False)
    bob = Client(url, auth=("bob", "bob-pw"), verbose=False)
    assert alice.predict("", api_name="/next_pair")["pair_id"] == alice_pair  # the name comes from the login
    with pytest.raises(Exception, match="signed in as bob"):
        bob.predict("alice", alice_pair, "left", "v1", api_name="/submit_label")
    with pytest.raises(Exception, match="not reserved for bob"):
        bob.predict("bob", alice_pair, "left", "v2", api_name="/submit_label")
    with pytest.raises(Exception, match="signed in as bob"):
        bob.predict("alice", api_name="/undo_label")
    alice.predict("alice", alice_pair, "right", "v3", api_name="/submit_label")
    assert [(label.annotator, label.pair_id) for label in list_labels(store)] == [("alice", alice_pair)]


def test_with_auth_only_admins_import_and_export(store, queue_pairs, serve, users, tmp_path):
    from gradio_client import handle_file

    (pair_id,) = queue_pairs([("p", "a", "b")])
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("a new prompt\n")
    url = serve(users)
    alice = Client(url, auth=("alice", "alice-pw"), verbose=False)
    owner = Client(url, auth=("owner", "owner-pw"), verbose=False)
    alice.predict("", api_name="/next_pair")
    alice.predict("", pair_id, "left", "v1", api_name="/submit_label")
    with pytest.raises(Exception, match="only an admin"):
        alice.predict("trl", ".jsonl", api_name="/export_labels")
    with pytest.raises(Exception, match="only an admin"):
        alice.predict(handle_file(str(prompts)), False, api_name="/import_prompts")
    assert "Imported 1 prompts" in owner.predict(handle_file(str(prompts)), False, api_name="/import_prompts")
    preferences = tmp_path / "prefs.jsonl"
    preferences.write_text('{"prompt": "q", "chosen": "good", "rejected": "bad"}\n')
    with pytest.raises(Exception, match="only an admin"):
        alice.predict(handle_file(str(preferences)), "hh", api_name="/import_preferences")
    assert "Imported 1 labeled pairs" in owner.predict(handle_file(str(preferences)), "hh",
                                                       api_name="/import_preferences")
    download, message = owner.predict("trl", ".jsonl", api_name="/export_labels")
    assert message.startswith("2 rows") and len(open(download["value"]).read().splitlines()) == 2
    table, _ = alice.predict(api_name="/annotator_stats")
    assert table["data"][0][:3] == ["alice", 1, 0]


def test_with_auth_only_admins_edit_the_guidelines_and_queue_settings(store, serve, users):
    url = serve(users)
    alice = Client(url, auth=("alice", "alice-pw"), verbose=False)
    owner = Client(url, auth=("owner", "owner-pw"), verbose=False)
    with pytest.raises(Exception, match="only an admin"):
        alice.predict("Vote for the longest answer.", 1, 600, api_name="/save_queue_settings")
    with pytest.raises(Exception, match="overlap"):
        owner.predict("Prefer the kinder review.", 500, 600, api_name="/save_queue_settings")
    saved = owner.predict("Prefer the kinder review.", 2, 120, api_name="/save_queue_settings")
    assert saved == "Prefer the kinder review."
    settings = queue_settings(store)
    assert (settings.guidelines, settings.overlap, settings.reservation_ttl_s) == (
        "Prefer the kinder review.", 2, 120.0)
