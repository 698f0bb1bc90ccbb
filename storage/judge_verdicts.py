"""A judge model's verdicts (RLAIF), kept apart from people's labels: their own table, never in `labels`.

A verdict never counts toward a pair's overlap (`pairs.votes` counts labels only) and never enters people's win-rate
or agreement figures (those read `labels`). A verdict marked `trains` (the user chose the judge as annotator: `label
--annotator judge`, a loop with `annotator: judge`) trains like a label, unless a person labelled the pair (the
person's label wins), and takes its pair out of people's queue; a suggestion (`trains` 0) takes nothing from anyone.
Failed attempts (timeout, refusal, unparseable answer, error) are kept with their status, counted, never guessed.

    add_verdicts(store, [NewVerdict(pair_id=3, judge="qwen", status="ok", outcome=Outcome.FIRST, confidence=0.9)])
    pending = unjudged_pairs(store, "qwen", limit=50)
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from .db import Store
from .types import Outcome, Selector

JUDGE_PREFIX = "judge:"  # a judge's verdicts train under the annotator name `judge:<name>`
STATUSES = ("ok", "timeout", "refusal", "unparseable", "error")
_NOT_WINRATE = "NOT EXISTS (SELECT 1 FROM winrate_pairs w WHERE w.pair_id = {pair})"
_PERSON_LABELLED = ("EXISTS (SELECT 1 FROM labels l WHERE l.pair_id = {pair} AND l.undone IS NULL"
                    " AND l.outcome != 'skip')")


@dataclass(frozen=True)
class NewVerdict:
    """A judge's answer on one pair: `outcome` relative to the pair's (first, second) when `status` is ok, else None;
    `orders` what each order answered (verdict, status, probabilities, an excerpt of the text)."""

    pair_id: int
    judge: str
    status: str
    outcome: Outcome | None = None
    confidence: float | None = None
    orders: list[dict] = field(default_factory=list)
    trains: bool = False


@dataclass(frozen=True)
class Verdict:
    id: int
    pair_id: int
    judge: str
    status: str
    outcome: Outcome | None
    confidence: float | None
    orders: list[dict]
    trains: bool
    created: float


@dataclass(frozen=True)
class PendingPair:
    """A queued pair a judge has not answered, with its texts in the pair's stored order."""

    pair_id: int
    round: int
    prompt: str
    messages: list[dict] | None
    first: str
    second: str
    winrate: bool = False  # a win-rate pair: its verdict is evaluation, it never trains


def _row(r: dict) -> Verdict:
    return Verdict(r["id"], r["pair_id"], r["judge"], r["status"], Outcome(r["outcome"]) if r["outcome"] else None,
                   r["confidence"], json.loads(r["orders"]), bool(r["trains"]), r["created"])


def add_verdicts(store: Store, verdicts: list[NewVerdict]) -> list[int]:
    """Store verdicts in one transaction (a judge's new answer on a pair replaces its earlier one); returns ids."""
    now, ids = time.time(), []
    with store.write() as db:
        for v in verdicts:
            outcome = None if v.outcome is None else Outcome(v.outcome).value
            ids.append(db.execute(
                "INSERT INTO judge_verdicts (pair_id, judge, status, outcome, confidence, orders, trains, created)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (pair_id, judge) DO UPDATE SET status = excluded.status,"
                " outcome = excluded.outcome, confidence = excluded.confidence, orders = excluded.orders,"
                " trains = excluded.trains, created = excluded.created RETURNING id",
                [v.pair_id, v.judge, v.status, outcome, v.confidence, json.dumps(v.orders), int(v.trains), now],
            ).fetchone()[0])
    return ids


def list_verdicts(store: Store, judge: str | None = None, pair_ids: list[int] | None = None) -> list[Verdict]:
    clauses, params = [], []
    if judge is not None:
        clauses.append("judge = ?")
        params.append(judge)
    if pair_ids is not None:
        clauses.append(f"pair_id IN ({', '.join('?' * len(pair_ids))})")
        params.extend(pair_ids)
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    return [_row(r) for r in store.db().query(f"SELECT * FROM judge_verdicts {where} ORDER BY id", params)]


