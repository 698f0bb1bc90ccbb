"""The arena through its public API (gradio_client) on the demo: a prompt, its two blind answers sampled by the worker
and stored as generations of their versions, a vote stored as a win-rate judgement on a prompt of source `arena`,
the versions named only after the vote; refusals in one line; four people at once, no generation in the UI's
process."""

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from gradio_client import Client

from labeling.queue.annotation import next_pair, update_queue_settings
from labeling.versions.arena import vote_arena
from labeling.versions.winrate import winrate_report
from storage.arena import (
    ARENA_SOURCE,
    arena_answers,
    arena_place,
    arena_prompt,
    create_arena_job,
    set_arena_votes_train,
)
from storage.errors import Conflict
from storage.generations import NewGeneration, add_generations
from storage.jobs import create_job, get_job
from storage.labels import list_labels, training_labels
from storage.pairs import get_pair
from storage.policies import add_policy, list_policies
from storage.prompts import count_prompts, get_prompt
from storage.types import Selector
from storage.winrate import list_winrate_pairs, winrate_judgements

ROOT = Path(__file__).resolve().parent.parent
WAIT_S = 240


def second_version(store) -> int:
    """A v1 beside the demo's SFT policy (a copy of it: the arena only needs two versions)."""
    root = list_policies(store)[0]
    return add_policy(store, root.path, parent_id=root.id, round=1, note="arena test version")


def answers(client: Client, user: str, job_id: int) -> dict:
    deadline = time.time() + WAIT_S
    while time.time() < deadline:
        now = client.predict(user, job_id, api_name="/arena_answers")
        assert now["status"] in ("queued", "running", "completed"), now
        if now["answers"]:
            return now
        time.sleep(0.5)
    raise AssertionError(f"no answers within {WAIT_S} s: {now}")


def test_a_prompt_gets_two_blind_answers_and_the_vote_is_a_judgement_on_peoples_own_prompts(demo_store,
                                                                                          serve_studio):
    v1 = second_version(demo_store)
    root = list_policies(demo_store)[0].id
    client = Client(serve_studio(demo_store).local_url, verbose=False)
    started = client.predict("ada", "the movie was <script>alert(1)</script>", "", "", api_name="/arena_start")
    with pytest.raises(Exception, match="still being answered"):  # one generation per person at a time
        client.predict("ada", "another prompt", "", "", api_name="/arena_start")
    with pytest.raises(Exception, match="not one of yours"):
        client.predict("bob", started["job_id"], api_name="/arena_answers")
    shown = answers(client, "ada", started["job_id"])
    assert "v0" not in json.dumps(shown) and "v1" not in json.dumps(shown)  # blind until the vote

    stored = arena_answers(demo_store, started["job_id"])
    assert [g.text for g in stored] == shown["answers"]
    assert {g.policy_id for g in stored} == {v1, root} and {g.source for g in stored} == {ARENA_SOURCE}
    prompt = get_prompt(demo_store, shown["prompt_id"])
    assert prompt.source == ARENA_SOURCE and prompt.text == "the movie was <script>alert(1)</script>"
    assert next_pair(demo_store, "carol") is None or next_pair(demo_store, "carol").prompt != prompt.text

    vote = client.predict("ada", started["job_id"], "first", uuid.uuid4().hex, api_name="/arena_vote")
    names = {root: "v0", v1: "v1"}
    assert (vote["first"], vote["second"]) == (names[stored[0].policy_id], names[stored[1].policy_id])
    label = next(label for label in list_labels(demo_store) if label.id == vote["label_id"])
    pair = get_pair(demo_store, label.pair_id)
    assert label.annotator == "ada" and pair.selector == Selector.ARENA
    assert (pair.first_id, pair.second_id, pair.prompt_id) == (stored[0].id, stored[1].id, prompt.id)
    assert label.outcome.value == "first"
    with pytest.raises(Exception, match="already voted"):
        client.predict("ada", started["job_id"], "tie", uuid.uuid4().hex, api_name="/arena_vote")

    judgement = next(j for j in winrate_judgements(demo_store) if j.label_id == label.id)
    assert (judgement.policy_id, judgement.opponent_id, judgement.own_prompt) == (v1, root, True)
    report = winrate_report(demo_store, rounds=0)
    own = next(f for f in report.own_prompts if f.policy_id == v1)
    heldout = next(f for f in report.versions if f.policy_id == v1)
    assert own.judgements == 1 and own.wins == int(stored[0].policy_id == v1) and heldout.judgements == 0
    assert client.predict(api_name="/arena_standings")["own_prompts"][0]["judgements"] == 1
    assert label.id not in {lp.label_id for lp in training_labels(demo_store)}  # off by default
    set_arena_votes_train(demo_store, True)
    assert label.id in {lp.label_id for lp in training_labels(demo_store)}


