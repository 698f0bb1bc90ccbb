"""Label exports as files that `datasets.load_dataset` reads: `.jsonl` ("json" loader) or `.parquet`.

- `trl`: TRL's preference format, `{prompt, chosen, rejected}`, one row per current first/second label; ties,
  both-bad and skips are left out and counted. A `margin` column is added when imported labels carry margins
  (0.0, no margin, for the others).
- `soft`: every current label, skips included: `{label_id, pair_id, annotator, prompt, first, second, outcome,
  target, margin}` where `target` = P(first preferred): 1, 0, 0.5 for ties and both-bad, null for skips.

- `rankings`: one row per current ranking verdict, skips left out and counted: `{ranking_id, label_id, annotator,
  prompt, responses, order, ties, all_bad}`: `responses` in the order they were shown (A first), `order` their indices
  best first, `ties` the groups of indices tied (each of 2 or more, neighbours in `order`), `all_bad` true with an
  empty `order` for an "all bad" verdict.

A ranking verdict's comparisons (InstructGPT: every pair of its answers) are rows of `trl` and `soft` too: a tie or
an "all bad" verdict's pairs as ties and both-bad; their `soft` rows carry the verdict's `label_id`, a null `pair_id`
and its `ranking_id` (a `ranking_id` column appears when the store has ranking verdicts).

A judgement's rationale and 1-7 ratings (`labeling.queue.notes`) are `rationale` and `ratings` columns of `soft`
(ratings [first, second]) and `rankings` (ratings in the order shown) when any judgement has one.

Labels on win-rate pairs (blind judgements of policy versions, `storage.winrate`) are evaluation, not training data:
the export leaves them out, as reward training does (`storage.labels.training_labels`).

A store with any conversation prompt exports every row in TRL's conversational format, so one file never mixes
strings and message lists: `prompt` is the list of `{role, content}` turns (a text prompt becomes one user turn),
and each response is a list holding one assistant turn.

    result = export_labels(store, "trl", "prefs.jsonl")
    datasets.load_dataset("json", data_files="prefs.jsonl", split="train")
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from labeling.queue.ranking import comparison_pairs
from storage import Store
from storage.errors import InvalidInput
from storage.labels import LabeledPair, training_labels
from storage.notes import notes_by_label
from storage.pairs import get_pair
from storage.rankings import ALL_BAD, SKIP, LabeledRanking, ranking_verdicts
from storage.types import Outcome

FORMATS = ("trl", "soft", "rankings")
SUFFIXES = (".jsonl", ".parquet")

MESSAGES = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))


def _schema(fmt: str, conversational: bool) -> pa.Schema:
    text = MESSAGES if conversational else pa.string()
    if fmt == "rankings":
        return pa.schema([("ranking_id", pa.int64()), ("label_id", pa.int64()), ("annotator", pa.string()),
                          ("prompt", text), ("responses", pa.list_(text)), ("order", pa.list_(pa.int64())),
                          ("ties", pa.list_(pa.list_(pa.int64()))), ("all_bad", pa.bool_())])
    if fmt == "trl":
        return pa.schema([("prompt", text), ("chosen", text), ("rejected", text)])
    return pa.schema([("label_id", pa.int64()), ("pair_id", pa.int64()), ("annotator", pa.string()),
                      ("prompt", text), ("first", text), ("second", text), ("outcome", pa.string()),
                      ("target", pa.float64()), ("margin", pa.float64())])


@dataclass(frozen=True)
class ExportResult:
    path: Path
    format: str
    rows: int
    ties: int  # left out of a trl export, rows of their own in soft
    both_bad: int
    skips: int

    def summary(self) -> str:
        if self.format == "rankings":
            return (f"wrote {self.rows} rankings to {self.path} ({self.ties} with ties, {self.both_bad} all bad; "
                    f"left out: {self.skips} skips)")
        kept = "left out" if self.format == "trl" else "included"
        return (f"wrote {self.rows} rows to {self.path} ({kept}: {self.ties} ties, {self.both_bad} both bad, "
                f"{self.skips} skips)")


def check_export_path(path: str | Path) -> Path:
    """Fail before anything is read when the output file cannot be written where asked."""
    path = Path(path)
    if path.suffix.lower() not in SUFFIXES:
        raise InvalidInput(f"export file {path} must end in .jsonl or .parquet")
    if path.is_dir():
        raise InvalidInput(f"{path} is a folder; give a file name such as {path / 'labels.jsonl'}")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise InvalidInput(f"folder {folder} does not exist; create it or export elsewhere")
    if not os.access(folder, os.W_OK):
        raise InvalidInput(f"folder {folder} is not writable; export elsewhere")
    return path


def export_labels(store: Store, fmt: str, path: str | Path) -> ExportResult:
    """Write the store's current labels in format `trl`, `soft` or `rankings`; the file appears whole or not at all."""
    if fmt not in FORMATS:
        raise InvalidInput(f"unknown export format {str(fmt)[:20]!r}; use {', '.join(FORMATS)}")
    path = check_export_path(path)
    if fmt == "rankings":
        return _export_rankings(store, path)
    verdicts = ranking_verdicts(store, include_skips=True, training=True)
    ranked = {v.label_id: v.ranking_id for v in verdicts}
    labels = training_labels(store, include_skips=True) + [lp for v in verdicts for lp in comparison_pairs(v)]
    counts = {outcome: sum(row.outcome is outcome for row in labels) for outcome in Outcome}
    conversational = any(row.prompt_messages is not None for row in labels)
    if fmt == "trl":
        rows = _trl_rows(labels, conversational)
    else:
        rows = [_soft_row(row, conversational) for row in labels]
        _add_pair_notes(store, rows, labels)
        if ranked:
            for row, label in zip(rows, labels, strict=True):
                row["ranking_id"] = ranked[label.label_id] if label.pair_id is None else None
    if not rows and labels:
        raise InvalidInput("nothing to export in the trl format: no label prefers one response; use --format soft")
    if not rows:
        raise InvalidInput("nothing to export: the store has no labels yet; label some pairs first")
    schema = _schema(fmt, conversational)
    extra = {"margin": pa.float64(), "ranking_id": pa.int64(), **NOTE_COLUMNS}
    for column, kind in extra.items():
        if column in rows[0] and column not in schema.names:
            schema = schema.append(pa.field(column, kind))
    _write_atomically(path, rows, schema)
    return ExportResult(path, fmt, len(rows), counts[Outcome.TIE], counts[Outcome.BOTH_BAD], counts[Outcome.SKIP])


