"""Users of a studio served with `--auth FILE`: lines `name:password` or `name:password:admin`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from storage.errors import InvalidInput


@dataclass(frozen=True)
class Users:
    passwords: dict[str, str]
    admins: frozenset[str]

    def check(self, name: str, password: str) -> bool:
        return name in self.passwords and self.passwords[name] == password

    def is_admin(self, name: str | None) -> bool:
        return name in self.admins


def read_auth_file(path: str | Path) -> Users:
    """Parse an auth file; a malformed line is an error naming the line (passwords are never echoed)."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise InvalidInput(f"auth file {path} does not exist; create it with one `name:password` line per user") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"cannot read auth file {path} ({exc}); it must be a UTF-8 text file") from None
    passwords: dict[str, str] = {}
    admins = set()
    for line_no, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.strip().split(":")
        if len(parts) not in (2, 3) or not parts[0] or not parts[1] or (len(parts) == 3 and parts[2] != "admin"):
            raise InvalidInput(f"auth file {path} line {line_no}: expected `name:password` or `name:password:admin`")
        if parts[0] in passwords:
            raise InvalidInput(f"auth file {path} line {line_no}: user {parts[0]!r} is listed twice; keep one line")
        passwords[parts[0]] = parts[1]
        if len(parts) == 3:
            admins.add(parts[0])
    if not passwords:
        raise InvalidInput(f"auth file {path} lists no users; add `name:password` lines")
    return Users(passwords, frozenset(admins))
