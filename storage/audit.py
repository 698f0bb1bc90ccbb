"""The audit trail: one row per admin action (start, stop or resume a job; queue settings; imports; exports) with
who acted (a login name, or `cli:<OS user>` for a terminal command), when, and what changed as a short JSON
object. `record_action` is its only writer; rows are never edited."""

from __future__ import annotations

import enum
import json
import time
from dataclasses import dataclass

from .db import Store

MAX_TEXT = 200  # a string in a detail is cut to this many characters: the trail says what changed, briefly


class AuditAction(str, enum.Enum):
    JOB_STARTED = "job_started"
    JOB_STOPPED = "job_stopped"
    JOB_RESUMED = "job_resumed"
    QUEUE_SETTINGS_CHANGED = "queue_settings_changed"
    PROMPTS_IMPORTED = "prompts_imported"
    PROMPT_EXCLUSIONS_CHANGED = "prompt_exclusions_changed"  # prompts excluded from sampling or included again
    PREFERENCES_IMPORTED = "preferences_imported"
    DEMONSTRATIONS_IMPORTED = "demonstrations_imported"
    PROJECT_STARTED = "project_started"
    LABELS_EXPORTED = "labels_exported"
    SYNTHETIC_LABELS_ADDED = "synthetic_labels_added"
    AUDIT_EXPORTED = "audit_exported"
    GOLD_IMPORTED = "gold_imported"
    GOLD_CHANGED = "gold_changed"  # a pair marked gold, a flag lifted, the gold settings
    ROOT_SET = "root_set"  # a version made a root by hand (set-root, the Train tab's Make root)


@dataclass(frozen=True)
class AuditEntry:
    id: int
    at: float  # seconds since the epoch
    actor: str
    action: AuditAction
    detail: dict


def _short(value):
    """The value with long strings cut (lists and objects too, recursively)."""
    if isinstance(value, str) and len(value) > MAX_TEXT:
        return value[:MAX_TEXT - 1] + "…"
    if isinstance(value, dict):
        return {str(k): _short(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_short(v) for v in value]
    return value


def record_action(store: Store, actor: str, action: AuditAction, detail: dict | None = None,
                  at: float | None = None) -> int:
    """Append one row (at = now unless given); returns its id."""
    with store.write() as db:
        cursor = db.execute("INSERT INTO audit (at, actor, action, detail) VALUES (?, ?, ?, ?)",
                            [time.time() if at is None else at, actor, AuditAction(action).value,
                             json.dumps(_short(detail or {}), default=str, ensure_ascii=False)])
        return cursor.lastrowid


def list_actions(store: Store, limit: int | None = None) -> list[AuditEntry]:
    """The newest rows first (all of them unless `limit`)."""
    rows = store.db().execute("SELECT id, at, actor, action, detail FROM audit ORDER BY at DESC, id DESC LIMIT ?",
                              [-1 if limit is None else limit]).fetchall()
    return [AuditEntry(i, at, actor, AuditAction(action), json.loads(detail)) for i, at, actor, action, detail in rows]
