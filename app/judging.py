"""The judge a served studio may use: `serve --judge ...` names it (an admin, on the command line); a loop started
from the Train tab or `/start_loop` may name that judge only, never another path or URL (a folder is data the worker
would load, a URL a place it would send the project's texts to).

    add_serve_judge_arguments(parser)            # serve --judge, --judge-model, --judge-key-env, --judge-template
    check_studio_judge(config, studio.judge)     # before a job starts
"""

from __future__ import annotations

import argparse

from labeling.judge import JudgeTemplate
from storage.errors import InvalidInput
from trainers.loop.config import Annotator, LoopConfig
from trainers.models.judges import check_judge

JUDGE_SETTINGS = ("judge", "judge_model", "judge_key_env", "judge_template")


def add_serve_judge_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--judge", default=None, metavar="PATH_OR_URL",
                        help="the judge model loops started in the studio may use (annotator judge): a model folder, "
                             "GGUF file or OpenAI-compatible endpoint URL; see docs/judges.md")
    parser.add_argument("--judge-model", default=None, metavar="NAME", help="the model an endpoint judge serves")
    parser.add_argument("--judge-key-env", default=None, metavar="VAR",
                        help="environment variable holding the endpoint judge's key (never stored or logged)")
    parser.add_argument("--judge-template", default=None, metavar="FILE", help="the judge's prompt template")


def served_judge(args: argparse.Namespace) -> dict | None:
    """The judge settings `serve` was given, checked (one line when unusable), or None without --judge."""
    if args.judge is None:
        if args.judge_model or args.judge_key_env or args.judge_template:
            raise InvalidInput("--judge-model, --judge-key-env and --judge-template go with --judge PATH_OR_URL")
        return None
    check_judge(args.judge, args.judge_model, args.judge_key_env)
    JudgeTemplate.load(args.judge_template)
    return {name: getattr(args, name) for name in JUDGE_SETTINGS}


def check_studio_judge(config: LoopConfig, served: dict | None) -> None:
    """A loop started in the studio names no judge setting but those `serve` was started with."""
    if config.annotator == Annotator.JUDGE and served is None:
        raise InvalidInput("annotator judge needs a judge named on the command line: restart the studio with "
                           "serve --judge PATH_OR_URL")
    for name in JUDGE_SETTINGS:
        value = getattr(config, name)
        if value is not None and (served is None or value != served[name]):
            allowed = "none" if served is None else served[name]
            raise InvalidInput(f"{name} may only be set to the judge serve was started with ({allowed}); a path or "
                               "URL cannot be named from the studio")
