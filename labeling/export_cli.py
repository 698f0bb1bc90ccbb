"""`python app.py export --db PATH --format trl|soft|rankings --out FILE`: write the labels for training elsewhere.

The store must exist (an export never creates one); the output is .jsonl or .parquet, written whole or not at all.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from storage import Store
from storage.errors import InvalidInput

from .export import FORMATS, check_export_path, export_labels


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", default="studio.db", help="store file to export from")
    parser.add_argument("--format", choices=FORMATS, default="trl",
                        help="trl: {prompt, chosen, rejected} rows without ties, both-bad and skips; "
                             "soft: every label with its outcome, target (1, 0, 0.5) and annotator; "
                             "rankings: every ranking verdict whole {prompt, responses, order, ties, all_bad}")
    parser.add_argument("--out", required=True, help="output file, .jsonl or .parquet (both load with `datasets`)")


def run(args: argparse.Namespace) -> int:
    out = check_export_path(args.out)
    if not Path(args.db).is_file():
        raise InvalidInput(f"store {args.db} does not exist; pass the --db of a studio that has labels")
    result = export_labels(Store(args.db), args.format, out)
    print(result.summary())
    return 0
