"""Labels: one current label per (pair, annotator); undone labels are kept, flagged, never deleted.

Labels are written by two paths, a vote (`storage.votes.submit_vote`) and a preference import
(`storage.preferences.import_preferences`), both through `insert_label`."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from sqlite_utils import Database

from .arena import arena_votes_train
from .db import Store
from .gold import NOT_GOLD, left_out_annotators
from .judge_verdicts import judge_training_rows
from .types import Label, LoopLabels, Outcome, Selector


def _row(row: dict) -> Label:
    return Label(row["id"], row["pair_id"], row["annotator"], Outcome(row["outcome"]), row["left_id"],
                 row["decision_ms"], row["vote_id"], row["created"])


@dataclass(frozen=True)
class NewLabel:
    """A label to store: `outcome` relative to the pair's (first, second), `left_id` the generation shown left."""

    pair_id: int
    annotator: str
    outcome: Outcome
    vote_id: str
    left_id: int | None = None
    decision_ms: int | None = None
    margin: float | None = None


def insert_label(db: Database, label: NewLabel, now: float) -> int:
    """Write one label inside the caller's write transaction and return its id: the only INSERT INTO labels.

    The callers (a vote, a preference import) check their own rules first; the schema keeps one current label per
    (pair, annotator) and each vote id once.
    """
    return db.execute(
        "INSERT INTO labels (pair_id, annotator, outcome, left_id, decision_ms, vote_id, margin, created)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [label.pair_id, label.annotator, Outcome(label.outcome).value, label.left_id, label.decision_ms,
         label.vote_id, label.margin, now],
    ).lastrowid


def find_vote(db: Database, vote_id: str) -> tuple[int, int, str] | None:
    """(label id, pair id, annotator) of the label stored under `vote_id`, or None."""
    return db.execute("SELECT id, pair_id, annotator FROM labels WHERE vote_id = ?", [vote_id]).fetchone()


def undo_votes(store: Store, vote_ids: list[str], now: float | None = None) -> int:
    """Flag undone the current labels stored under `vote_ids` (a demonstration's recorded preferences, taken back with
    it); returns how many."""
    with store.write() as db:
        return sum(db.execute("UPDATE labels SET undone = ? WHERE vote_id = ? AND undone IS NULL",
                              [time.time() if now is None else now, vote_id]).rowcount for vote_id in vote_ids)


def list_labels(store: Store, annotator: str | None = None, include_undone: bool = False) -> list[Label]:
    clauses, params = ([] if include_undone else ["undone IS NULL"]), []
    if annotator is not None:
        clauses.append("annotator = ?")
        params.append(annotator)
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    return [_row(r) for r in store.db().query(f"SELECT * FROM labels {where} ORDER BY id", params)]


# A label on a win-rate pair (storage.winrate) is evaluation, never training data.
_NOT_EVALUATION = "NOT EXISTS (SELECT 1 FROM winrate_pairs w WHERE w.pair_id = l.pair_id)"


def count_labels(store: Store, include_skips: bool = True, evaluation: bool = True) -> int:
    """Current labels (without skips, or without those on win-rate pairs, when asked)."""
    extra = ("" if include_skips else " AND outcome != 'skip'") + ("" if evaluation else f" AND {_NOT_EVALUATION}")
    return store.db().execute(f"SELECT count(*) FROM labels l WHERE undone IS NULL{extra}").fetchone()[0]


def labelled_by_others(store: Store, synthetic: str) -> bool:
    """Whether anyone but the annotator named `synthetic` (the oracle) gave a current label or ranking, skips aside:
    people have labelled this store."""
    return store.db().execute(
        "SELECT EXISTS (SELECT 1 FROM labels WHERE undone IS NULL AND outcome != 'skip' AND annotator != ?)"
        " OR EXISTS (SELECT 1 FROM ranking_labels WHERE undone IS NULL AND outcome != 'skip' AND annotator != ?)",
        [synthetic, synthetic]).fetchone()[0] == 1


@dataclass(frozen=True)
class LabeledPair:
    """A current label joined with its texts: a reward-model training example, or an exported row."""

    label_id: int
    pair_id: int
    annotator: str
    outcome: Outcome
    prompt: str
    first: str
    second: str
    margin: float | None = None  # by how much the winner leads (imported preference data may carry one)
    prompt_messages: list[dict] | None = None  # the prompt's turns when it is a conversation (`prompt` is their text)
    prompt_excluded: bool = False  # the prompt is left out of training (`python app.py prompts --exclude`)

    @property
    def prompt_content(self) -> str | list[dict]:
        """What the model was prompted with: the conversation's turns, or the prompt text."""
        return self.prompt_messages if self.prompt_messages is not None else self.prompt


def training_labels(store: Store, include_skips: bool = False, loop: LoopLabels | None = None) -> list[LabeledPair]:
    """The labels that train: every current label (skips only when asked) with prompt, both responses and margin, in
    label order, but none on a win-rate pair (those judge policy versions: they never train or validate a reward
    model, nor train DPO; an arena vote trains only where the admin allows it, `storage.arena`), none on a gold pair
    (those check annotators) and none of an annotator flagged by their gold accuracy when `gold_exclude_flagged` is
    on. Every trainer reads its labels here, and so does the export (its files train models). After them, a judge's
    verdicts that train (`storage.judge_verdicts`: the user chose the judge as annotator), as annotator
    `judge:<name>` with negative ids, on pairs no person labelled. With `loop`, a loop job's round's labels: no
    synthetic annotator's label or verdict on an item another job or the people's queue holds."""
    skips = "" if include_skips else " AND l.outcome != 'skip'"
    arena = f" OR pr.selector = '{Selector.ARENA}'" if arena_votes_train(store) else ""  # the admin allows it
    evaluation = f"({_NOT_EVALUATION}{arena})"
    left_out = sorted(left_out_annotators(store))  # flagged by their gold accuracy (storage.gold), when asked
    skips += f" AND {NOT_GOLD}" + (f" AND l.annotator NOT IN ({', '.join('?' * len(left_out))})" if left_out else "")
    own, own_params = loop.clause("l.annotator", "pr.job_id") if loop is not None else ("1", [])
    rows = store.db().query(
        f"""
        SELECT l.id AS label_id, l.pair_id, l.annotator, l.outcome, p.text AS prompt,
               g1.text AS first, g2.text AS second, l.margin, p.messages, p.excluded
        FROM labels l
        JOIN pairs pr ON pr.id = l.pair_id
        JOIN prompts p ON p.id = pr.prompt_id
        JOIN generations g1 ON g1.id = pr.first_id
        JOIN generations g2 ON g2.id = pr.second_id
        WHERE l.undone IS NULL AND {evaluation}{skips} AND {own}
        ORDER BY l.id
        """, [*left_out, *own_params]
    )
    rows = [*rows, *judge_training_rows(store, None if loop is None else loop.job_id)]
    return [LabeledPair(r["label_id"], r["pair_id"], r["annotator"], Outcome(r["outcome"]), r["prompt"],
                        r["first"], r["second"], r["margin"], json.loads(r["messages"]) if r["messages"] else None,
                        bool(r["excluded"]))
            for r in rows]
