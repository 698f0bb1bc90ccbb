"""`python app.py label --annotator judge --judge PATH_OR_URL --n N`: a judge model labels N queued pairs (RLAIF).

Each pair is judged in both orders (`labeling.judges.judge`); the verdicts are stored apart from people's labels
(`storage.judge_verdicts`). By default every verdict at least `--min-confidence` sure trains (the user chose the judge
as annotator) and its pair leaves people's queue; with `--suggest-only` the verdicts are suggestions the Label tab
shows, and train nothing. Timeouts, refusals and unparseable answers are counted in the line printed at the end.
A local judge (a model folder or GGUF file) loads here, in the terminal's process, never in the serving one.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable

from labeling.judges.judge import JudgeTemplate, judge_queue
from storage import Store
from storage.errors import InvalidInput
from trainers.models.judges import check_judge, open_judge


def check_args(args: argparse.Namespace) -> JudgeTemplate:
    """The template, after the judge's options are checked; raises InvalidInput before the store is touched."""
    if args.judge is None:
        raise InvalidInput("--annotator judge needs --judge PATH_OR_URL (a model folder, a GGUF file, or an "
                           "OpenAI-compatible endpoint's URL)")
    if args.n < 0:
        raise InvalidInput(f"--n must be 0 or more, got {args.n}")
    if not 0 <= args.min_confidence <= 1:
        raise InvalidInput(f"--min-confidence must be between 0 and 1, got {args.min_confidence}")
    if not args.judge_timeout > 0:
        raise InvalidInput(f"--judge-timeout must be positive, got {args.judge_timeout}")
    template = JudgeTemplate.load(args.judge_template)
    check_judge(args.judge, args.judge_model, args.judge_key_env, args.judge_timeout, args.judge_max_mb)
    return template


def run(args: argparse.Namespace, open_store: Callable[[argparse.Namespace], Store]) -> int:
    template = check_args(args)
    store = open_store(args)
    client = open_judge(args.judge, store.data_dir, args.judge_model, args.judge_key_env, args.judge_timeout,
                        args.judge_max_mb)
    done = judge_queue(store, client, template, args.n, trains=not args.suggest_only,
                       min_confidence=args.min_confidence,
                       progress=lambda i, total: print(f"  judged {i}/{total}", file=sys.stderr))
    more = "" if done.judged == args.n else f" (the queue ran out after {done.judged})"
    print(f"{done.line()}{more}")
    return 0
