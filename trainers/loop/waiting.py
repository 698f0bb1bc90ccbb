"""A loop that waits for people's labels, as its job's phase says it and as the Label tab reads it back: "round 2/3:
waiting for labels (4/10)" is the loop's round 2 of 3, which has 4 of the 10 labels it waits for. Torch-free: the
serving process imports it."""

from __future__ import annotations

import re
from dataclasses import dataclass

from storage.types import Job

PHASE = re.compile(r"^round (\d+)/(\d+): waiting for labels \((\d+)/(\d+)\)$")


def waiting_phase(have: int, wanted: int) -> str:
    """The phase of a round that waits for people (the loop adds "round r/R: " before it)."""
    return f"waiting for labels ({have}/{wanted})"


@dataclass(frozen=True)
class Waiting:
    """A loop job's round that waits for people: round `round` of `rounds` (the loop's count) has `have` of
    `wanted` labels."""

    job_id: int
    round: int
    rounds: int
    have: int
    wanted: int

    def line(self) -> str:
        """`round 2 of 3 needs 6 more labels (loop job 3)`"""
        missing = self.wanted - self.have
        return (f"round {self.round} of {self.rounds} needs {missing} more label{'s' if missing != 1 else ''} "
                f"(loop job {self.job_id})")


def waiting_for_people(job: Job) -> Waiting | None:
    """The round `job` waits on, when it is a running loop waiting for people's labels."""
    found = PHASE.match(job.phase or "") if job.status.active else None
    return Waiting(job.id, *map(int, found.groups())) if found else None
