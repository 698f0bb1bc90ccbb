"""The users of a studio served with `--auth FILE`: one `name:scrypt$N$r$p$salt$hash` line per user (`:admin` at
the end for admins; `#` comments and blank lines are kept). Passwords are never stored in the file: `python app.py
add-user` writes a hash, `python app.py hash-auth` converts a plain-text `name:password[:admin]` file in place.

`read_auth_file` gives a snapshot (`Users`); a running studio holds an `AuthFile`, which re-reads the file when
it changes, so a removed user or a new password takes effect without a restart. Names are compared as
`labeling.queue.annotation.normal_name` makes them (NFC): two spellings of `zoé` are one user, in the file, at login and
in `add-user`.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from labeling.queue.annotation import normal_name
from storage.errors import InvalidInput

from .passwords import DEFAULT_COST, ScryptCost, dummy_entry, hash_password, is_hashed, parse_entry, verify_password

ADMIN = "admin"
MAX_NAME_CHARS = 64
FILE_MODE = 0o600  # the hashes are secrets too: only the studio's OS user reads the file


@dataclass(frozen=True)
class AuthLine:
    """One user's line: name, secret (a hash entry, or a plain-text password in a file not converted yet), admin."""

    name: str
    secret: str
    admin: bool

    def text(self) -> str:
        return f"{self.name}:{self.secret}" + (f":{ADMIN}" if self.admin else "")


@dataclass(frozen=True)
class Users:
    """A snapshot of the auth file: each user's hash entry, and who is an admin."""

    entries: dict[str, str]
    admins: frozenset[str]

    def verify(self, name: str, password: str) -> bool:
        """Whether the password is the user's. An unknown name costs one hash too (against a fixed dummy entry at
        the file's usual cost), so the answer and the time taken do not tell which names exist."""
        name = normal_name(name)
        known = name in self.entries
        matched = verify_password(password, self.entries[name] if known else self.dummy)
        return known and matched

    def is_admin(self, name: str | None) -> bool:
        return name is not None and normal_name(name) in self.admins

    @cached_property
    def dummy(self) -> str:
        costs = Counter(parse_entry(entry)[0] for entry in self.entries.values())
        return dummy_entry(costs.most_common(1)[0][0] if costs else DEFAULT_COST)


