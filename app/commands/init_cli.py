"""`python app.py init`: start a project on a team's own model (policy v0, the reward base, prompts, held-out prompts
and guidelines), or seed the embedded demo (`--demo`); a refused init leaves no store behind."""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

from labeling.transfer.arithmetic import arithmetic_task, check_task_sizes
from labeling.transfer.importing import check_prompt_file
from storage import Store, StudioError
from storage.errors import Conflict, InvalidInput
from storage.policies import latest_policy
from storage.prompts import count_prompts

ROOT = Path(__file__).resolve().parents[2]
TASKS = ("arithmetic",)
PROMPT_FORMATS = ".jsonl/.jsonl.gz/.parquet (`prompt`: text or {role, content} turns, or `messages`), .csv (`prompt` " \
                 "column) or .txt (one per line)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", required=True, help="a new store file for the project")
    start = parser.add_mutually_exclusive_group(required=True)
    start.add_argument("--model", metavar="MODEL",
                       help="a local Hugging Face causal LM folder (save_pretrained), or a GGUF file (or a folder "
                            "holding one) converted once into the data folder: v0, the SFT policy")
    start.add_argument("--policy", dest="old_model_flag", metavar="MODEL", help=argparse.SUPPRESS)  # --model's old name
    start.add_argument("--demo", action="store_true",
                       help="seed the embedded demo (prompts, the demo policy, a queue of pairs) as the first serve "
                            "does, to label in the browser or run `loop` headless")
    parser.add_argument("--reward-base", metavar="MODEL",
                        help="the folder (or GGUF file) reward models start from (default: the policy); its own "
                             "tokenizer is fine")
    parser.add_argument("--prompts", metavar="FILE", help="training prompts (" + PROMPT_FORMATS + ")")
    parser.add_argument("--heldout", metavar="FILE", help="held-out prompts for evaluation (same formats)")
    parser.add_argument("--guidelines", metavar="FILE.md",
                        help="labelling guidelines (markdown) shown on the Label tab")
    parser.add_argument("--allow-pickle", action="store_true",
                        help="convert pickle-only weights (pytorch_model.bin) once into a safetensors copy")
    parser.add_argument("--task", choices=TASKS, default=None,
                        help="instead of --prompts/--heldout: arithmetic writes deterministic word problems with their "
                             "answers (the reference math_answer checks), training and held out")
    parser.add_argument("--task-size", type=int, default=512, help="--task: training problems (default 512)")
    parser.add_argument("--task-heldout", type=int, default=64, help="--task: held-out problems (default 64)")
    parser.add_argument("--task-difficulty", type=int, default=1,
                        help="--task: 1 one addition or subtraction, 2 one step of + - x /, 3 two steps with larger "
                             "and negative numbers (default 1)")


def run(args: argparse.Namespace) -> int:
    """Start the project (or seed the demo) in a new store."""
    if args.old_model_flag is not None:
        print(f"note: init --policy is now --model: python app.py init --model {args.old_model_flag} ...",
              file=sys.stderr)
        args.model = args.old_model_flag
    if args.demo:
        return init_demo(args)
    from trainers.loop.project import start_project

    for path in (args.prompts, args.heldout):
        if path is not None:
            check_prompt_file(path)
    guidelines = read_text_file(args.guidelines, "guidelines") if args.guidelines else None
    check_task(args)
    with new_or_unchanged_store(args.db) as store:
        if args.task is not None:
            args.prompts, args.heldout = write_task_files(store, args)
        result = start_project(store, args.model, reward_base=args.reward_base, prompts=args.prompts,
                               heldout=args.heldout, guidelines=guidelines, allow_pickle=args.allow_pickle)
    for note in result.notes:
        print(note)
    print(f"project started in {store.path}: policy v0 is {result.init.policy_path}; "
          f"{result.prompts} prompts, {result.heldout} held out")
    if result.budget is not None:
        print(f"prompts fit {result.budget.limit} tokens (the context of {result.budget.context} less "
              f"{result.budget.response_length} response tokens); serve it with python app.py serve --db {args.db}")
    return 0


