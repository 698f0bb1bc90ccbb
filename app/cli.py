"""The command line: `serve` (the default) and the headless subcommands, each handing over to the module that does
the work. `app.py` at the repository root runs `main`; tests import it from here. Import-light: torch and Gradio load
only when a subcommand that needs them runs.

    python app.py                     # serve the studio on its embedded demo, store ./studio.db
    python app.py --help              # list the subcommands
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from storage import Store, StudioError
from storage.policies import latest_policy
from storage.prompts import count_prompts

from .limits import MAX_UPLOAD_MB

ROOT = Path(__file__).resolve().parent.parent
SUBCOMMANDS = {}


def subcommand(name: str, help: str):
    """Register `fn(parser)` as the argument builder of a subcommand; it returns the handler `run(args) -> int`."""
    def register(fn):
        SUBCOMMANDS[name] = (help, fn)
        return fn
    return register


def add_store_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", default="studio.db", help="store file (created and seeded with the demo if missing)")
    parser.add_argument("--no-demo", action="store_true", help="do not seed a new, empty store with the demo")


def store_is_empty(store: Store) -> bool:
    return count_prompts(store) == 0 and latest_policy(store) is None


def open_store(args: argparse.Namespace) -> Store:
    """Open (and migrate) the store; an empty one (no prompts, no policy) is seeded with the demo unless --no-demo."""
    store = Store(args.db)
    if not args.no_demo and store_is_empty(store):
        seed = subprocess.run([sys.executable, "-m", "trainers.demo_seed", "--db", str(store.path.resolve())], cwd=ROOT)
        if seed.returncode != 0:
            raise StudioError(f"seeding the demo into {store.path} failed (see above); retry, or pass --no-demo")
    return store


@subcommand("serve", "serve the studio in the browser (default)")
def serve_arguments(parser: argparse.ArgumentParser):
    add_store_arguments(parser)
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default: this machine only)")
    parser.add_argument("--port", type=int, default=7860, help="port to serve on")
    parser.add_argument("--auth", default=None, help="file of `user:password` lines; annotators must log in")
    parser.add_argument("--max-upload-mb", type=float, default=MAX_UPLOAD_MB,
                        help="largest file one upload may carry, in MB (default: %(default)g)")

    def run(args: argparse.Namespace) -> int:
        from app.auth import read_auth_file
        from app.server import check_port, check_upload_cap, serve

        check_port(args.host, args.port)
        check_upload_cap(args.max_upload_mb)
        users = read_auth_file(args.auth) if args.auth else None
        store = open_store(args)
        serve(store, host=args.host, port=args.port, users=users, max_upload_mb=args.max_upload_mb)
        return 0

    return run


@subcommand("import-prompts", "load prompts from a .jsonl, .csv or .txt file")
def import_prompts_arguments(parser: argparse.ArgumentParser):
    add_store_arguments(parser)
    parser.add_argument("file", help=".jsonl (`prompt` field), .csv (`prompt` column) or .txt (one per line)")
    parser.add_argument("--heldout", action="store_true", help="mark the prompts as held out (evaluation only)")

    def run(args: argparse.Namespace) -> int:
        from labeling.importing import check_prompt_file, import_prompt_file

        check_prompt_file(args.file)
        store = open_store(args)
        result = import_prompt_file(store, args.file, heldout=args.heldout,
                                    progress=lambda n: print(f"  {n} prompts read", file=sys.stderr))
        print(f"imported {result.added} prompts, skipped {result.duplicates} duplicates")
        return 0

    return run


@subcommand("import-preferences", "import a preference data set (TRL's formats, hh-rlhf) as labels")
def import_preferences_arguments(parser: argparse.ArgumentParser):
    add_store_arguments(parser)
    parser.add_argument("file", help=".jsonl, .jsonl.gz or .parquet file, or a datasets save_to_disk folder")
    parser.add_argument("--source", default=None, help="annotator name of the labels (default: the file's name)")
    parser.add_argument("--skip-invalid", action="store_true",
                        help="leave structurally broken rows out (counted and listed) instead of failing the import")

    def run(args: argparse.Namespace) -> int:
        from labeling.preference_import import check_preference_file, default_source

        from .preferences import import_into_project

        path = check_preference_file(args.file)
        store = open_store(args)
        result = import_into_project(store, path, args.source or default_source(path), args.skip_invalid,
                                     progress=lambda n: print(f"  {n} rows read", file=sys.stderr))
        print(result.summary())
        return 0

    return run


@subcommand("label", "label N queued pairs with a synthetic annotator (the oracle), through the Label tab's code path")
def label_arguments(parser: argparse.ArgumentParser):
    from labeling import label_cli

    add_store_arguments(parser)
    label_cli.add_arguments(parser)
    return lambda args: label_cli.run(args, open_store)


@subcommand("train-reward", "train the reward model on every label in the store and register it")
def train_reward_arguments(parser: argparse.ArgumentParser):
    from trainers import reward_cli

    add_store_arguments(parser)
    reward_cli.add_arguments(parser)
    return lambda args: reward_cli.run(args, open_store)


@subcommand("loop", "run the preference loop in the terminal (oracle or human labels)")
def loop_arguments(parser: argparse.ArgumentParser):
    from trainers import loop_cli

    add_store_arguments(parser)
    loop_cli.add_arguments(parser)
    return lambda args: loop_cli.run(args, open_store(args))


@subcommand("ppo", "train the newest policy with PPO against the newest reward model (or the demo oracle)")
def ppo_arguments(parser: argparse.ArgumentParser):
    from trainers import ppo_cli

    add_store_arguments(parser)
    ppo_cli.add_arguments(parser)
    return lambda args: ppo_cli.run(args, open_store(args))


@subcommand("export", "write the labels as a TRL preference (or soft-label) data set, .jsonl or .parquet")
def export_arguments(parser: argparse.ArgumentParser):
    from labeling import export_cli

    export_cli.add_arguments(parser)
    return export_cli.run


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="app.py", description="RLHF Studio: label pairs, train a reward model, run PPO.")
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
    try:
        return args.run(args)
    except StudioError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
