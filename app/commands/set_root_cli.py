"""`python app.py set-root vK`: make a version the SFT policy by hand (the Train tab's button is
`app.train.root_action`'s). Import-light (no Gradio, no torch), as every subcommand's argument builder must be: `python
app.py --help` builds them all.

    python app.py set-root v3 --db studio.db
"""

from __future__ import annotations

import argparse

from labeling.versions.sft_policy import set_root
from storage import Store


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("version", help="the version to make the SFT policy, as vK (python app.py leaderboard lists "
                                        "them)")
    parser.add_argument("--db", default="studio.db", help="store file")


def run(args: argparse.Namespace, store: Store) -> int:
    print(set_root(store, args.version))
    return 0