def check_task(args: argparse.Namespace) -> None:
    """Refuse a task given with prompt files (the task writes them), or sizes it cannot give."""
    if args.task is None:
        return
    given = "--prompts" if args.prompts is not None else "--heldout" if args.heldout is not None else None
    if given:
        raise InvalidInput(f"--task {args.task} writes the training and held-out prompts itself, so {given} does not "
                           "apply; leave one of them out (import more later with import-prompts)")
    check_task_sizes(args.task_size, args.task_heldout, args.task_difficulty)


def write_task_files(store: Store, args: argparse.Namespace) -> tuple[str, str | None]:
    """The task's problems as `{prompt, answer}` JSONL files in the store's data folder (training, held out)."""
    train, heldout = arithmetic_task(args.task_size, args.task_heldout, args.task_difficulty)
    folder = store.data_dir / "tasks"
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for split, rows in (("train", train), ("heldout", heldout)):
        path = folder / f"{args.task}-{args.task_difficulty}-{split}.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
        paths.append(str(path) if rows else None)
    return paths[0], paths[1]


def init_demo(args: argparse.Namespace) -> int:
    """`init --demo`: the demo seeded into a new (or empty) store, as the first `serve` seeds it."""
    given = [option for option, value in (("--reward-base", args.reward_base), ("--prompts", args.prompts),
                                          ("--heldout", args.heldout), ("--guidelines", args.guidelines),
                                          ("--allow-pickle", args.allow_pickle), ("--task", args.task)) if value]
    if given:
        raise InvalidInput(f"--demo seeds the demo's own model and prompts, so {given[0]} does not apply; leave it "
                           "out, or start your own project with --model MODEL")
    with new_or_unchanged_store(args.db) as store:
        if not store_is_empty(store):
            raise Conflict(f"the store {store.path} already holds a policy or prompts; init --demo seeds a new "
                           "store: give it a new --db path")
        seed_demo(store, "retry init --demo")
    print(f"demo project started in {store.path}: {count_prompts(store)} prompts and the demo policy as v0, pairs "
          f"queued; label them with python app.py serve --db {args.db}, or run python app.py loop --db {args.db}")
    return 0


def store_is_empty(store: Store) -> bool:
    return count_prompts(store) == 0 and latest_policy(store) is None


def seed_demo(store: Store, retry: str) -> None:
    """Seed the demo into the empty `store` in a child process (torch stays out of this one), saying what it does
    as it goes (on stderr: the child's steps follow this line); `retry` tells what to do when that fails."""
    started = time.perf_counter()
    print(f"seeding the demo into {store.path} (once, for a new store; usually under a minute): loading torch and the "
          "demo policy …", file=sys.stderr, flush=True)
    seed = subprocess.run([sys.executable, "-m", "trainers.loop.demo_seed", "--db", str(store.path.resolve())],
                          cwd=ROOT)
    if seed.returncode != 0:
        raise StudioError(f"seeding the demo into {store.path} failed (see above); {retry}")
    print(f"demo seeded in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)


@contextlib.contextmanager
def new_or_unchanged_store(path: str) -> Iterator[Store]:
    """The store at `path`; when the command fails and the store did not exist before, it is removed again (with
    the data folder it made), so a refused command leaves nothing behind."""
    existed = Path(path).exists()
    store = Store(path)
    data_dir_existed = store.data_dir.exists()
    try:
        yield store
    except BaseException:
        store.close()
        if not existed:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{store.path}{suffix}").unlink(missing_ok=True)
            if not data_dir_existed:
                shutil.rmtree(store.data_dir, ignore_errors=True)
        raise


def read_text_file(path: str, what: str) -> str:
    """A UTF-8 text file's contents, or one line saying why it cannot be read."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidInput(f"{what} file {path} does not exist; check the path") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"cannot read the {what} file {path} ({exc}); give a UTF-8 text file") from None
