"""`python app.py label --annotator oracle --n N`: label N queued pairs with a synthetic annotator, headless.

The oracle goes through the Label tab's code path (`labeling.annotation`), so its labels are stored exactly like a
person's, under the annotator name `oracle`.
"""

from __future__ import annotations

import argparse
from typing import Callable

from storage import Store
from storage.errors import InvalidInput

from .synthetic import DEFAULT_ORACLE, OracleAnnotator


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--annotator", choices=("oracle",), default="oracle", help="synthetic annotator (oracle)")
    parser.add_argument("--n", type=int, required=True, help="number of queued pairs to label")
    parser.add_argument("--oracle", default=DEFAULT_ORACLE,
                        help=f"module:function scoring a response text; higher wins (default {DEFAULT_ORACLE})")
    parser.add_argument("--noise", type=float, default=0.0, help="fraction of random left/right votes (default 0)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the noise and of the screen sides")


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
