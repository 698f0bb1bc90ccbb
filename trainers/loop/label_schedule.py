"""A loop's label schedule: the labels each round collects (N in the first round, then N x decay^i), and the N whose
schedule spends a label budget over the rounds."""

from __future__ import annotations


def labels_in_round(first: int, decay: float, index: int) -> int:
    """The labels round `index` (0 for the first) collects: `first` x decay^index, rounded, at least 1."""
    return max(1, round(first * decay**index))


def first_round_labels(total: int, decay: float, rounds: int) -> int:
    """The first round's labels N whose schedule (N, N x decay, ...) over `rounds` rounds comes closest to `total`
    (the smaller N on a tie). The schedule's sum grows with N, so N is found by bisection."""
    def schedule_sum(n: int) -> int:
        return sum(labels_in_round(n, decay, i) for i in range(rounds))

    low, high = 1, max(1, total)  # the first N whose sum reaches `total` lies in [low, high]
    while low < high:
        middle = (low + high) // 2
        low, high = (middle + 1, high) if schedule_sum(middle) < total else (low, middle)
    return min((n for n in (low - 1, low) if n >= 1), key=lambda n: abs(schedule_sum(n) - total))


def schedule_line(first: int, decay: float, rounds: int) -> str:
    """The label schedule in words: "100 + 30 + 9 = 139 labels over 3 rounds"."""
    counts = [labels_in_round(first, decay, i) for i in range(rounds)]
    return f"{' + '.join(map(str, counts))} = {sum(counts)} labels over {rounds} round{'s' * (rounds != 1)}"
