"""`python app.py export --db PATH --format trl|soft|rankings|sft|prompts --out FILE`: write the labels (with
`rankings`, whole ranking verdicts; with `sft`, the demonstrations; with `prompts`, the prompts with their references)
for training elsewhere.

The store must exist (an export never creates one); the output is .jsonl or .parquet, written whole or not at all.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from labeling.demonstrations.demonstration_export import export_demonstrations
from labeling.transfer.export import FORMATS, check_export_path, export_labels
from labeling.transfer.prompt_export import PROMPTS_FORMAT, export_prompts
from storage import Store
from storage.errors import InvalidInput

SFT = "sft"  # the demonstrations' format (labeling.demonstrations.demonstration_export)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", default="studio.db", help="store file to export from")
    parser.add_argument("--format", choices=(*FORMATS, SFT, PROMPTS_FORMAT), default="trl",
                        help="trl: {prompt, chosen, rejected} rows without ties, both-bad and skips; "
                             "soft: every label with its outcome, target (1, 0, 0.5) and annotator; "
                             "sft: the demonstrations as {prompt, completion} rows (TRL's SFT format); "
                             "prompts: {prompt, <reference fields>} rows, the training prompts; "
                             "rankings: every ranking verdict whole {prompt, responses, order, ties, all_bad}")
    parser.add_argument("--heldout", action="store_true",
                        help="with --format prompts: the held-out prompts instead of the training ones")
    parser.add_argument("--out", required=True, help="output file, .jsonl or .parquet (both load with `datasets`)")


def run(args: argparse.Namespace) -> int:
    out = check_export_path(args.out)
    if not Path(args.db).is_file():
        raise InvalidInput(f"store {args.db} does not exist; pass the --db of a studio that has labels")
    if args.heldout and args.format != PROMPTS_FORMAT:
        raise InvalidInput("--heldout goes with --format prompts (labels have no held-out share); drop one")
    if args.format == SFT:
        result = export_demonstrations(Store(args.db), out)
    elif args.format == PROMPTS_FORMAT:
        result = export_prompts(Store(args.db), out, heldout=args.heldout)
    else:
        result = export_labels(Store(args.db), args.format, out)
    print(result.summary())
    return 0
