"""The arena's rules: which two versions answer (by default the newest against the SFT policy; an admin may name
others), the prompt a person types, and the vote: first, second, tie or both bad on the two answers as shown,
stored as a win-rate judgement of the later version against the earlier (`storage.arena`) through the Label tab's
write path (`submit_label`), after which, and only then, the versions are named.

    judged, opponent = arena_versions(store)                  # newest, SFT root
    vote = vote_arena(store, "ada", job_id, "first", uuid4().hex)
    vote.names                                                # ("v3", "v0"): first shown, second shown
"""

from __future__ import annotations

from dataclasses import dataclass

from labeling.queue.annotation import Choice, check_annotator, submit_label
from labeling.versions.winrate import version_names, version_number
from storage import Store
from storage.arena import ARENA_KIND, arena_answers, arena_pair, open_arena_pair
from storage.errors import Conflict, InvalidInput, NotFound
from storage.jobs import get_job
from storage.policies import list_policies, root_policy
from storage.types import Job, Policy

MAX_PROMPT_CHARS = 8000
VOTE_CHOICES = {"first": Choice.LEFT, "second": Choice.RIGHT, "left": Choice.LEFT, "right": Choice.RIGHT,
                "tie": Choice.TIE, "both_bad": Choice.BOTH_BAD}  # the answers are shown first (left), second (right)


@dataclass(frozen=True)
class ArenaVote:
    """A stored arena vote: its label and the versions that answered, in the order shown."""

    label_id: int
    pair_id: int
    names: tuple[str, str]


def check_arena_prompt(text: object) -> str:
    """The prompt as typed (surrounding blanks removed), or InvalidInput naming what is wrong."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput("the prompt is empty; type a prompt or pick a held-out one")
    if len(text) > MAX_PROMPT_CHARS:
        raise InvalidInput(f"the prompt has {len(text)} characters, over the arena's {MAX_PROMPT_CHARS}; shorten it")
    return text.strip()


def _named(policies: list[Policy], names: dict[int, str], text: str) -> Policy:
    number = version_number(text)
    by_number = {int(name[1:]): p for p in policies for name in [names[p.id]]}
    if number not in by_number:
        raise InvalidInput(f"unknown version {text!r}; choose one of v0 to v{len(policies) - 1}")
    return by_number[number]


def arena_versions(store: Store, first: str | None = None, second: str | None = None) -> tuple[Policy, Policy]:
    """(judged, opponent): with no names, the newest version against its SFT root (or the version before it when
    the newest is a root); with two names (`v3`, `0`), the later of them against the earlier."""
    policies = list_policies(store)
    if len(policies) < 2:
        raise InvalidInput(f"the arena compares two versions and this store has {len(policies)}; train a version "
                           "first (the Train tab's loop), then come back")
    if not (first or "").strip() and not (second or "").strip():
        newest = policies[-1]
        root = root_policy(store, newest)
        return newest, (root if root.id != newest.id else policies[-2])
    names = version_names(policies)
    a, b = _named(policies, names, first or ""), _named(policies, names, second or "")
    if a.id == b.id:
        raise InvalidInput(f"both answers would come from {names[a.id]}; choose two different versions")
    return (a, b) if a.id > b.id else (b, a)


def own_arena_job(store: Store, voter: str, job_id: object) -> Job:
    """`voter`'s arena job `job_id`, or NotFound (someone else's, or no arena job at all)."""
    try:
        job = get_job(store, int(job_id))
    except (NotFound, TypeError, ValueError):
        job = None
    if job is None or job.kind != ARENA_KIND or job.config.get("user") != voter:
        raise NotFound(f"arena prompt {str(job_id)[:20]} is not one of yours; type a prompt and vote on its answers")
    return job


def vote_arena(store: Store, voter: str, job_id: int, choice: str, vote_id: str) -> ArenaVote:
    """Store `voter`'s vote on the answers of their arena job `job_id` (first/left, second/right, tie, both_bad) and
    name the versions; refused before both answers exist, or a second time."""
    voter = check_annotator(voter)
    if choice not in VOTE_CHOICES:
        raise InvalidInput(f"unknown arena vote {str(choice)[:20]!r}; vote first, second, tie or both_bad")
    job = own_arena_job(store, voter, job_id)
    answers = arena_answers(store, job_id)
    if len(answers) < 2:
        raise Conflict("the answers are not ready yet; wait for both, then vote")
    first, second = answers
    names = version_names(list_policies(store))
    with store.write():
        if arena_pair(store, first.id, second.id) is not None:
            raise Conflict("you already voted on these answers; type a new prompt for another vote")
        pair_id = open_arena_pair(store, voter, first, second, job.config["judged"], job.config["opponent"])
        label_id = submit_label(store, voter, pair_id, VOTE_CHOICES[choice].value, vote_id)
    return ArenaVote(label_id, pair_id, (names[first.policy_id], names[second.policy_id]))
