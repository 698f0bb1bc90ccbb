"""Small helpers shared by tests: start servers, wait on workers, label pairs the way the Label tab does."""

import random
import socket
import time
import uuid
from typing import Mapping

from labeling.annotation import Choice, next_pair, submit_label
from storage import Outcome, Store
from storage.generations import get_generations
from storage.pairs import get_pair


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(condition, timeout: float = 120, every: float = 0.1):
    """Poll `condition()` until it returns something truthy (returned), or fail after `timeout` seconds."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every)
    raise AssertionError("timed out waiting")


class _FixedCoin(random.Random):
    """`next_pair`'s left/right coin, fixed: a new reservation shows the first generation left, or always right."""

    def __init__(self, first_on_left: bool):
        super().__init__(0)
        self.value = 0.0 if first_on_left else 0.75

    def random(self) -> float:
        return self.value


def label_pairs(store: Store, annotator: str, outcomes: Mapping[int, Outcome], first_on_left: bool = True,
                decision_ms: int | None = None) -> dict[int, int]:
    """Label pairs as `annotator` through the Label tab's path (`next_pair`, then `submit_label`); returns
    {pair id: label id}.

    `outcomes` maps pair id -> outcome (relative to the pair's first/second); each pair is shown with its first
    generation on the left (`first_on_left`) or on the right, and the on-screen choice meaning that outcome is sent.
    The queue hands pairs in its own order (newest round, highest score, lowest id): a pair it hands that is not in
    `outcomes`, or an empty queue, fails the test. Two annotators on one pair need overlap 2
    (`update_queue_settings`), as in the product.
    """
    coin = _FixedCoin(first_on_left)
    label_ids: dict[int, int] = {}
    while len(label_ids) < len(outcomes):
        wanted = sorted(set(outcomes) - set(label_ids))
        shown = next_pair(store, annotator, rng=coin)
        assert shown is not None, f"the queue has nothing for {annotator}; pairs {wanted} stay unlabeled"
        assert shown.pair_id in wanted, (f"the queue handed {annotator} pair {shown.pair_id}, not one of {wanted}: "
                                         "label pairs in the queue's order")
        pair = get_pair(store, shown.pair_id)
        left_id = pair.first_id if first_on_left else pair.second_id
        assert shown.left == get_generations(store, [left_id])[left_id].text, (
            f"{annotator} held pair {shown.pair_id} with the other side on the left")
        choice = next(c for c in Choice if c.outcome(pair.first_id, left_id) is Outcome(outcomes[shown.pair_id]))
        label_ids[shown.pair_id] = submit_label(store, annotator, shown.pair_id, choice.value, str(uuid.uuid4()),
                                                decision_ms)
    return label_ids