def unjudged_pairs(store: Store, judge: str, limit: int, round: int | None = None,
                   winrate: bool = True, job_id: int | None = None) -> list[PendingPair]:
    """Up to `limit` queued pairs `judge` has not answered, in the queue's order (newest round first, then selector
    score, then id); imported pairs are never queued, so never judged; with `round`, only that round's pairs; without
    `winrate`, none of the win-rate pairs; with `job_id`, only the pairs that loop job queued."""

    clauses = [f"p.selector != '{Selector.IMPORTED}'",
               "NOT EXISTS (SELECT 1 FROM judge_verdicts j WHERE j.pair_id = p.id AND j.judge = :judge)"]
    if round is not None:
        clauses.append("p.round = :round")
    if job_id is not None:
        clauses.append("p.job_id = :job")
    if not winrate:
        clauses.append(_NOT_WINRATE.format(pair="p.id"))
    rows = store.db().execute(
        f"SELECT p.id, p.round, pr.text, pr.messages, g1.text, g2.text, NOT {_NOT_WINRATE.format(pair='p.id')}"
        " FROM pairs p"
        " JOIN prompts pr ON pr.id = p.prompt_id JOIN generations g1 ON g1.id = p.first_id"
        f" JOIN generations g2 ON g2.id = p.second_id WHERE {' AND '.join(clauses)}"
        " ORDER BY p.round DESC, p.score DESC, p.id LIMIT :limit",
        {"judge": judge, "round": round, "limit": limit, "job": job_id}).fetchall()
    return [PendingPair(pid, rnd, text, json.loads(messages) if messages else None, first, second, bool(winrate))
            for pid, rnd, text, messages, first, second, winrate in rows]


def round_training_verdicts(store: Store, round: int, job_id: int | None = None) -> int:
    """Verdicts that train on the pairs of `round` (with `job_id`: those that job queued; none on a win-rate pair,
    none where a person labelled the pair, whose label counts already): what a round's label budget counts beside
    people's labels."""
    return store.db().execute(
        "SELECT count(*) FROM judge_verdicts j JOIN pairs p ON p.id = j.pair_id WHERE j.trains = 1 AND p.round = ?"
        f" AND {_NOT_WINRATE.format(pair='p.id')} AND NOT {_PERSON_LABELLED.format(pair='p.id')}"
        " AND (? IS NULL OR p.job_id = ?)", [round, job_id, job_id]).fetchone()[0]


def round_unsure_verdicts(store: Store, judge: str, round: int, job_id: int | None = None) -> int:
    """`judge`'s verdicts on the pairs of `round` (with `job_id`: those that job queued) that do not train (unsure)
    on pairs no person labelled yet (win-rate pairs aside): the pairs a hybrid round leaves to people."""
    return store.db().execute(
        "SELECT count(*) FROM judge_verdicts j JOIN pairs p ON p.id = j.pair_id WHERE j.judge = ? AND j.trains = 0"
        f" AND j.status = 'ok' AND p.round = ? AND {_NOT_WINRATE.format(pair='p.id')}"
        f" AND NOT {_PERSON_LABELLED.format(pair='p.id')} AND (? IS NULL OR p.job_id = ?)",
        [judge, round, job_id, job_id]).fetchone()[0]


