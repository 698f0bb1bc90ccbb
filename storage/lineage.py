"""What a version was made from, as its model card tells it: the judgements in the store when it was registered (pair
labels and rankings by annotator, demonstrations by author, judge verdicts that train), and the job that registered it
with that job's failure warnings.

    counts = judgement_counts(store, until=policy.created)   # [JudgementCount("pairs", "alice", 40), ...]
    job = registering_job(store, policy)                      # the job whose run spans policy.created, or None
"""

from __future__ import annotations

from dataclasses import dataclass

from .db import Store
from .jobs import get_job
from .judge_verdicts import JUDGE_PREFIX
from .types import Job, Policy

_COUNTS = """
    SELECT 'pairs', annotator, count(*) FROM labels
      WHERE undone IS NULL AND outcome != 'skip' AND created <= :until GROUP BY annotator
    UNION ALL
    SELECT 'rankings', annotator, count(*) FROM ranking_labels
      WHERE undone IS NULL AND outcome != 'skip' AND created <= :until GROUP BY annotator
    UNION ALL
    SELECT 'demonstrations', author, count(*) FROM demonstrations
      WHERE undone IS NULL AND created <= :until GROUP BY author
    UNION ALL
    SELECT 'pairs', :judge || judge, count(*) FROM judge_verdicts
      WHERE trains = 1 AND status = 'ok' AND created <= :until GROUP BY judge
"""


@dataclass(frozen=True)
class JudgementCount:
    """`count` judgements of one kind (`pairs`, `rankings`, `demonstrations`) by one annotator (a person's name,
    `oracle`, `judge:<name>`), skips and undone ones left out."""

    kind: str
    annotator: str
    count: int


def judgement_counts(store: Store, until: float) -> list[JudgementCount]:
    """Every judgement stored at or before `until` (a time.time()), by kind and annotator."""
    rows = store.db().execute(_COUNTS, {"until": until, "judge": JUDGE_PREFIX}).fetchall()
    return [JudgementCount(kind, annotator, n) for kind, annotator, n in rows]


def registering_job(store: Store, policy: Policy) -> Job | None:
    """The job that registered `policy`: the newest training job started before it and not finished before it."""
    row = store.db().execute(
        "SELECT id FROM jobs WHERE kind IN ('loop', 'policy', 'dpo', 'sft') AND started <= :t"
        " AND (finished IS NULL OR finished >= :t) ORDER BY started DESC LIMIT 1", {"t": policy.created}).fetchone()
    return get_job(store, row[0]) if row else None
