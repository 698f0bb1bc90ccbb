"""Incremental reward training's share of the labels: the labels the newest reward model has not seen, plus a seeded
replay sample of the older ones, so a round's reward cost follows its new labels rather than the whole store
(Christiano et al. 2017 train the reward model continuously as labels arrive; the replay keeps it from forgetting).

    new, replayed = incremental_share(examples, seen_label_ids={1, 2, 3}, replay=100, seed=7)
"""

from __future__ import annotations

import random
from typing import Collection, Sequence

from .data import Example, unit_order


def incremental_share(examples: Sequence[Example], seen_label_ids: Collection[int | str], replay: int,
                      seed: int) -> tuple[list[Example], list[Example]]:
    """(new, replayed): the examples whose label the previous model never saw, in their order, and a seeded sample of
    `replay` of the others (all of them when fewer), in label order. Each seed draws its own sample, so a loop whose
    rounds have their own seeds replays every older label sooner or later."""
    seen = set(seen_label_ids)
    new = [e for e in examples if e.key not in seen]
    old = sorted((e for e in examples if e.key in seen), key=lambda e: unit_order(e.key))
    if replay >= len(old):
        return new, old
    picked = random.Random(f"replay/{seed}").sample(range(len(old)), replay)
    return new, [old[i] for i in sorted(picked)]