def judge_training_rows(store: Store, job_id: int | None = None) -> list[dict]:
    """The verdicts that train, joined with their texts (for `storage.labels.training_labels`): marked `trains`, on a
    pair no person labelled (skips aside) and that is not a win-rate pair; one per pair (the newest verdict); with
    `job_id` (a loop job's round), only on the pairs that job queued."""
    return list(store.db().query(
        f"""
        SELECT -j.id AS label_id, j.pair_id, '{JUDGE_PREFIX}' || j.judge AS annotator, j.outcome,
               p.text AS prompt, g1.text AS first, g2.text AS second, NULL AS margin, p.messages, p.excluded
        FROM judge_verdicts j
        JOIN pairs pr ON pr.id = j.pair_id
        JOIN prompts p ON p.id = pr.prompt_id
        JOIN generations g1 ON g1.id = pr.first_id
        JOIN generations g2 ON g2.id = pr.second_id
        WHERE j.trains = 1 AND {_NOT_WINRATE.format(pair='j.pair_id')}
          AND NOT {_PERSON_LABELLED.format(pair='j.pair_id')}
          AND j.id = (SELECT max(k.id) FROM judge_verdicts k WHERE k.pair_id = j.pair_id AND k.trains = 1)
          AND (:job IS NULL OR pr.job_id = :job)
        ORDER BY j.id
        """, {"job": job_id}
    ))


def status_counts(store: Store) -> dict[str, dict[str, int]]:
    """Per judge: how many verdicts of each status, and how many train."""
    counts: dict[str, dict[str, int]] = {}
    for judge, status, trains, n in store.db().execute(
            "SELECT judge, status, trains, count(*) FROM judge_verdicts GROUP BY judge, status, trains"):
        row = counts.setdefault(judge, {s: 0 for s in (*STATUSES, "trains")})
        row[status] += n
        row["trains"] += n if trains else 0
    return counts


def judged_beside_people(store: Store) -> list[dict]:
    """Every (verdict, person's label) on the same pair, both with an outcome: the rows the judge's agreement with
    people is measured on. Keys: judge, pair_id, round, winrate, judge_outcome, annotator, person_outcome."""
    return list(store.db().query(
        f"""
        SELECT j.judge, j.pair_id, p.round, NOT {_NOT_WINRATE.format(pair='j.pair_id')} AS winrate,
               j.outcome AS judge_outcome, l.annotator, l.outcome AS person_outcome
        FROM judge_verdicts j
        JOIN pairs p ON p.id = j.pair_id
        JOIN labels l ON l.pair_id = j.pair_id AND l.undone IS NULL AND l.outcome != 'skip'
        WHERE j.status = 'ok'
        ORDER BY j.judge, j.pair_id, l.id
        """
    ))


def shown_verdict(store: Store, pair_id: int, annotator: str) -> tuple[Verdict, bool] | None:
    """The newest answered verdict on a pair (any judge) and whether the pair's first response is on `annotator`'s
    left (their reservation's side, else their current label's); None without either."""
    row = store.db().execute(
        "SELECT j.id, p.first_id = coalesce((SELECT r.left_id FROM reservations r WHERE r.pair_id = p.id"
        " AND r.annotator = :annotator), (SELECT l.left_id FROM labels l WHERE l.pair_id = p.id"
        " AND l.annotator = :annotator AND l.undone IS NULL))"
        " FROM judge_verdicts j JOIN pairs p ON p.id = j.pair_id WHERE j.pair_id = :pair AND j.status = 'ok'"
        " ORDER BY j.id DESC LIMIT 1", {"pair": pair_id, "annotator": annotator}).fetchone()
    if row is None or row[1] is None:
        return None
    return next(v for v in list_verdicts(store, pair_ids=[pair_id]) if v.id == row[0]), bool(row[1])


def judge_winrate_rows(store: Store) -> list[dict]:
    """Every answered verdict on a win-rate pair (evaluation: never trains), with what the pair compares. Keys:
    judge, pair_id, policy_id, opponent_id, outcome, version_first."""
    return list(store.db().query(
        "SELECT j.judge, j.pair_id, w.policy_id, w.opponent_id, j.outcome,"
        " g.policy_id = w.policy_id AS version_first"
        " FROM judge_verdicts j JOIN winrate_pairs w ON w.pair_id = j.pair_id JOIN pairs p ON p.id = j.pair_id"
        " JOIN generations g ON g.id = p.first_id WHERE j.status = 'ok' ORDER BY j.judge, w.policy_id, j.pair_id"))
