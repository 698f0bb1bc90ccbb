"""The command line: `serve` (the default) and the headless subcommands, each handing over to the module that does
the work. `app.py` at the repository root runs `main`; tests import it from here. Import-light: torch and Gradio load
only when a subcommand that needs them runs.

    python app.py                     # serve the studio on its embedded demo, store ./studio.db
    python app.py --help              # list the subcommands
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Callable

from app.commands.init_cli import PROMPT_FORMATS, seed_demo, store_is_empty
from app.commands.library_versions import check_library_versions
from app.commands.prompts_cli import changes_asked as prompts_changes_asked
from app.door.limits import IDLE_TIMEOUT_MIN, LOGIN_BACKOFF_MAX_S, MAX_UPLOAD_MB
from app.train.judging import add_serve_judge_arguments, served_judge
from labeling.transfer.importing import check_prompt_file
from storage import Store, StudioError
from storage.audit import AuditAction
from storage.errors import InvalidInput

ROOT = Path(__file__).resolve().parents[2]
SUBCOMMANDS = {}
AUDITED: dict[str, AuditAction] = {}  # subcommands that are admin actions, recorded in the store's audit trail
AUDITED_IF: dict[str, Callable[[argparse.Namespace], bool]] = {}  # ... when their arguments ask for a change
LOCAL_ARGUMENTS = ("command", "run", "db")  # not part of what an audit row says was done


def subcommand(name: str, help: str, audit: AuditAction | None = None,
               audit_if: Callable[[argparse.Namespace], bool] | None = None):
    """Register `fn(parser)` as the argument builder of a subcommand; it returns the handler `run(args) -> int`.
    With `audit`, each run that did something is recorded in the store's audit trail (by `cli:<OS user>`); with
    `audit_if` too, only the runs whose arguments it finds changing something (not those that only list)."""
    def register(fn):
        SUBCOMMANDS[name] = (help, fn)
        if audit is not None:
            AUDITED[name] = audit
        if audit_if is not None:
            AUDITED_IF[name] = audit_if
        return fn
    return register


def add_store_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", default="studio.db", help="store file (created if missing)")


def on_store(module, parser: argparse.ArgumentParser, opens_it: bool = False) -> Callable[[argparse.Namespace], int]:
    """The stanza of a subcommand that one module does on the store (a trainer's entry): --db and the module's
    `add_arguments(parser)`; returns its handler, `module.run(args, store)` on the store opened from --db (with
    `opens_it`, `module.run(args, open_store)`: the module opens it after its own checks)."""
    add_store_arguments(parser)
    module.add_arguments(parser)
    if opens_it:
        return lambda args: module.run(args, open_store)
    return lambda args: module.run(args, open_store(args))


def open_store(args: argparse.Namespace) -> Store:
    """Open (and migrate) the store, once the command's --accelerate-config (if any) is known good. Only `serve`
    seeds the demo (into an empty store, unless --no-demo), so a project's store never receives demo prompts or the
    demo policy by accident."""
    if getattr(args, "accelerate_config", None) is not None:
        from trainers.jobs.launch_config import read_launch_config

        read_launch_config(args.accelerate_config)  # one line, before the store is created or changed
    store = Store(args.db)
    if getattr(args, "seed_demo", False) and store_is_empty(store):
        seed_demo(store, "retry, or pass --no-demo")
    return store


@subcommand("serve", "serve the studio in the browser (default)")
def serve_arguments(parser: argparse.ArgumentParser):
    add_store_arguments(parser)
    parser.add_argument("--no-demo", dest="seed_demo", action="store_false",
                        help="do not seed an empty store with the demo (by default serve seeds it)")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default: this machine only)")
    parser.add_argument("--port", type=int, default=7860, help="port to serve on")
    parser.add_argument("--auth", default=None,
                        help="file of hashed passwords (`python app.py add-user`); annotators must log in")
    parser.add_argument("--max-upload-mb", type=float, default=MAX_UPLOAD_MB,
                        help="largest file one upload may carry, in MB (default: %(default)g)")
    parser.add_argument("--root-path", default="",
                        help="URL path a reverse proxy serves the studio under, e.g. /studio")
    parser.add_argument("--ssl-certfile", default=None, help="PEM certificate: serve over HTTPS (with --ssl-keyfile)")
    parser.add_argument("--ssl-keyfile", default=None, help="PEM private key of --ssl-certfile")
    parser.add_argument("--idle-timeout-min", type=float, default=IDLE_TIMEOUT_MIN,
                        help="with --auth, a login unused this many minutes ends (default: %(default)g)")
    parser.add_argument("--login-backoff-max-s", type=float, default=LOGIN_BACKOFF_MAX_S,
                        help="with --auth, the longest pause after repeated failed logins, in s (default: %(default)g)")
    parser.add_argument("--accelerate-config", default=None, metavar="FILE",
                        help="jobs started from the Train tab run each training phase under `accelerate launch "
                             "--config_file FILE` (several GPUs or machines; see docs/scale-out.md)")
    add_serve_judge_arguments(parser)

    def run(args: argparse.Namespace) -> int:
        from app.auth import AuthFile
        from app.door.server import check_port, check_positive, check_root_path, check_tls, check_upload_cap, serve

        check_port(args.host, args.port)
        check_upload_cap(args.max_upload_mb)
        check_positive("--idle-timeout-min", args.idle_timeout_min, "minutes", IDLE_TIMEOUT_MIN)
        check_positive("--login-backoff-max-s", args.login_backoff_max_s, "seconds", LOGIN_BACKOFF_MAX_S)
        check_root_path(args.root_path)
        check_tls(args.ssl_certfile, args.ssl_keyfile)
        users = AuthFile(args.auth) if args.auth else None
        judge = served_judge(args)
        store = open_store(args)
        serve(store, host=args.host, port=args.port, users=users, max_upload_mb=args.max_upload_mb,
              root_path=args.root_path, ssl_certfile=args.ssl_certfile, ssl_keyfile=args.ssl_keyfile,
              idle_timeout_s=args.idle_timeout_min * 60, backoff_max_s=args.login_backoff_max_s,
              accelerate_config=args.accelerate_config, judge=judge)
        return 0

    return run


@subcommand("init", "start a project on your own model (policy v0, reward base, prompts and guidelines), or the demo",
            audit=AuditAction.PROJECT_STARTED)
def init_arguments(parser: argparse.ArgumentParser):
    from app.commands import init_cli

    init_cli.add_arguments(parser)
    return init_cli.run


@subcommand("import-prompts", "load prompts from a .jsonl(.gz), .parquet, .csv or .txt file",
            audit=AuditAction.PROMPTS_IMPORTED)
def import_prompts_arguments(parser: argparse.ArgumentParser):
    add_store_arguments(parser)
    parser.add_argument("file", help=PROMPT_FORMATS)
    parser.add_argument("--heldout", action="store_true", help="mark the prompts as held out (evaluation only)")

    def run(args: argparse.Namespace) -> int:
        from app.data.preferences import import_notes
        from labeling.transfer.importing import import_prompt_file

        check_prompt_file(args.file)
        store = open_store(args)
        result = import_prompt_file(store, args.file, heldout=args.heldout,
                                    progress=lambda n: print(f"  {n} prompts read", file=sys.stderr))
        print(f"imported {result.added} prompts, skipped {result.duplicates} duplicates")
        for note in import_notes(store, result.ids):
            print(note)
        return 0

    return run


@subcommand("import-preferences", "import a preference data set (TRL's formats, hh-rlhf) as labels",
            audit=AuditAction.PREFERENCES_IMPORTED)
def import_preferences_arguments(parser: argparse.ArgumentParser):
    add_store_arguments(parser)
    parser.add_argument("file", help=".jsonl, .jsonl.gz or .parquet file, or a datasets save_to_disk folder")
    parser.add_argument("--source", default=None, help="annotator name of the labels (default: the file's name)")
    parser.add_argument("--skip-invalid", action="store_true",
                        help="leave structurally broken rows out (counted and listed) instead of failing the import")

    def run(args: argparse.Namespace) -> int:
        from app.data.preferences import import_into_project, import_notes
        from labeling.transfer.preference_import import check_preference_file, default_source

        path = check_preference_file(args.file)
        store = open_store(args)
        result = import_into_project(store, path, args.source or default_source(path), args.skip_invalid,
                                     progress=lambda n: print(f"  {n} rows read", file=sys.stderr))
        print(result.summary())
        for note in import_notes(store, result.prompt_ids, result.source):
            print(note)
        return 0

    return run


@subcommand("import-demonstrations", "import demonstrations (TRL's SFT formats: prompt/completion or messages) for SFT",
            audit=AuditAction.DEMONSTRATIONS_IMPORTED)
def import_demonstrations_arguments(parser: argparse.ArgumentParser):
    from app.commands import demonstrations_cli

    add_store_arguments(parser)
    demonstrations_cli.add_import_arguments(parser)
    return lambda args: demonstrations_cli.run_import(args, open_store)


@subcommand("import-gold", "import gold pairs (a preference file, chosen first) or gold rankings (the export's "
            "rankings format) that check each annotator's accuracy", audit=AuditAction.GOLD_IMPORTED)
def import_gold_arguments(parser: argparse.ArgumentParser):
    add_store_arguments(parser)
    parser.add_argument("file", help=".jsonl, .jsonl.gz or .parquet preference or rankings file, or a datasets "
                        "save_to_disk folder")
    parser.add_argument("--source", default="gold", help="name of the gold set")

    def run(args: argparse.Namespace) -> int:
        from labeling.gold.gold import import_gold_file
        from labeling.transfer.preference_import import check_preference_file

        path = check_preference_file(args.file)
        print(import_gold_file(open_store(args), path, args.source).summary())
        return 0

    return run


@subcommand("label", "label N queued pairs with a synthetic annotator (the oracle, through the Label tab's code path) "
            "or a judge model (RLAIF)", audit=AuditAction.SYNTHETIC_LABELS_ADDED)
def label_arguments(parser: argparse.ArgumentParser):
    from app.commands import label_cli

    add_store_arguments(parser)
    label_cli.add_arguments(parser)

    def run(args: argparse.Namespace) -> int:
        if args.annotator == "judge":
            from app.commands import judge_cli

            return judge_cli.run(args, open_store)
        return label_cli.run(args, open_store)

    return run


@subcommand("train-reward", "train the reward model on every label in the store and register it",
            audit=AuditAction.JOB_STARTED)
def train_reward_arguments(parser: argparse.ArgumentParser):
    from app.commands import reward_cli

    return on_store(reward_cli, parser, opens_it=True)


@subcommand("loop", "run the preference loop in the terminal (oracle or human labels)", audit=AuditAction.JOB_STARTED)
def loop_arguments(parser: argparse.ArgumentParser):
    from app.commands import loop_cli

    return on_store(loop_cli, parser)


@subcommand("ppo", "train the newest policy with PPO or GRPO against the newest reward model (or the oracle's score)",
            audit=AuditAction.JOB_STARTED)
def ppo_arguments(parser: argparse.ArgumentParser):
    from app.commands import ppo_cli

    return on_store(ppo_cli, parser)


@subcommand("dpo", "train the newest policy with DPO on the store's labels (no reward model) and register it",
            audit=AuditAction.JOB_STARTED)
def dpo_arguments(parser: argparse.ArgumentParser):
    from app.commands import dpo_cli

    return on_store(dpo_cli, parser)


@subcommand("sft", "fine-tune the newest policy on the store's demonstrations (SFT) and register it as the new SFT "
            "policy",
            audit=AuditAction.JOB_STARTED)
def sft_arguments(parser: argparse.ArgumentParser):
    from app.commands import sft_cli

    return on_store(sft_cli, parser)


@subcommand("set-root", "make a version the SFT policy (what later versions stay close to and win-rate pairs compare "
            "against), e.g. an SFT version the fluency check held back", audit=AuditAction.ROOT_SET)
def set_root_arguments(parser: argparse.ArgumentParser):
    from app.commands import set_root_cli

    set_root_cli.add_arguments(parser)
    return lambda args: set_root_cli.run(args, open_store(args))


@subcommand("prompts", "list the prompts by source with their token counts; exclude (or include) prompts or sources",
            audit=AuditAction.PROMPT_EXCLUSIONS_CHANGED, audit_if=prompts_changes_asked)
def prompts_arguments(parser: argparse.ArgumentParser):
    from app.commands import prompts_cli

    prompts_cli.add_arguments(parser)
    return prompts_cli.run


@subcommand("export", "write the labels as a TRL preference (or soft-label) data set, .jsonl or .parquet",
            audit=AuditAction.LABELS_EXPORTED)
def export_arguments(parser: argparse.ArgumentParser):
    from app.commands import export_cli

    export_cli.add_arguments(parser)
    return export_cli.run


@subcommand("export-model", "write a version as a Hugging Face folder with its model card (lineage, judgements, win "
            "rate)")
def export_model_arguments(parser: argparse.ArgumentParser):
    from app.commands import export_model_cli

    export_model_cli.add_arguments(parser)
    return export_model_cli.run


@subcommand("add-user", "add a user to an auth file or set a user's password (asked twice; a salted hash is stored)")
def add_user_arguments(parser: argparse.ArgumentParser):
    from app.commands import users_cli

    parser.add_argument("--auth", required=True, help="auth file (created, readable by you only, if missing)")
    parser.add_argument("name", help="the user's login name")
    parser.add_argument("--admin", action="store_true", help="may run jobs, import, export and edit the guidelines")
    return users_cli.run_add_user


@subcommand("hash-auth", "replace the plain-text passwords of an auth file by salted scrypt hashes, in place")
def hash_auth_arguments(parser: argparse.ArgumentParser):
    from app.commands import users_cli

    parser.add_argument("file", help="auth file of `name:password[:admin]` lines")
    return users_cli.run_hash_auth


@subcommand("audit", "write the store's audit trail (who did what, when) as a CSV file",
            audit=AuditAction.AUDIT_EXPORTED)
def audit_arguments(parser: argparse.ArgumentParser):
    parser.add_argument("--db", default="studio.db", help="store file to read the audit trail from")
    parser.add_argument("--out", required=True, help="output file, .csv")

    def run(args: argparse.Namespace) -> int:
        from app.audit import check_csv_path, write_audit_csv

        check_csv_path(args.out)
        if not Path(args.db).is_file():
            raise InvalidInput(f"store {args.db} does not exist; pass the --db of a studio")
        print(f"wrote {write_audit_csv(Store(args.db), args.out)} actions to {args.out}")
        return 0

    return run


@subcommand("leaderboard", "print each policy version's blind win rate against the SFT policy and the leaderboard")
def leaderboard_arguments(parser: argparse.ArgumentParser):
    from app.commands import leaderboard_cli

    leaderboard_cli.add_arguments(parser)
    return leaderboard_cli.run


@subcommand("status", "print the jobs (or one) with their status, progress, failure warnings and win rates")
def status_arguments(parser: argparse.ArgumentParser):
    from app.commands import status_cli

    status_cli.add_arguments(parser)
    return status_cli.run


def record_terminal_action(args: argparse.Namespace, started: float, exit_code: int) -> None:
    """Add a finished admin command to its store's audit trail: by `cli:<OS user>`, at its start, with its
    arguments, exit code and the jobs it ran. Nothing is recorded for a store that does not exist."""
    from app.audit import terminal_actor
    from storage import jobs as job_rows
    from storage.audit import record_action

    if not Path(args.db).is_file():
        return
    resumed = getattr(args, "resume", None)
    action = AuditAction.JOB_RESUMED if resumed is not None else AUDITED[args.command]
    detail = {"command": args.command, "exit": exit_code, "seconds": round(time.time() - started, 1),
              "args": {k: v for k, v in vars(args).items() if k not in LOCAL_ARGUMENTS}}
    try:
        store = Store(args.db)
        if action in (AuditAction.JOB_STARTED, AuditAction.JOB_RESUMED):
            detail["jobs"] = [resumed] if resumed is not None else [
                job.id for job in job_rows.list_jobs(store, limit=10) if job.created >= started]
        record_action(store, terminal_actor(), action, detail, at=started)
    except StudioError as exc:
        print(f"warning: not recorded in the audit trail: {exc}", file=sys.stderr)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="app.py", description="RLHF Studio: label pairs, train a reward model, run "
                                                                "PPO or GRPO, or DPO.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (help, build) in SUBCOMMANDS.items():
        sub_parser = sub.add_parser(name, help=help, description=help)
        sub_parser.set_defaults(run=build(sub_parser))
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help")):
        argv.insert(0, "serve")
    args = build_parser().parse_args(argv)
    started, code = time.time(), 1  # 1 unless the command returns: it crashed
    try:
        check_library_versions()
        code = args.run(args)
        sys.stdout.flush()  # here, so that a reader gone early is a BrokenPipeError below, not at the exit
    except StudioError as exc:
        print(f"error: {exc}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:  # the reader left early (`status | head`): the rest goes nowhere, without a traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 141  # as a shell reports a process SIGPIPE ended
    finally:
        audited = args.command in AUDITED and AUDITED_IF.get(args.command, lambda _: True)(args)
        if audited and code != 2:  # bad input (2) did nothing: nothing to record
            record_terminal_action(args, started, code)
    return code
