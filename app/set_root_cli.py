"""`python app.py set-root vK`: make a version the SFT policy by hand (the Train tab's button is `app.root_action`'s).
Import-light (no Gradio, no torch), as every subcommand's argument builder must be: `python app.py --help` builds
them all.

    python app.py set-root v3 --db studio.db
"""

from __future__ import annotations

import argparse

from labeling.winrate import version_names, version_number
from storage import Store
from storage.errors import Conflict, NotFound
from storage.policies import get_policy, list_policies, make_root


def set_root(store: Store, version: str) -> str:
    """Make `version` (`vK` or `K`) a root; returns the line saying so. NotFound, Conflict: one line."""
    number = version_number(version or "")
    names = version_names(list_policies(store))
    policy_id = next((pid for pid, name in names.items() if name == f"v{number}"), None)
    if policy_id is None:
        known = f"v0–v{len(names) - 1}" if names else "none yet"
        raise NotFound(f"no policy version {version!r} (versions: {known}); name one as vK, e.g. v1")
    if get_policy(store, policy_id).parent_id is None:
        raise Conflict(f"v{number} is already an SFT policy; nothing to change")
    make_root(store, policy_id)
    return (f"v{number} is now the SFT policy: later versions trained from it stay close to it (the KL term, DPO's "
            "reference) and win-rate pairs compare against it")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("version", help="the version to make the SFT policy, as vK (python app.py leaderboard lists "
                                        "them)")
    parser.add_argument("--db", default="studio.db", help="store file")


def run(args: argparse.Namespace, store: Store) -> int:
    print(set_root(store, args.version))
    return 0
