"""`python app.py prompts`: the store's prompts by source with their token counts for the policy (its tokenizer and
chat template) against its budget (the context less the response length): how many fit, are too long, are excluded
and are used; `--list` shows each prompt. `--exclude`/`--include` (ids) and `--exclude-source`/`--include-source`
leave prompts out of sampling, training and evaluation, or take them back; excluded prompts stay in the store and
in exports. The counts are the loop's (`trainers.loop.prompt_use`), which decides when it starts.

    python app.py prompts --db studio.db                            # a summary per source
    python app.py prompts --db studio.db --list --source hh-rlhf    # one line per prompt: id, tokens, state, text
    python app.py prompts --db studio.db --exclude-source hh-rlhf   # never sampled from now on
    python app.py prompts --db studio.db --exclude 24 31 --include 7
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from storage import Store
from storage.errors import InvalidInput
from storage.policies import latest_policy
from storage.prompts import PromptSelection, list_prompts, prompt_sources, set_excluded
from storage.types import Prompt

PREVIEW = 60  # characters of a prompt's text a --list line shows
NO_SOURCE = "(none)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", default="studio.db", help="store file")
    parser.add_argument("--list", action="store_true", help="one line per prompt: id, source, tokens, state, text")
    parser.add_argument("--source", metavar="NAME", help="with --list: only this source's prompts")
    parser.add_argument("--response-length", type=int, default=None, metavar="N",
                        help="count the budget with the response length your loop uses (default: the loop's)")
    parser.add_argument("--exclude", type=int, nargs="+", action="extend", default=[], metavar="ID",
                        help="leave these prompts out of sampling, training and evaluation (kept, and exported)")
    parser.add_argument("--include", type=int, nargs="+", action="extend", default=[], metavar="ID",
                        help="take excluded prompts back")
    parser.add_argument("--exclude-source", action="append", default=[], metavar="NAME",
                        help="exclude every prompt of a source (a file's name, a preference import's source)")
    parser.add_argument("--include-source", action="append", default=[], metavar="NAME",
                        help="take every prompt of a source back")


def changes_asked(args: argparse.Namespace) -> bool:
    """Whether the command changes the store (then it is an admin action, in the audit trail), or only lists."""
    return bool(args.exclude or args.include or args.exclude_source or args.include_source)


def check_arguments(args: argparse.Namespace) -> None:
    both = sorted(set(args.exclude) & set(args.include))
    if both:
        raise InvalidInput(f"prompt {both[0]} is both in --exclude and in --include; name it in one of them")
    both_sources = [name for name in args.exclude_source if name in args.include_source]
    if both_sources:
        raise InvalidInput(f"the source {both_sources[0]!r} is both in --exclude-source and in --include-source; "
                           "name it in one of them")
    if args.response_length is not None and args.response_length < 1:
        raise InvalidInput(f"--response-length must be at least 1, got {args.response_length}")
    if args.source is not None and not args.list:
        raise InvalidInput("--source chooses what --list shows; add --list")


def token_counts(store: Store, prompts: list[Prompt], response_length: int | None):
    """(budget, {prompt id: tokens or None}) for the newest policy with `response_length` (None: the loop's default,
    as imports count); the budget is None when there is no policy or its context is unknown."""
    from trainers.loop.prompt_use import import_budget
    from trainers.models.chat_format import prompt_budget

    policy = latest_policy(store)
    if policy is None:
        budget = None
    else:
        budget = import_budget(store) if response_length is None else prompt_budget(policy.path, response_length)
    counts = dict(zip([p.id for p in prompts], budget.counts(prompts), strict=True)) if budget else {}
    return budget, counts


def state(prompt: Prompt, tokens: int | None, limit: int | None) -> str:
    """What the loop does with a prompt: used, too long (for the budget), or excluded (which wins)."""
    if prompt.excluded:
        return "excluded"
    if limit is not None and (tokens is None or tokens > limit):
        return "too long"
    return "used"


def summary_lines(prompts: list[Prompt], counts: dict, limit: int | None) -> list[str]:
    """A table: per source and split, the prompts, how many fit and are too long, excluded, used."""
    rows: dict[tuple, Counter] = {}
    for prompt in prompts:
        tally = rows.setdefault((prompt.source or NO_SOURCE, "held out" if prompt.heldout else "training"), Counter())
        tokens = counts.get(prompt.id)
        tally["prompts"] += 1
        fits = limit is None or (tokens is not None and tokens <= limit)
        tally["fit" if fits else "too long"] += 1
        tally["excluded"] += prompt.excluded
        tally["used"] += state(prompt, tokens, limit) == "used"
    width = max([len("source")] + [len(source) for source, _ in rows])
    columns = ("prompts", "fit", "too long", "excluded", "used")
    lines = [f"{'source':<{width}}  {'split':<8}  " + "  ".join(f"{c:>8}" for c in columns)]
    lines += [f"{source:<{width}}  {split:<8}  " + "  ".join(f"{tally[c]:>8}" for c in columns)
              for (source, split), tally in rows.items()]
    return lines


def prompt_line(prompt: Prompt, tokens: int | None, limit: int | None) -> str:
    text = "".join(c if c.isprintable() else " " for c in prompt.text[:PREVIEW])
    shown = "?" if tokens is None else str(tokens)
    return (f"{prompt.id:>7}  {prompt.source or NO_SOURCE}  {'held out' if prompt.heldout else 'training'}  "
            f"{shown:>6} tokens  {state(prompt, tokens, limit):<8}  {text}{'…' if len(prompt.text) > PREVIEW else ''}")


def run(args: argparse.Namespace) -> int:
    check_arguments(args)
    if not Path(args.db).is_file():
        raise InvalidInput(f"store {args.db} does not exist; pass the --db of a studio")
    store = Store(args.db)
    if args.source is not None and args.source not in prompt_sources(store):
        named = ", ".join(repr(s) for s in prompt_sources(store) if s is not None) or "none"
        raise InvalidInput(f"no prompt comes from the source {args.source!r}; the sources are {named}")
    if changes_asked(args):
        excluded, included = set_excluded(store, PromptSelection(tuple(args.exclude), tuple(args.exclude_source)),
                                          PromptSelection(tuple(args.include), tuple(args.include_source)))
        print(f"excluded {excluded} prompts, included {included} again")
    prompts = list_prompts(store)
    if not prompts:
        print(f"the store {store.path} has no prompts; import some with python app.py import-prompts")
        return 0
    budget, counts = token_counts(store, prompts, args.response_length)
    limit = budget.limit if budget else None
    if budget is not None:
        print(f"{budget.describe()} (--response-length: your loop's)")
    else:
        print("token counts need a policy whose config names its context length; every prompt counts as fitting")
    print("\n".join(summary_lines(prompts, counts, limit)))
    if args.list:
        print("\n".join(prompt_line(p, counts.get(p.id), limit) for p in prompts
                        if args.source is None or p.source == args.source))
    return 0
