"""Options that name a policy version: `--policy v3`, as the Leaderboard, `status` and every command's output name
versions. Policy ids stay inside the store; a bare number is the old spelling (it was the id) and is still read as
the id, with a note on stderr naming the version it is, so the next command line can be written the new way.

    add_version_option(parser, VersionOption("--policy", "policy_id", "the version to train", ("--policy-id",)))
    run.policy_id = version_id(store, args.policy_id_version, "--policy")   # None when left out
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from labeling.versions.winrate import named_version, version_names
from storage import Store
from storage.errors import InvalidInput
from storage.policies import list_policies


@dataclass(frozen=True)
class VersionOption:
    """A command-line option that names a policy version and sets the run's id field `field`."""

    flag: str  # "--policy"
    field: str  # the run's or config's field it sets: "policy_id"
    help: str  # what the version is for, e.g. "the version to train (default: the newest)"
    old_flags: tuple[str, ...] = ()  # earlier spellings of the option (they took a policy id)

    @property
    def dest(self) -> str:
        return f"{self.field}_version"


def add_version_option(parser: argparse.ArgumentParser, option: VersionOption) -> None:
    parser.add_argument(option.flag, *option.old_flags, dest=option.dest, metavar="vK", default=None,
                        help=f"{option.help}, as the Leaderboard names it: vK, e.g. v3")


def version_id(store: Store, text: str | None, flag: str) -> int | None:
    """The policy id of the version `text` names (`v3`; a bare number is the old spelling, a policy id, taken with a
    note); None when `text` is None. An unknown version: InvalidInput naming the versions there are."""
    if text is None:
        return None
    policies = list_policies(store)
    names = version_names(policies)
    known = f"versions: v0 to v{len(policies) - 1}" if policies else "the store holds no policy yet"
    if text.strip().isdigit():
        policy_id = int(text)
        if policy_id not in names:
            raise InvalidInput(f"{flag} {text}: no policy id {policy_id} ({known}); name a version as vK, e.g. "
                               f"{flag} v{max(0, len(policies) - 1)}")
        print(f"note: {flag} {text} is read as policy id {policy_id}, which is {names[policy_id]}; write "
              f"{flag} {names[policy_id]} (a bare number is the old spelling)", file=sys.stderr)
        return policy_id
    named = named_version(policies, text)
    if named is None:
        raise InvalidInput(f"{flag} {text}: no such version ({known}); name one as vK, e.g. "
                           f"{flag} v{max(0, len(policies) - 1)}")
    return named.id
