"""The store: one SQLite file opened through sqlite-utils, WAL mode, migrated forward on open.

Connections are per thread (sqlite3 connections cannot be shared across Gradio's worker threads).
Writes go through `write()`, a `BEGIN IMMEDIATE` transaction, so two writers never deadlock on a lock upgrade.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from pathlib import Path
from typing import Iterator

from sqlite_utils import Database

from .errors import NotAStudioStore, StoreFromNewerVersion, StoreUnavailable
from .migrations import migrations

BUSY_TIMEOUT_MS = 5000
SQLITE_MAGIC = b"SQLite format 3\x00"


class Store:
    """Handle on a studio store file. Cheap to create; opens one connection per thread on demand."""

    def __init__(self, path: str | os.PathLike, busy_timeout_ms: int = BUSY_TIMEOUT_MS, migrate: bool = True):
        self.path = Path(path).absolute()  # checkpoints registered under data_dir stay valid from any working folder
        self.busy_timeout_ms = busy_timeout_ms
        self._local = threading.local()
        self.created = False
        _check_file(self.path)
        if migrate:
            self.created = not self.path.exists() or self.path.stat().st_size == 0
            self.migrate()

    @property
    def data_dir(self) -> Path:
        """Folder beside the store for checkpoints, exports and uploads (`studio.db` -> `studio-data/`)."""
        return self.path.parent / f"{self.path.stem}-data"

    def db(self) -> Database:
        """This thread's connection (opened on first use)."""
        db = getattr(self._local, "db", None)
        if db is None or getattr(self._local, "pid", None) != os.getpid():
            db = self._local.db = _connect(self.path, self.busy_timeout_ms)
            self._local.pid = os.getpid()
        return db

    def close(self) -> None:
        db = getattr(self._local, "db", None)
        if db is not None:
            db.conn.close()
            self._local.db = None

    @contextlib.contextmanager
    def write(self) -> Iterator[Database]:
        """A write transaction taken with BEGIN IMMEDIATE: all of it is stored, or none of it."""
        db = self.db()
        try:
            if db.conn.in_transaction:  # nested: a savepoint inside the outer transaction
                with db.atomic():
                    yield db
                return
            db.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise _unavailable(self.path, exc) from exc
        try:
            yield db
            db.conn.execute("COMMIT")
        except BaseException as exc:
            if db.conn.in_transaction:
                db.conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.OperationalError):
                raise _unavailable(self.path, exc) from exc
            raise

    def migrate(self) -> None:
        """Apply pending migrations; refuse foreign files and stores from a newer version, untouched."""
        if self.path.exists() and self.path.stat().st_size > 0:
            _check_schema(self.path)  # read-only: a refused file is never modified, not even its journal mode
        try:
            migrations.apply(self.db())
        except sqlite3.OperationalError as exc:
            raise _unavailable(self.path, exc) from exc


def copy_store(source: str | os.PathLike, target: str | os.PathLike) -> None:
    """Copy a store file with SQLite's online backup (a consistent copy even while others write to it); the data
    folder beside it is not copied."""
    source_db, target_db = sqlite3.connect(source), sqlite3.connect(target)
    try:
        source_db.backup(target_db)
    finally:
        source_db.close()
        target_db.close()


def _check_schema(path: Path) -> None:
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            db = Database(conn)
            tables = set(db.table_names())
            applied = {m.name for m in migrations.applied(db)} if "_sqlite_migrations" in tables else set()
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise _unavailable(path, exc) from exc
    if tables and not applied:
        raise NotAStudioStore(f"{path} is a SQLite file but not an RLHF Studio store; choose another --db path")
    unknown = applied - {m.name for m in migrations._migrations}
    if unknown:
        raise StoreFromNewerVersion(
            f"{path} was written by a newer RLHF Studio (migration {sorted(unknown)[0]}); upgrade the studio to open it"
        )


def _check_file(path: Path) -> None:
    if path.is_dir():
        raise StoreUnavailable(f"{path} is a folder; give a file path for --db, such as {path / 'studio.db'}")
    if path.exists() and path.stat().st_size > 0:
        try:
            with path.open("rb") as f:
                head = f.read(16)
        except OSError as exc:
            raise StoreUnavailable(f"cannot read {path}: {exc.strerror}; check its permissions") from exc
        if head != SQLITE_MAGIC:
            raise NotAStudioStore(f"{path} is not a SQLite file, so not an RLHF Studio store; choose another --db path")
    elif not path.exists():
        parent = path.parent if str(path.parent) else Path(".")
        if not parent.is_dir():
            raise StoreUnavailable(f"folder {parent} does not exist; create it or choose another --db path")
        if not os.access(parent, os.W_OK):
            raise StoreUnavailable(f"cannot create {path}: folder {parent} is not writable; choose another --db path")


def _connect(path: Path, busy_timeout_ms: int) -> Database:
    try:
        conn = sqlite3.connect(str(path), timeout=busy_timeout_ms / 1000, check_same_thread=False)
        db = Database(conn)
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA synchronous = FULL")
        if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            conn.execute("PRAGMA journal_mode = WAL")
    except sqlite3.DatabaseError as exc:
        raise _unavailable(path, exc) from exc
    return db


def _unavailable(path: Path, exc: sqlite3.Error) -> StoreUnavailable:
    message = str(exc)
    if "locked" in message or "busy" in message:
        return StoreUnavailable(f"the store {path} is locked by another process; wait for it to finish and retry")
    if "readonly" in message or "read-only" in message:
        return StoreUnavailable(f"the store {path} is read-only; fix its permissions (and its folder's) and retry")
    if "full" in message:
        return StoreUnavailable(f"the disk holding {path} is full; free some space and retry")
    if "not a database" in message or "malformed" in message:
        return StoreUnavailable(f"{path} is damaged or not a SQLite file; restore it from a backup or choose "
                                "another --db path")
    return StoreUnavailable(f"the store {path} cannot be used: {message}")
