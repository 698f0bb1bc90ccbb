"""The audit trail as people read it: rows for the Data tab, and a CSV file (the tab's download,
`python app.py audit --db PATH --out FILE.csv`). Who acts in a terminal is `cli:<OS user>`; in a studio
without `--auth`, `local admin (<OS user>)`.

A spreadsheet runs a cell that starts with `=`, `+`, `-`, `@`, a tab or a carriage return as a formula, and user
names are chosen by users: in the CSV file such a cell starts with `'`, which makes it text (OWASP's advice on CSV
injection). The trail itself keeps the names as they are."""

from __future__ import annotations

import csv
import getpass
import json
import os
import tempfile
from datetime import datetime
from pathlib import Path

from storage import Store
from storage.audit import AuditEntry, list_actions
from storage.errors import InvalidInput

HEADERS = ["time", "user", "action", "detail"]
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # OWASP's list: a cell starting so is read as a formula

ACTOR_VARIABLE = "STUDIO_ACTOR"  # set by the studio when it runs a command for a signed-in user (Data tab: init)


def os_user() -> str:
    """The name of the OS user this process runs as (`uid-N` when the uid has none)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (e.g. a container without /etc/passwd entry)
        return f"uid-{os.getuid()}"


def terminal_actor() -> str:
    """Who runs a command in a terminal, for the audit trail: `cli:<OS user>`, or the signed-in user the studio
    runs it for (`STUDIO_ACTOR`)."""
    return os.environ.get(ACTOR_VARIABLE) or f"cli:{os_user()}"


def studio_actor(username: str | None) -> str:
    """Who acts in the studio, for the audit trail: the signed-in user, or without --auth (a studio on this machine,
    where anyone at it is an admin) `local admin (<OS user the studio runs as>)`."""
    return username or f"local admin ({os_user()})"


def audit_row(entry: AuditEntry) -> list[str]:
    """time (local, ISO 8601 with its UTC offset), user, action, detail (JSON)."""
    when = datetime.fromtimestamp(entry.at).astimezone().isoformat(timespec="seconds")
    return [when, entry.actor, entry.action.value, json.dumps(entry.detail, ensure_ascii=False)]


def audit_rows(store: Store, limit: int | None = None) -> list[list[str]]:
    """The newest actions first."""
    return [audit_row(entry) for entry in list_actions(store, limit)]


def csv_cell(text: str) -> str:
    """The text as a CSV cell that a spreadsheet shows as text, never runs as a formula."""
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def check_csv_path(path: str | Path, what: str = "audit file", option: str = "--out") -> Path:
    """A .csv file name in an existing folder (`what` and `option` name it in the error)."""
    path = Path(path)
    if path.suffix.lower() != ".csv":
        raise InvalidInput(f"{what} {path} must end in .csv")
    if not path.parent.is_dir():
        raise InvalidInput(f"folder {path.parent} does not exist; create it or choose another {option}")
    return path


def write_csv(path: Path, headers: list[str], rows: list[list]) -> None:
    """Write a CSV file whole or not at all; text cells go through `csv_cell`, numbers stay numbers (None: empty)."""
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w", newline="", encoding="utf-8") as out:
            writer = csv.writer(out)
            writer.writerow(headers)
            writer.writerows([csv_cell(cell) if isinstance(cell, str) else cell for cell in row] for row in rows)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_audit_csv(store: Store, path: str | Path) -> int:
    """Write the whole trail (newest first) as CSV, whole or not at all; returns the number of actions."""
    path = check_csv_path(path)
    rows = audit_rows(store)
    write_csv(path, HEADERS, rows)
    return len(rows)