def test_a_vote_stays_out_of_the_label_queue_and_the_loops_winrate_pairs_and_jobs_run_beside_training(store):
    v0 = add_policy(store, "sft")
    v1 = add_policy(store, "sft", parent_id=v0, round=1)
    job = create_arena_job(store, "ada", {"prompt_id": arena_prompt(store, "hi"), "policies": [v1, v0],
                                          "judged": v1, "opponent": v0})
    with pytest.raises(Conflict, match="still being answered"):
        create_arena_job(store, "ada", {})
    assert create_job(store, "loop", {}) > job  # a training job starts beside it
    assert arena_place(store, create_arena_job(store, "bob", {})) == 1
    prompt_id = get_job(store, job).config["prompt_id"]
    add_generations(store, [NewGeneration(prompt_id, text, policy, source=ARENA_SOURCE,
                                          params={"arena_job": job, "arena_slot": slot})
                            for slot, (text, policy) in enumerate([("one", v1), ("two", v0)])])
    update_queue_settings(store, overlap=2)
    vote = vote_arena(store, "ada", job, "second", "vote-1")
    assert vote.names == ("v1", "v0")
    assert next_pair(store, "bob") is None and list_winrate_pairs(store) == []
    figures = winrate_report(store, rounds=0)
    assert (figures.own_prompts[0].losses, figures.versions[0].judgements, figures.judgements) == (1, 0, 1)


def test_refusals_are_one_line_and_store_nothing(demo_store, serve_studio):
    client = Client(serve_studio(demo_store).local_url, verbose=False)
    with pytest.raises(Exception, match="compares two versions"):  # the demo holds only its SFT policy
        client.predict("ada", "the movie was", "", "", api_name="/arena_start")
    second_version(demo_store)
    before = count_prompts(demo_store)
    for prompt, versions, said in [("great " * 200, ("", ""), "too long for this model"),
                                   ("   ", ("", ""), "the prompt is empty"),
                                   ("the movie was", ("v1", "v7"), "unknown version"),
                                   ("the movie was", ("v1", "1"), "two different versions")]:
        with pytest.raises(Exception, match=said):
            client.predict("ada", prompt, *versions, api_name="/arena_start")
    with pytest.raises(Exception, match="not one of yours"):
        client.predict("ada", 999, "first", "v-1", api_name="/arena_vote")
    assert count_prompts(demo_store) == before


FOUR_USERS = """
import json, sys, threading, time, uuid
from gradio_client import Client
from app.door.server import serve
from storage import Store
blocks = serve(Store(sys.argv[1]), host="127.0.0.1", port=int(sys.argv[2]), block=False)
votes, errors = {}, []

def arena(user):
    try:
        client = Client(blocks.local_url, verbose=False)
        job = client.predict(user, f"{user} thinks the movie was", "", "", api_name="/arena_start")["job_id"]
        places = []
        while True:
            now = client.predict(user, job, api_name="/arena_answers")
            places.append(now["place"])
            if now["answers"] or now["status"] not in ("queued", "running"):
                break
            time.sleep(0.5)
        vote = client.predict(user, job, "tie", uuid.uuid4().hex, api_name="/arena_vote")
        votes[user] = {"job": job, "label_id": vote["label_id"], "most_ahead": max(places)}
    except Exception as exc:
        errors.append(repr(exc))

threads = [threading.Thread(target=arena, args=(f"user-{k}",)) for k in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join(timeout=500)
print("RESULT", json.dumps({"votes": votes, "errors": errors, "torch": "torch" in sys.modules}))
blocks.close()
"""


def test_four_people_at_once_every_vote_is_stored_and_the_ui_never_generates(demo_store):
    from bench.studio_driver import free_port

    second_version(demo_store)
    result = subprocess.run([sys.executable, "-c", FOUR_USERS, str(demo_store.path), str(free_port())], cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, result.stderr[-3000:]
    outcome = json.loads(lines[-1].removeprefix("RESULT "))
    assert outcome["errors"] == [] and len(outcome["votes"]) == 4, result.stderr[-3000:]
    assert outcome["torch"] is False  # the serving process never loaded torch: the workers generated
    stored = {label.id: label for label in list_labels(demo_store)}
    for user, vote in outcome["votes"].items():
        assert stored[vote["label_id"]].annotator == user
        assert len(arena_answers(demo_store, vote["job"])) == 2
    assert max(vote["most_ahead"] for vote in outcome["votes"].values()) >= 1  # one at a time: someone waited
    assert len([j for j in winrate_judgements(demo_store) if j.own_prompt]) == 4
