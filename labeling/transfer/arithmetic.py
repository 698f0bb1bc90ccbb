"""A verifiable task at hand: deterministic arithmetic word problems with their answers (`init --task arithmetic`),
so a project can train with `math_answer` (RLVR) without downloading a data set.

Each problem is `{"prompt": ..., "answer": "<integer>"}`, the answer kept as the prompt's reference. Difficulty:

- 1: one addition or subtraction, numbers 2 to 20;
- 2: one step of any of the four operations (a division always comes out whole), numbers up to 50;
- 3: two steps, numbers up to 200, answers that may be negative.

The same seed, sizes and difficulty give the same problems; training and held-out problems never share a text.

    train, heldout = arithmetic_task(size=512, heldout=64, difficulty=2)
"""

from __future__ import annotations

import random
from typing import Callable

from storage.errors import InvalidInput

DIFFICULTIES = (1, 2, 3)
MAX_SIZE = 100_000
NAMES = ("Ana", "Ben", "Chloe", "Dev", "Elif", "Farid", "Grace", "Hiro", "Ines", "Jonas", "Kemi", "Liam")
ITEMS = ("apples", "marbles", "stickers", "books", "coins", "pencils", "shells", "cards")
INSTRUCTION = " Answer with the final number."

Problem = tuple[str, int]  # (text, answer)


def _add(rng: random.Random, top: int) -> Problem:
    name, item, a, b = rng.choice(NAMES), rng.choice(ITEMS), rng.randint(2, top), rng.randint(2, top)
    return f"{name} has {a} {item} and gets {b} more. How many {item} does {name} have now?", a + b


def _subtract(rng: random.Random, top: int) -> Problem:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    a, b = sorted((rng.randint(2, top), rng.randint(2, top)), reverse=True)
    return f"{name} had {a} {item} and gave {b} away. How many {item} are left?", a - b


def _multiply(rng: random.Random, top: int) -> Problem:
    item, a, b = rng.choice(ITEMS), rng.randint(2, min(top, 12)), rng.randint(2, top)
    return f"A box holds {b} {item}. How many {item} are in {a} boxes?", a * b


def _divide(rng: random.Random, top: int) -> Problem:
    name, item, friends, each = rng.choice(NAMES), rng.choice(ITEMS), rng.randint(2, 12), rng.randint(2, top)
    return (f"{name} shares {friends * each} {item} equally among {friends} friends. How many {item} does each "
            "friend get?"), each


def _packs_and_gift(rng: random.Random, top: int) -> Problem:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    packs, per_pack, given = rng.randint(2, 12), rng.randint(2, top // 4), rng.randint(2, top)
    return (f"{name} buys {packs} packs of {per_pack} {item} and then gives {given} {item} to a friend. How many "
            f"{item} does {name} have now?"), packs * per_pack - given


def _temperature(rng: random.Random, top: int) -> Problem:
    start, fall, rise = rng.randint(-20, 30), rng.randint(5, top // 2), rng.randint(2, top // 4)
    return (f"The temperature was {start} degrees. It fell by {fall} degrees overnight and rose by {rise} degrees "
            "in the morning. What is the temperature now?"), start - fall + rise


def _bakery(rng: random.Random, top: int) -> Problem:
    trays, per_tray, sold = rng.randint(2, 9), rng.randint(5, top // 5), rng.randint(2, top)
    return (f"A bakery bakes {trays} trays of {per_tray} rolls and sells {sold} rolls. How many rolls are left?"), \
        trays * per_tray - sold


LEVELS: dict[int, tuple[int, tuple[Callable[[random.Random, int], Problem], ...]]] = {
    1: (20, (_add, _subtract)),
    2: (50, (_add, _subtract, _multiply, _divide)),
    3: (200, (_packs_and_gift, _temperature, _bakery)),
}


def check_task_sizes(size: int, heldout: int, difficulty: int) -> None:
    """InvalidInput (one line) for sizes or a difficulty the task cannot give."""
    if difficulty not in DIFFICULTIES:
        raise InvalidInput(f"--task-difficulty must be 1, 2 or 3, got {difficulty}")
    for option, value, least in (("--task-size", size, 1), ("--task-heldout", heldout, 0)):
        if not least <= value <= MAX_SIZE:
            raise InvalidInput(f"{option} must be between {least} and {MAX_SIZE}, got {value}")


def arithmetic_task(size: int = 512, heldout: int = 64, difficulty: int = 1,
                    seed: int = 0) -> tuple[list[dict], list[dict]]:
    """`size` training and `heldout` held-out problems, `{prompt, answer}` each, all texts distinct."""
    check_task_sizes(size, heldout, difficulty)
    top, makers = LEVELS[difficulty]
    rng, seen, problems = random.Random(f"arithmetic-{difficulty}-{seed}"), set(), []
    attempts = 0
    while len(problems) < size + heldout:
        attempts += 1
        if attempts > 50 * (size + heldout):
            raise InvalidInput(f"difficulty {difficulty} has fewer than {size + heldout} distinct problems; lower "
                               "--task-size or --task-heldout, or raise --task-difficulty")
        text, answer = rng.choice(makers)(rng, top)
        if text in seen:
            continue
        seen.add(text)
        problems.append({"prompt": text + INSTRUCTION, "answer": str(answer)})
    return problems[:size], problems[size:]
