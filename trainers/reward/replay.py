"""Incremental reward training's share of the labels: the labels the newest reward model has not seen, plus a seeded
replay sample of the older ones, so a round's reward cost follows its new labels rather than the whole store
(Christiano et al. 2017 train the reward model continuously as labels arrive; the replay keeps it from forgetting).

    new, replayed = incremental_share(examples, seen_label_ids={1, 2, 3}, replay=100, seed=7)
"""

from __future__ import annotations

import random
from typing import Collection, Sequence

from .data import PreferenceExample


def incremental_share(examples: Sequence[PreferenceExample], seen_label_ids: Collection[int], replay: int,
                      seed: int) -> tuple[list[PreferenceExample], list[PreferenceExample]]:
    """(new, replayed): the examples whose label the previous model never saw, in their order, and a seeded sample of
    `replay` of the others (all of them when fewer), in label order. Each seed draws its own sample, so a loop whose
    rounds have their own seeds replays every older label sooner or later."""
    seen = set(seen_label_ids)
    new = [e for e in examples if e.label_id not in seen]
    old = sorted((e for e in examples if e.label_id in seen), key=lambda e: e.label_id)
    if replay >= len(old):
        return new, old
    picked = random.Random(f"replay/{seed}").sample(range(len(old)), replay)
    return new, [old[i] for i in sorted(picked)]
