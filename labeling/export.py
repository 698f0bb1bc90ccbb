"""Label exports as files that `datasets.load_dataset` reads: `.jsonl` ("json" loader) or `.parquet`.

- `trl`: TRL's preference format, `{prompt, chosen, rejected}`, one row per current first/second label; ties,
  both-bad and skips are left out and counted. A `margin` column is added when imported labels carry margins
  (0.0, no margin, for the others).
- `soft`: every current label, skips included: `{label_id, pair_id, annotator, prompt, first, second, outcome,
  target, margin}` where `target` = P(first preferred): 1, 0, 0.5 for ties and both-bad, null for skips.

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

from storage import Store
from storage.errors import InvalidInput
from storage.labels import LabeledPair, training_labels
from storage.types import Outcome

FORMATS = ("trl", "soft")
SUFFIXES = (".jsonl", ".parquet")

MESSAGES = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))


def _schema(fmt: str, conversational: bool) -> pa.Schema:
    text = MESSAGES if conversational else pa.string()
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
    """Write the store's current labels in format `trl` or `soft`; the file appears whole or not at all."""
    if fmt not in FORMATS:
        raise InvalidInput(f"unknown export format {str(fmt)[:20]!r}; use trl or soft")
    path = check_export_path(path)
    labels = training_labels(store, include_skips=True)
    counts = {outcome: sum(row.outcome is outcome for row in labels) for outcome in Outcome}
    conversational = any(row.prompt_messages is not None for row in labels)
    rows = _trl_rows(labels, conversational) if fmt == "trl" else [_soft_row(row, conversational) for row in labels]
    if not rows and labels:
        raise InvalidInput("nothing to export in the trl format: no label prefers one response; use --format soft")
    if not rows:
        raise InvalidInput("nothing to export: the store has no labels yet; label some pairs first")
    schema = _schema(fmt, conversational)
    if fmt == "trl" and "margin" in rows[0]:
        schema = schema.append(pa.field("margin", pa.float64()))
    _write_atomically(path, rows, schema)
    return ExportResult(path, fmt, len(rows), counts[Outcome.TIE], counts[Outcome.BOTH_BAD], counts[Outcome.SKIP])


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


def _write_atomically(path: Path, rows: list[dict], schema: pa.Schema) -> None:
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
