"""`python app.py import-demonstrations --db PATH FILE [--source NAME]`: demonstrations in TRL's SFT formats
(`labeling.demonstrations.demonstration_formats`) into the store, all of them or none; those too long for the project's
policy are kept, counted and named, and left out of SFT (`trainers.jobs.sft_data`)."""

from __future__ import annotations

import argparse
from typing import Callable

from labeling.demonstrations.demonstration_import import check_demonstration_file, import_demonstration_file
from labeling.transfer.preference_import import default_source
from storage import Store
from storage.policies import latest_policy


def add_import_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help=".jsonl, .jsonl.gz or .parquet file, or a datasets save_to_disk folder, of "
                                     "{prompt, completion} or {messages} rows")
    parser.add_argument("--source", default=None, help="author name of the demonstrations (default: the file's name)")


def import_notes(store: Store, ids: tuple[int, ...], source: str) -> list[str]:
    """What the import says about demonstrations SFT leaves out (too long for the newest policy, or of excluded
    prompts); empty when all of them train."""
    from trainers.jobs.sft_data import demonstration_use  # no torch

    policy = latest_policy(store)
    if policy is None or not ids:
        return []
    use = demonstration_use(store, policy.path, ids=ids)
    if len(use.used) == use.total:
        return []
    return [f"{use.line(f' by {source}')}; the others are kept (exports keep them) and never cut"]


def run_import(args: argparse.Namespace, open_store: Callable[[argparse.Namespace], Store]) -> int:
    path = check_demonstration_file(args.file)
    store = open_store(args)
    result = import_demonstration_file(store, path, args.source or default_source(path))
    print(result.summary())
    for note in import_notes(store, result.ids, result.source):
        print(note)
    return 0
