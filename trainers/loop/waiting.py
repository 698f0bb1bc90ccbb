"""A loop that waits for people's labels, as its job's phase says it and as the Label tab reads it back: "round 2/3:
waiting for labels (4/10)" is the loop's round 2 of 3, which has 4 of the 10 labels it waits for ("waiting for
rankings (0/8)" in a round of rankings, `rank_k` 3 to 6). The Label tab counts them again in the store, on the items
the loop's job queued, as the loop does (`round_judgements`), so a vote shows at once, not at the loop's next poll.
Torch-free: the serving process imports it."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from labeling.queue.annotation import queue_settings
from storage import Store
from storage.pairs import get_pair
from storage.rounds import max_policy_round_before, open_winrate_pairs, owned_rounds
from storage.types import Job

from .ranking_round import round_judgements

PHASE = re.compile(r"^round (\d+)/(\d+): waiting for (labels|rankings) \((\d+)/(\d+)\)$")


def waiting_phase(have: int, wanted: int, what: str = "labels") -> str:
    """The phase of a round that waits for people's `what` (labels, or rankings for `rank_k` 3 to 6; the loop adds
    "round r/R: " before it)."""
    return f"waiting for {what} ({have}/{wanted})"


def first_round(store: Store, job: Job) -> int:
    """The store's round of loop `job`'s first round: the first of the rounds it claimed when it began
    (`storage.rounds.claim_rounds`; before that, one past the newest policy made before the job); the loop's round r
    is the store's round `first_round + r - 1`, and its items are queued in it."""
    owned = owned_rounds(store, job.id)
    return owned.start if owned is not None else max_policy_round_before(store, job.created) + 1


@dataclass(frozen=True)
class Waiting:
    """A loop job's round that waits for people: round `round` of `rounds` (the loop's count) has `have` of
    `wanted` labels."""

    job_id: int
    round: int
    rounds: int
    have: int
    wanted: int
    what: str = "labels"  # or rankings

    def line(self, *notes: str) -> str:
        """`round 2 of 3 needs 6 more labels (loop job 3)` (or rankings), with `notes` after the job."""
        missing, one = self.wanted - self.have, self.what.removesuffix("s")
        needs = (f"needs {missing} more {one}{'s' if missing != 1 else ''}" if missing > 0
                 else f"has the {self.wanted} {one}{'s' if self.wanted != 1 else ''} it waits for")
        return f"round {self.round} of {self.rounds} {needs} (loop job {self.job_id}{''.join('; ' + n for n in notes)})"


def waiting_for_people(job: Job) -> Waiting | None:
    """The round `job` waits on, when it is a running loop waiting for people's labels (its count as of the loop's
    last poll)."""
    found = PHASE.match(job.phase or "") if job.status.active else None
    if found is None:
        return None
    round, rounds, what, have, wanted = found.groups()
    return Waiting(job.id, int(round), int(rounds), int(have), int(wanted), what)


def waiting_line(store: Store, job: Job, annotator: str, pair_id: int | None) -> str | None:
    """The Label tab's line for a loop that waits for people: the labels (or rankings) its round has now on the items
    its job queued, counted as the loop counts them; and, where some of what `annotator` labels does not count, why:
    the pair on screen (`pair_id`) is not one of the round's items, or win-rate pairs come among the round's (they
    judge versions; the round never counts them)."""
    found = waiting_for_people(job)
    if found is None:
        return None
    round = first_round(store, job) + found.round - 1
    notes = []
    on_screen = get_pair(store, pair_id) if pair_id is not None else None
    if on_screen is not None and (found.what == "rankings" or (on_screen.round, on_screen.job_id) != (round, job.id)):
        notes.append(f"the pair on screen is not one of its {'rankings' if found.what == 'rankings' else 'pairs'}")
    among = open_winrate_pairs(store, round, annotator, queue_settings(store).overlap, job.id)
    if among:
        notes.append(f"{among} win-rate pair{'s' if among != 1 else ''} among its pairs do{'es' if among == 1 else ''}"
                     " not count")
    return replace(found, have=round_judgements(store, round, job.id)).line(*notes)
