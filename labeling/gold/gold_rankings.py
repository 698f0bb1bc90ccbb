"""Gold rankings read from a file in the `export --format rankings` format (docs/data.md): each row `{prompt,
responses, order, ties}` with 3 to 6 different responses and their gold order, best first. `order` is the indices of
`responses` best to worst and `ties` groups of indices tied (each group neighbours in `order`); `order` may instead be
the letters notation of the ranking API (`"BA=CD"`, A the first response), its ties written with `=`. A row with
`all_bad` true has no order to check annotators against and is refused, as is one whose order ties every answer.

    for row in iter_gold_rankings(path):   # GoldRankingRow(prompt, responses, tiers, messages); a bad row raises
        ...
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from labeling.files.data_files import read_rows
from labeling.files.lines import UnreadableRow
from labeling.queue.ranking import LETTERS, parse_order
from labeling.transfer.conversations import answer_text
from labeling.transfer.importing import MAX_PROMPT_CHARS, check_text, prompt_and_turns
from labeling.transfer.preference_formats import MAX_RESPONSE_CHARS
from storage.errors import InvalidInput
from storage.gold_rankings import GoldRankingRow

COLUMNS = ("prompt", "responses", "order", "ties", "all_bad")
MIN_GOLD_K, MAX_GOLD_K = 3, 6


def holds_rankings(path: Path) -> bool:
    """Is the first row of a checked data file a ranking (it has `responses`), not a preference pair?"""
    for _, row in read_rows(path, COLUMNS, ()):
        return isinstance(row, dict) and row.get("responses") is not None
    return False


def iter_gold_rankings(path: Path) -> Iterator[GoldRankingRow]:
    """The rows of a checked rankings file as gold rankings, streamed; a bad row raises InvalidInput naming the file
    and its line (row, in Parquet and Arrow)."""
    count = 0
    for where, row in read_rows(path, COLUMNS, ("prompt", "responses", "order")):
        count += 1
        try:
            if isinstance(row, UnreadableRow):
                raise InvalidInput(f"{where}: {row.problem}")
            yield gold_ranking_from_row(row, where)
        except InvalidInput as exc:
            raise InvalidInput(f"{path} {exc}; fix or remove the row, nothing was imported") from None
    if count == 0:
        raise InvalidInput(f"{path} holds no rows; it needs rows with prompt, responses and order")


def gold_ranking_from_row(row: object, where: str) -> GoldRankingRow:
    """A checked gold ranking of one row (`where` names it in errors)."""
    if not isinstance(row, dict):
        raise InvalidInput(f"{where}: a ranking row is a JSON object with prompt, responses and order")
    for column in ("prompt", "responses", "order"):
        if row.get(column) is None:
            raise InvalidInput(f"{where}: {column!r} is missing; a ranking row holds prompt, responses and order")
    prompt, messages = prompt_and_turns(row["prompt"], where)
    check_text(prompt, "'prompt'", MAX_PROMPT_CHARS, where)
    given = row["responses"]
    if not isinstance(given, list) or not MIN_GOLD_K <= len(given) <= MAX_GOLD_K:
        size = f"{len(given)} answers" if isinstance(given, list) else type(given).__name__
        raise InvalidInput(f"{where}: 'responses' holds {size}; a gold ranking ranks {MIN_GOLD_K} to {MAX_GOLD_K}")
    responses = tuple(answer_text(value, "responses", where) for value in given)
    for index, text in enumerate(responses):
        check_text(text, f"response {LETTERS[index]}", MAX_RESPONSE_CHARS, where)
        if not text.strip():
            raise InvalidInput(f"{where}: response {LETTERS[index]} is empty; fill it in or remove the row")
        if responses.index(text) != index:
            raise InvalidInput(f"{where}: responses {LETTERS[responses.index(text)]} and {LETTERS[index]} are the "
                               "same text; a ranking needs different answers")
    if row.get("all_bad") not in (None, False):
        raise InvalidInput(f"{where}: an all-bad row has no order to check annotators against; leave it out")
    tiers = _tiers(row["order"], row.get("ties") or [], len(responses), where)
    if len(tiers) < 2:
        raise InvalidInput(f"{where}: the order ties every answer, so it checks nothing; rank some apart")
    return GoldRankingRow(prompt, responses, tiers, messages)


def _tiers(order: object, ties: object, k: int, where: str) -> list[list[int]]:
    """Tiers of indices, best first, from `order` (indices, or letters with `=`) and `ties` (index groups)."""
    if isinstance(order, str):
        try:
            return parse_order(order, k)[1] or []
        except InvalidInput as exc:
            raise InvalidInput(f"{where}: 'order' {exc}") from None
    whole = isinstance(order, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in order)
    if not whole or sorted(order) != list(range(k)):
        raise InvalidInput(f"{where}: 'order' must list each index of the {k} responses (0 to {k - 1}) once, best "
                           f"first, such as {list(range(k))[::-1]}; got {str(order)[:60]}")
    place = {index: n for n, index in enumerate(order)}
    tiers = [[index] for index in order]
    if not isinstance(ties, list) or not all(isinstance(group, list) for group in ties):
        raise InvalidInput(f"{where}: 'ties' must be a list of groups of tied indices, such as [[2, 1]]")
    for group in ties:
        spots = sorted(place.get(i, -1) if isinstance(i, int) and not isinstance(i, bool) else -1 for i in group)
        if len(group) < 2 or spots[0] < 0 or spots != list(range(spots[0], spots[0] + len(group))):
            raise InvalidInput(f"{where}: tie group {str(group)[:40]} must name 2 or more indices that neighbour in "
                               "'order'")
        if any(len(tiers[s]) != 1 or tiers[s][0] not in group for s in spots):
            raise InvalidInput(f"{where}: index groups in 'ties' overlap; put each index in one group")
        first = tiers[spots[0]]
        for s in spots[1:]:
            first.extend(tiers[s])
            tiers[s] = []
    return [sorted(tier) for tier in tiers if tier]