def _export_rankings(store: Store, path: Path) -> ExportResult:
    verdicts = ranking_verdicts(store, include_skips=True, training=True)  # none on gold, none of the left out
    kept = [v for v in verdicts if v.outcome != SKIP]
    if not kept:
        raise InvalidInput("nothing to export in the rankings format: the store has no ranking orders yet; "
                           "use --format trl or soft for pairs")
    conversational = any(v.prompt_messages is not None for v in kept)
    rows = [_ranking_row(v, conversational) for v in kept]
    schema = _schema("rankings", conversational)
    notes = notes_by_label(store)
    if any(("ranking", v.label_id) in notes for v in kept):
        schema = schema.append(pa.field("rationale", pa.string())).append(pa.field("ratings", pa.list_(pa.int64())))
        for row, verdict in zip(rows, kept, strict=True):
            note = notes.get(("ranking", verdict.label_id))
            row["rationale"] = note.rationale if note else None
            row["ratings"] = ([note.ratings.get(g) for g in verdict.generation_ids] if note and note.ratings
                              else None)
    _write_atomically(path, rows, schema)
    ties = sum(len(row["ties"]) > 0 for row in rows)
    return ExportResult(path, "rankings", len(rows), ties, sum(v.outcome == ALL_BAD for v in kept),
                        len(verdicts) - len(kept))


NOTE_COLUMNS = {"rationale": pa.string(), "ratings": pa.list_(pa.int64())}


def _add_pair_notes(store: Store, rows: list[dict], labels: list[LabeledPair]) -> None:
    """With any note on a pair label: `rationale` and `ratings` ([first, second], 1-7) columns on every soft row."""
    notes = notes_by_label(store)
    if not any(("pair", label.label_id) in notes for label in labels if label.pair_id is not None):
        return
    for row, label in zip(rows, labels, strict=True):
        note = notes.get(("pair", label.label_id)) if label.pair_id is not None else None
        row["rationale"] = note.rationale if note else None
        row["ratings"] = None
        if note and note.ratings:
            pair = get_pair(store, label.pair_id)
            row["ratings"] = [note.ratings.get(pair.first_id), note.ratings.get(pair.second_id)]


def _ranking_row(verdict: LabeledRanking, conversational: bool) -> dict:
    tiers = verdict.tiers or []
    prompt = (verdict.prompt_messages or [{"role": "user", "content": verdict.prompt}]) if conversational \
        else verdict.prompt
    return {"ranking_id": verdict.ranking_id, "label_id": verdict.label_id, "annotator": verdict.annotator,
            "prompt": prompt, "responses": [_response(text, conversational) for text in verdict.responses],
            "order": [p for tier in tiers for p in tier], "ties": [tier for tier in tiers if len(tier) > 1],
            "all_bad": verdict.outcome == ALL_BAD}


def _prompt(row: LabeledPair, conversational: bool) -> str | list[dict]:
    """The prompt as text, or as turns in a conversational export (a text prompt is one user turn)."""
    if not conversational:
        return row.prompt
    return row.prompt_messages or [{"role": "user", "content": row.prompt}]


def _response(text: str, conversational: bool) -> str | list[dict]:
    """A response as text, or as one assistant turn in a conversational export."""
    return [{"role": "assistant", "content": text}] if conversational else text


def _trl_rows(labels: list[LabeledPair], conversational: bool) -> list[dict]:
    decided = [row for row in labels if row.outcome in (Outcome.FIRST, Outcome.SECOND)]
    with_margin = any(row.margin is not None for row in decided)
    rows = []
    for row in decided:
        chosen, rejected = (row.first, row.second) if row.outcome is Outcome.FIRST else (row.second, row.first)
        item = {"prompt": _prompt(row, conversational), "chosen": _response(chosen, conversational),
                "rejected": _response(rejected, conversational)}
        if with_margin:
            item["margin"] = 0.0 if row.margin is None else row.margin
        rows.append(item)
    return rows


def _soft_row(row: LabeledPair, conversational: bool) -> dict:
    return {"label_id": row.label_id, "pair_id": row.pair_id, "annotator": row.annotator,
            "prompt": _prompt(row, conversational), "first": _response(row.first, conversational),
            "second": _response(row.second, conversational), "outcome": row.outcome.value,
            "target": row.outcome.target(), "margin": row.margin}


def _write_atomically(path: Path, rows: list[dict], schema: pa.Schema | None) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        if path.suffix.lower() == ".parquet":
            pq.write_table(pa.Table.from_pylist(rows, schema=schema), tmp)
        else:
            with tmp.open("w", encoding="utf-8") as f:
                for row in rows:
                    f.write(json.dumps(row, ensure_ascii=False) + "\n")
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        raise InvalidInput(f"cannot write {path}: {exc.strerror}; check the disk and the folder's permissions") from exc
    finally:
        tmp.unlink(missing_ok=True)
