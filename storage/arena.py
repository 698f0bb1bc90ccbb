"""The arena's rows: a person's prompt (source `arena`), the job that answers it (kind `arena`, one per person at a
time, queued in id order, run beside any training job), the answers as generations of their versions (`params`
name the job), and the vote: a win-rate pair (selector `arena`, never served by the label queue) reserved for the
voter, so the label is written by the Label tab's own path (`labeling.queue.annotation.submit_label`).

    prompt_id = arena_prompt(store, "Write a haiku about rain")
    job_id = create_arena_job(store, "ada", {"prompt_id": prompt_id, "policies": [4, 1], ...})
    arena_place(store, job_id)        # arena jobs ahead of this one
    answers = arena_answers(store, job_id)        # [first shown, second shown] once the worker stored them
"""

from __future__ import annotations

import json
import time

from .db import Store
from .errors import Conflict
from .generations import generation_row
from .jobs import ACTIVE, BESIDE_TRAINING
from .pairs import NewPair, add_pairs
from .prompts import add_prompts
from .settings import get_setting, set_setting
from .types import Generation, JobStatus, Selector

ARENA_SOURCE = "arena"  # the source of a prompt typed in the arena, and of the arena's answers (generations)
ARENA_KIND = BESIDE_TRAINING  # the job kind (trainers.jobs.layer.JobKind.ARENA)
ARENA_TRAINS = "arena_votes_train"  # setting: arena votes also train (default off: they only judge versions)


def arena_votes_train(store: Store) -> bool:
    """Whether the admin lets arena votes train reward models and DPO (default off)."""
    return bool(get_setting(store, ARENA_TRAINS))


def set_arena_votes_train(store: Store, on: bool) -> None:
    set_setting(store, ARENA_TRAINS, bool(on))


def arena_prompt(store: Store, text: str) -> int:
    """The id of prompt `text`: added with source `arena` (left out of sampling unless arena votes train), or the
    stored prompt of that text."""
    with store.write() as db:
        add_prompts(store, [text], source=ARENA_SOURCE)
        prompt_id, source = db.execute("SELECT id, source FROM prompts WHERE text = ?", [text]).fetchone()
        if source == ARENA_SOURCE and not arena_votes_train(store):
            db.execute("UPDATE prompts SET excluded = 1 WHERE id = ?", [prompt_id])
    return prompt_id


def create_arena_job(store: Store, user: str, config: dict) -> int:
    """Queue an arena job for `user` (kept in its config); refused while `user` has one queued or running."""
    with store.write() as db:
        busy = db.execute("SELECT id FROM jobs WHERE kind = ? AND status IN (?, ?) AND json_extract(config, '$.user')"
                          " = ?", [ARENA_KIND, *ACTIVE, user]).fetchone()
        if busy:
            raise Conflict(f"your previous arena prompt (job {busy[0]}) is still being answered; wait for its answers "
                           "before asking again")
        return db.execute("INSERT INTO jobs (kind, config, status, created) VALUES (?, ?, ?, ?)",
                          [ARENA_KIND, json.dumps({**config, "user": user}), JobStatus.QUEUED.value,
                           time.time()]).lastrowid


def arena_place(store: Store, job_id: int) -> int:
    """How many arena jobs are queued or running ahead of `job_id` (they run one at a time, in id order)."""
    return store.db().execute("SELECT count(*) FROM jobs WHERE kind = ? AND status IN (?, ?) AND id < ?",
                              [ARENA_KIND, *ACTIVE, job_id]).fetchone()[0]


def arena_answers(store: Store, job_id: int) -> list[Generation]:
    """The answers arena job `job_id` stored, in the order they are shown."""
    rows = store.db().query("SELECT * FROM generations WHERE source = ? AND json_extract(params, '$.arena_job') = ?"
                            " ORDER BY json_extract(params, '$.arena_slot')", [ARENA_SOURCE, job_id])
    return [generation_row(r) for r in rows]


def arena_pair(store: Store, first_id: int, second_id: int) -> int | None:
    """The arena pair of these two answers, if a vote made it."""
    row = store.db().execute("SELECT id FROM pairs WHERE selector = ? AND first_id = ? AND second_id = ?",
                             [Selector.ARENA, first_id, second_id]).fetchone()
    return row[0] if row else None


def open_arena_pair(store: Store, voter: str, first: Generation, second: Generation, judged_id: int,
                    opponent_id: int) -> int:
    """The pair of two answers (first shown left) as a win-rate pair of `judged_id` against `opponent_id`, reserved
    for `voter` so the vote is stored the way every label is; returns the pair id."""
    with store.write() as db:
        pair_id = add_pairs(store, [NewPair(first.prompt_id, first.id, second.id, Selector.ARENA, None, 0,
                                            judged_id)])[0]
        db.execute("INSERT INTO winrate_pairs (pair_id, policy_id, opponent_id) VALUES (?, ?, ?)",
                   [pair_id, judged_id, opponent_id])
        now = time.time()
        db.execute("INSERT INTO reservations (pair_id, annotator, expires, left_id, shown) VALUES (?, ?, ?, ?, ?)",
                   [pair_id, voter, now + 60.0, first.id, now])
    return pair_id