def parse_auth_file(path: Path) -> list[AuthLine | str]:
    """The file's lines: users as AuthLine (names NFC), comments and blank lines as their text. A malformed line, a
    name given twice (in either spelling) or a bad hash is an error naming the line (secrets are never echoed)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise InvalidInput(f"auth file {path} does not exist; create it with `python app.py add-user --auth {path} "
                           "NAME`") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"cannot read auth file {path} ({exc}); it must be a UTF-8 text file") from None
    parsed: list[AuthLine | str] = []
    names = set()
    for line_no, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            parsed.append(line)
            continue
        parts = line.strip().split(":")
        if len(parts) not in (2, 3) or not parts[0] or not parts[1] or (len(parts) == 3 and parts[2] != ADMIN):
            raise InvalidInput(f"auth file {path} line {line_no}: expected `name:HASH` or `name:HASH:admin` "
                               f"(add users with `python app.py add-user --auth {path} NAME`)")
        parts[0] = normal_name(parts[0])
        if parts[0] in names:
            raise InvalidInput(f"auth file {path} line {line_no}: user {parts[0]!r} is listed twice; keep one line")
        if is_hashed(parts[1]):
            try:
                parse_entry(parts[1])
            except ValueError as exc:
                raise InvalidInput(f"auth file {path} line {line_no}: bad password hash ({exc}); set the password "
                                   f"again with `python app.py add-user --auth {path} {parts[0]}`") from None
        names.add(parts[0])
        parsed.append(AuthLine(parts[0], parts[1], len(parts) == 3))
    return parsed


def read_auth_file(path: str | Path) -> Users:
    """The users of a hashed auth file; a file holding any plain-text password is refused."""
    path = Path(path)
    users = [line for line in parse_auth_file(path) if isinstance(line, AuthLine)]
    if not users:
        raise InvalidInput(f"auth file {path} lists no users; add one with `python app.py add-user --auth {path} NAME`")
    if any(not is_hashed(user.secret) for user in users):
        raise InvalidInput(f"auth file {path} holds plain-text passwords; hash them in place with "
                           f"`python app.py hash-auth {path}`")
    return Users({u.name: u.secret for u in users}, frozenset(u.name for u in users if u.admin))


def check_user_name(name: str) -> str:
    """The name as stored (NFC), after checking it can be a login name."""
    if (not name or name != name.strip() or ":" in name or name.startswith("#") or not name.isprintable()
            or len(name) > MAX_NAME_CHARS):
        raise InvalidInput(f"user name {name[:MAX_NAME_CHARS]!r} is not allowed; use up to {MAX_NAME_CHARS} letters, "
                           "digits and punctuation other than `:`, without spaces at either end")
    return normal_name(name)


def add_user(path: str | Path, name: str, password: str, admin: bool = False, cost: ScryptCost = DEFAULT_COST) -> bool:
    """Set `name`'s password (a new hash) and admin flag, adding the user or replacing their line; the file is
    created (mode 0600) or rewritten atomically. Returns True when the user is new."""
    path, name = Path(path), check_user_name(name)
    if not password:
        raise InvalidInput("the password is empty; choose a password")
    lines = parse_auth_file(path) if path.exists() else []
    if any(isinstance(line, AuthLine) and not is_hashed(line.secret) for line in lines):
        raise InvalidInput(f"auth file {path} holds plain-text passwords; hash them first with "
                           f"`python app.py hash-auth {path}`")
    entry = AuthLine(name, hash_password(password, cost), admin)
    new = not any(isinstance(line, AuthLine) and line.name == name for line in lines)
    lines = [entry if isinstance(line, AuthLine) and line.name == name else line for line in lines]
    write_auth_file(path, lines + [entry] if new else lines)
    return new


def hash_auth_file(path: str | Path, cost: ScryptCost = DEFAULT_COST) -> int:
    """Replace every plain-text password of the file by its hash (admins, comments and order kept), atomically;
    returns how many were converted."""
    path = Path(path)
    lines = parse_auth_file(path)
    plain = [line for line in lines if isinstance(line, AuthLine) and not is_hashed(line.secret)]
    if plain:
        write_auth_file(path, [AuthLine(line.name, hash_password(line.secret, cost), line.admin)
                               if line in plain else line for line in lines])
    return len(plain)


def write_auth_file(path: Path, lines: list[AuthLine | str]) -> None:
    """Write the whole file at once (a temporary file beside it, then a rename), readable by its owner only."""
    text = "".join((line.text() if isinstance(line, AuthLine) else line) + "\n" for line in lines)
    try:
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as exc:
        raise InvalidInput(f"cannot write auth file {path} ({exc.strerror}); check the folder exists and is "
                           "writable") from None
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, FILE_MODE)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


class AuthFile:
    """The auth file of a running studio: its users, re-read whenever the file changes (checked at each call, a
    `stat`). A file that turns unreadable or malformed keeps the last good users, with a warning on stderr."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._signature = self._stat()  # before reading: a change made meanwhile is read at the next call
        self._users = read_auth_file(self.path)
        self._warned: tuple | None = None

    def _stat(self) -> tuple | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    def users(self) -> Users:
        """The current users (re-read first when the file changed)."""
        signature = self._stat()
        if signature == self._signature:
            return self._users
        with self._lock:
            if signature != self._signature:
                try:
                    self._users, self._signature = read_auth_file(self.path), signature
                except InvalidInput as exc:
                    if self._warned != signature:
                        print(f"warning: {exc}; the studio keeps the users it had", file=sys.stderr)
                        self._warned = signature
            return self._users

    def verify(self, name: str, password: str) -> bool:
        return self.users().verify(name, password)

    def is_admin(self, name: str | None) -> bool:
        return self.users().is_admin(name)
