"""How overlapped labels train (project setting `overlap_training`): `each` (the default) trains every annotator's
label on a pair as an example of its own; `majority` trains one example per pair, the outcome most of its annotators
gave (a draw between outcomes trains as a tie). Ranking verdicts always train each.

    labels = training_view(store, training_labels(store))
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import replace

from storage import Store
from storage.errors import InvalidInput
from storage.labels import LabeledPair
from storage.settings import get_setting, set_setting
from storage.types import Outcome

SETTING = "overlap_training"
MODES = ("each", "majority")


def overlap_training(store: Store) -> str:
    return get_setting(store, SETTING) or MODES[0]


def set_overlap_training(store: Store, mode: str) -> str:
    if mode not in MODES:
        raise InvalidInput(f"overlap_training must be one of {', '.join(MODES)}")
    set_setting(store, SETTING, mode)
    return mode


def majority_labels(labels: list[LabeledPair]) -> list[LabeledPair]:
    """One label per pair (its first label's row, in that label's place): the most common outcome among the pair's
    labels (skips aside), a tie when two outcomes are equally common; the margin of the first label with it."""
    by_pair: dict[int, list[LabeledPair]] = defaultdict(list)
    for label in labels:
        if label.outcome is not Outcome.SKIP:
            by_pair[label.pair_id].append(label)
    chosen = []
    for label in labels:
        group = by_pair.get(label.pair_id)
        if not group or group[0] is not label:
            continue
        counts = Counter(lab.outcome for lab in group).most_common()
        outcome = counts[0][0] if len(counts) == 1 or counts[0][1] > counts[1][1] else Outcome.TIE
        carrier = next((lab for lab in group if lab.outcome is outcome), label)
        chosen.append(replace(label, outcome=outcome, margin=carrier.margin if carrier.outcome is outcome else None))
    return chosen


def training_view(store: Store, labels: list[LabeledPair]) -> list[LabeledPair]:
    """`labels` as the project trains them: each, or one per pair by majority."""
    return majority_labels(labels) if overlap_training(store) == "majority" else labels
