"""The judge a served studio may use: `serve --judge ...` names it (an admin, on the command line); a loop started
from the Train tab or `/start_loop` may name that judge only, never another path or URL (a folder is data the worker
would load, a URL a place it would send the project's texts to).

    add_serve_judge_arguments(parser)            # serve --judge, --judge-model, --judge-key-env, --judge-template,
                                                 # --judge-timeout, --judge-max-mb
    config = studio_judge_config(config, studio.judge)     # before a job starts: checked, serve's limits filled in
"""

from __future__ import annotations

import argparse

from labeling.judges.judge import JudgeTemplate
from labeling.judges.judge_endpoint import DEFAULT_MAX_MB, DEFAULT_TIMEOUT_S
from storage.errors import InvalidInput
from trainers.loop.config import Annotator, LoopConfig
from trainers.models.judges import check_judge

JUDGE_SETTINGS = ("judge", "judge_model", "judge_key_env", "judge_template")
JUDGE_LIMITS = ("judge_timeout", "judge_max_mb")  # serve's, taken by every judge loop the studio starts


def add_serve_judge_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--judge", default=None, metavar="PATH_OR_URL",
                        help="the judge model loops started in the studio may use (annotator judge): a model folder, "
                             "GGUF file or OpenAI-compatible endpoint URL; see docs/judges.md")
    parser.add_argument("--judge-model", default=None, metavar="NAME", help="the model an endpoint judge serves")
    parser.add_argument("--judge-key-env", default=None, metavar="VAR",
                        help="environment variable holding the endpoint judge's key (never stored or logged)")
    parser.add_argument("--judge-template", default=None, metavar="FILE", help="the judge's prompt template")
    parser.add_argument("--judge-timeout", type=float, default=None, metavar="S",
                        help=f"seconds an endpoint judge has for each answer, connection to last byte, in the "
                             f"studio's loops (default: {DEFAULT_TIMEOUT_S:g})")
    parser.add_argument("--judge-max-mb", type=float, default=None, metavar="MB",
                        help=f"the largest answer read from an endpoint judge in the studio's loops (default: "
                             f"{DEFAULT_MAX_MB:g})")


def served_judge(args: argparse.Namespace) -> dict | None:
    """The judge settings `serve` was given, checked (one line when unusable), or None without --judge."""
    if args.judge is None:
        if any(getattr(args, name) is not None for name in JUDGE_SETTINGS[1:] + JUDGE_LIMITS):
            raise InvalidInput("--judge-model, --judge-key-env, --judge-template, --judge-timeout and --judge-max-mb "
                               "go with --judge PATH_OR_URL")
        return None
    check_judge(args.judge, args.judge_model, args.judge_key_env, args.judge_timeout, args.judge_max_mb)
    JudgeTemplate.load(args.judge_template)
    return {name: getattr(args, name) for name in JUDGE_SETTINGS + JUDGE_LIMITS}


def studio_judge_config(config: LoopConfig, served: dict | None) -> LoopConfig:
    """The config a loop started in the studio runs with: it names no judge setting but those `serve` was started
    with, and a judge loop takes serve's timeout and answer cap."""
    if config.annotator == Annotator.JUDGE and served is None:
        raise InvalidInput("annotator judge needs a judge named on the command line: restart the studio with "
                           "serve --judge PATH_OR_URL")
    for name in JUDGE_SETTINGS + JUDGE_LIMITS:
        value = getattr(config, name)
        if value is not None and (served is None or value != served.get(name)):
            allowed = "none" if served is None else served.get(name)
            raise InvalidInput(f"{name} may only be set to the judge serve was started with ({allowed}); a path, "
                               "URL or limit of the judge cannot be named from the studio")
    if config.annotator != Annotator.JUDGE:
        return config
    return config.updated({name: served.get(name) for name in JUDGE_LIMITS})
