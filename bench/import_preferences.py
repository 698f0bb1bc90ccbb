"""How fast a preference data set imports: writes N rows of hh-rlhf-shaped dialogues (generated, deterministic:
one to four Human/Assistant exchanges, some empty or single-space answers, markdown and code in some) to a
temporary `.jsonl` file, imports it into a fresh store the way `python app.py import-preferences` does, and
repeats for several sizes to show the time grows linearly.

    python bench/import_preferences.py [--sizes 5000 10000 20000 50000] [--chat-turns]

Prints a markdown table: rows, wall and CPU seconds (the CPU figure holds on a busy machine), rows/s, and the
process's peak resident memory so far (flat as the rows grow: the file is streamed). Target: 50 000 rows in
under 15 s.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from labeling.transfer.preference_import import import_preference_file  # noqa: E402
from storage import Store  # noqa: E402

TOPICS = ["a sourdough starter", "the French revolution", "binary search", "a leaking tap", "tax returns",
          "learning the violin", "a job interview", "sorting a list in Python", "houseplants", "a road trip"]
CODE = "```python\ndef middle(items):\n    items = sorted(items)\n    return items[len(items) // 2]\n```"
MARKDOWN = "Here is a plan:\n\n1. **Start small**\n2. Keep notes\n\n| step | time |\n|---|---|\n| one | 5 min |"


def question(rng: random.Random, turn: int) -> str:
    topic = rng.choice(TOPICS)
    return f"Can you help me with {topic}?" if turn == 0 else f"What about {topic}, case {rng.randrange(10**6)}?"


def answer(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.02:
        return rng.choice(["", " "])  # hh-rlhf has empty and single-space answers
    if kind < 0.12:
        return f"Sure, like this:\n\n{CODE}"
    if kind < 0.22:
        return MARKDOWN
    return " ".join(rng.choice(TOPICS) for _ in range(rng.randint(3, 25))).capitalize() + "."


def dialogue_rows(count: int, seed: int = 0):
    """`count` hh-rlhf rows: whole dialogues sharing every turn but the last answer."""
    rng = random.Random(seed)
    for number in range(count):
        turns = []
        for turn in range(rng.randint(1, 4)):
            turns.append(f"\n\nHuman: {question(rng, turn)} (#{number})")
            turns.append(f"\n\nAssistant: {answer(rng)}")
        shared = "".join(turns[:-1]) + "\n\nAssistant:"
        chosen, rejected = answer(rng), answer(rng)
        while rejected.strip() == chosen.strip():
            rejected = answer(rng)
        yield {"chosen": shared + (" " + chosen if chosen.strip() else chosen),
               "rejected": shared + (" " + rejected if rejected.strip() else rejected)}


def write_rows(path: Path, count: int) -> Path:
    with path.open("w", encoding="utf-8") as f:
        for row in dialogue_rows(count):
            f.write(json.dumps(row) + "\n")
    return path


def timed_import(folder: Path, rows: int, chat_turns: bool) -> tuple[float, float, int]:
    """Wall and CPU seconds of importing `rows` generated rows into a fresh store, and the labeled pairs added."""
    path = write_rows(folder / f"hh-{rows}.jsonl", rows)
    store = Store(folder / f"store-{rows}.db")
    started, cpu_started = time.perf_counter(), time.process_time()
    result = import_preference_file(store, path, "bench", chat_turns=chat_turns)
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    store.close()
    return seconds, cpu_seconds, result.added


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[5_000, 10_000, 20_000, 50_000])
    parser.add_argument("--chat-turns", action="store_true", help="store prompts as role turns (a chat template)")
    args = parser.parse_args(argv)
    print("| rows | seconds | CPU seconds | rows/s | labeled pairs | peak RSS (MB) |")
    print("|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="bench-import-") as folder:
        for rows in args.sizes:
            seconds, cpu_seconds, added = timed_import(Path(folder), rows, args.chat_turns)
            peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(f"| {rows:,} | {seconds:.2f} | {cpu_seconds:.2f} | {rows / seconds:,.0f} | {added:,} | "
                  f"{peak_mb:,.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
