"""`python app.py add-user` and `hash-auth`: the auth file's users, their passwords stored as salted scrypt hashes."""

from __future__ import annotations

import argparse
import getpass
import sys
from pathlib import Path

from storage.errors import InvalidInput


def read_new_password() -> str:
    """The new password, typed twice (hidden) at a terminal, or two lines of stdin from a script."""
    if sys.stdin.isatty():
        first, second = getpass.getpass("password: "), getpass.getpass("password again: ")
    else:
        first, second = sys.stdin.readline().rstrip("\r\n"), sys.stdin.readline().rstrip("\r\n")
    if first != second:
        raise InvalidInput("the two passwords differ; nothing was written, run the command again")
    if not first:
        raise InvalidInput("the password is empty; nothing was written, choose a password")
    return first


def run_add_user(args: argparse.Namespace) -> int:
    """Add the user, or set the password of one already in the file."""
    from app.auth import add_user, check_user_name, parse_auth_file

    check_user_name(args.name)
    if Path(args.auth).exists():
        parse_auth_file(Path(args.auth))  # a broken file is reported before the password is asked
    new = add_user(args.auth, args.name, read_new_password(), admin=args.admin)
    role = "admin" if args.admin else "annotator"
    print(f"{'added' if new else 'updated'} {role} {args.name} in {args.auth}")
    return 0


def run_hash_auth(args: argparse.Namespace) -> int:
    """Hash the file's plain-text passwords in place."""
    from app.auth import hash_auth_file

    print(f"hashed {hash_auth_file(args.file)} plain-text passwords in {args.file}")
    return 0
