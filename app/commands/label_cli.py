"""`python app.py label --annotator oracle --n N`: label N queued pairs with a synthetic annotator, headless.

The oracle goes through the Label tab's code path (`labeling.queue.annotation`), so its labels are stored exactly like a
person's, under the annotator name `oracle`. `--annotator judge --judge PATH_OR_URL` has a judge model label them
instead (`app.commands.judge_cli`, which may load a local model): its verdicts are stored apart from labels
(`storage.judge_verdicts`).
"""

from __future__ import annotations

import argparse
from typing import Callable

from labeling.judges.judge_endpoint import DEFAULT_MAX_MB, DEFAULT_TIMEOUT_S
from labeling.queue.synthetic import DEFAULT_ORACLE, OracleAnnotator
from storage import Store
from storage.errors import InvalidInput


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--annotator", choices=("oracle", "judge"), default="oracle",
                        help="synthetic annotator: oracle (a scoring function), or judge (a judge model, --judge)")
    parser.add_argument("--n", type=int, required=True, help="number of queued pairs to label")
    parser.add_argument("--oracle", default=DEFAULT_ORACLE,
                        help=f"module:function scoring a response text; higher wins (default {DEFAULT_ORACLE})")
    parser.add_argument("--noise", type=float, default=0.0, help="fraction of random left/right votes (default 0)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the noise and of the screen sides")
    add_judge_arguments(parser)


def add_judge_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `--annotator judge`."""
    parser.add_argument("--judge", default=None, metavar="PATH_OR_URL",
                        help="the judge: a model folder or GGUF file, or an OpenAI-compatible endpoint's URL")
    parser.add_argument("--judge-model", default=None, metavar="NAME", help="the model an endpoint judge serves")
    parser.add_argument("--judge-key-env", default=None, metavar="VAR",
                        help="environment variable holding the endpoint's key (the key is never stored or logged)")
    parser.add_argument("--judge-template", default=None, metavar="FILE",
                        help="judge prompt template (default: the shipped MT-Bench pairwise one, "
                             "assets/judge_pairwise.md)")
    parser.add_argument("--judge-timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="S",
                        help="seconds an endpoint judge has for each answer, connection to last byte (default: "
                             "%(default)g)")
    parser.add_argument("--judge-max-mb", type=float, default=DEFAULT_MAX_MB, metavar="MB",
                        help="the largest answer read from an endpoint judge; a larger one stops the run "
                             "(default: %(default)g)")
    parser.add_argument("--min-confidence", type=float, default=0.0,
                        help="verdicts at least this confident train; the others are left to people (default 0)")
    parser.add_argument("--suggest-only", action="store_true",
                        help="pre-label for people: the verdicts are shown in the Label tab and never train")


def check_args(args: argparse.Namespace) -> OracleAnnotator:
    """The annotator the arguments describe; raises InvalidInput before the store is touched."""
    if args.n < 0:
        raise InvalidInput(f"--n must be 0 or more, got {args.n}")
    return OracleAnnotator.from_spec(args.oracle, noise=args.noise, seed=args.seed, name=args.annotator)


def run(args: argparse.Namespace, open_store: Callable[[argparse.Namespace], Store]) -> int:
    """Check the arguments, then open the store (`open_store(args)`) and label; bad input leaves it untouched."""
    annotator = check_args(args)
    labeled = annotator.label(open_store(args), args.n)
    more = "" if len(labeled) == args.n else f" (the queue ran out after {len(labeled)})"
    print(f"{annotator.name} labeled {len(labeled)} pairs{more}")
    return 0
