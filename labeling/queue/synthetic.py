"""Synthetic annotators: an oracle that labels queued pairs from a scoring function, through the UI's code path.

The oracle takes pairs with `labeling.queue.annotation.next_pair` and votes with
`labeling.queue.annotation.submit_label`, exactly as a person in the Label tab does (same reservations, same left/right
coin flip, same stored label), as annotator `oracle`. In a loop it is given the loop's job (`job_id`) and labels that
job's items only, never another job's nor the people's queue. It prefers the response with the higher score, votes tie
when the scores are equal and, with probability `noise`, votes left or right at random instead (the label-noise model of
Christiano et al.).

    oracle = OracleAnnotator.from_spec("assets.lexicon:sentiment_score", noise=0.1, seed=0)
    label_ids = oracle.label(store, 200)
"""

from __future__ import annotations

import importlib
import math
import numbers
import random
import uuid
from dataclasses import dataclass, field
from typing import Callable

from labeling.queue.annotation import ShownPair, next_pair, submit_label
from labeling.queue.ranking import ShownRanking, next_ranking, submit_ranking
from storage import Store
from storage.errors import InvalidInput

DEFAULT_ORACLE = "assets.lexicon:sentiment_score"
ORACLE_NAME = "oracle"  # the annotator its labels carry

Scorer = Callable[[str], float]


def brevity_score(text: str) -> float:
    """An oracle for models with no task of their own (the tiny chat models of the tests and the GPU check, whose
    answers are random sub-words): shorter answers are better, minus the number of words."""
    return -float(len(text.split()))


def load_scorer(spec: str = DEFAULT_ORACLE) -> Scorer:
    """The function named by `module:function` (it scores one response text; higher is better)."""
    module_name, sep, function_name = spec.partition(":")
    if not sep or not module_name or not function_name:
        raise InvalidInput(f"the oracle {spec!r} must be written module:function, such as {DEFAULT_ORACLE}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidInput(f"cannot import module {module_name!r} for the oracle: {exc}; check the name and "
                           "PYTHONPATH") from exc
    function = getattr(module, function_name, None)
    if not callable(function):
        raise InvalidInput(f"module {module_name!r} has no function {function_name!r}; name a function that scores "
                           "a text")
    return function


@dataclass
class OracleAnnotator:
    """Labels pairs from `score(response) -> number`; `noise` is the fraction of random left/right votes."""

    score: Scorer
    name: str = ORACLE_NAME
    noise: float = 0.0
    seed: int = 0
    graded: bool = False  # add a strength to left/right votes (labeling.queue.strength), from the score difference
    rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not 0.0 <= self.noise <= 1.0:
            raise InvalidInput(f"the oracle's noise rate must be between 0 and 1, got {self.noise}")
        self.rng = random.Random(self.seed)

    @classmethod
    def from_spec(cls, spec: str = DEFAULT_ORACLE, noise: float = 0.0, seed: int = 0,
                  name: str = ORACLE_NAME) -> OracleAnnotator:
        return cls(load_scorer(spec), name=name, noise=noise, seed=seed)

    def choose(self, shown: ShownPair) -> str:
        """The vote for what is on screen: left, right or tie."""
        if self.noise and self.rng.random() < self.noise:
            return self.rng.choice(("left", "right"))
        left, right = self._score(shown.left), self._score(shown.right)
        return "left" if left > right else "right" if right > left else "tie"

    def label(self, store: Store, n: int, selector: str | None = None, job_id: int | None = None) -> list[int]:
        """Label up to `n` queued pairs (fewer when the queue runs dry; with `selector`, only pairs of that
        selector; with `job_id`, only the pairs that loop job queued); returns the new label ids."""
        if n < 0:
            raise InvalidInput(f"the number of labels must be 0 or more, got {n}")
        label_ids = []
        while len(label_ids) < n and (shown := next_pair(store, self.name, self.rng, selector, job_id)) is not None:
            choice = self.choose(shown)
            strength = self.strength(shown) if self.graded and choice != "tie" else None
            label_ids.append(submit_label(store, self.name, shown.pair_id, choice, str(uuid.uuid4()),
                                          strength=strength))
        return label_ids

    def strength(self, shown: ShownPair) -> str:
        """How much better the winner is, from the score difference d (the lexicon's counts: d >= 3 much better,
        2 better, 1 slightly better, less about the same)."""
        d = abs(self._score(shown.left) - self._score(shown.right))
        return "much_better" if d >= 3 else "better" if d >= 2 else "slightly_better" if d >= 1 else "about_same"

    def order(self, shown: ShownRanking) -> str:
        """The ranking of what is on screen: letters best first, equal scores tied (`=`); with probability `noise`
        a random order."""
        letters = shown.letters
        if self.noise and self.rng.random() < self.noise:
            return "".join(self.rng.sample(letters, len(letters)))
        scores = [self._score(text) for text in shown.responses]
        best_first = sorted(range(len(letters)), key=lambda i: -scores[i])
        return "".join(("=" if n and scores[i] == scores[best_first[n - 1]] else "") + letters[i]
                       for n, i in enumerate(best_first))

    def rank(self, store: Store, n: int, job_id: int | None = None) -> list[int]:
        """Judge up to `n` queued rankings (fewer when none is left; with `job_id`, only the rankings that loop job
        queued); returns the new ranking verdicts' ids."""
        if n < 0:
            raise InvalidInput(f"the number of rankings must be 0 or more, got {n}")
        label_ids = []
        while len(label_ids) < n and (shown := next_ranking(store, self.name, job_id)) is not None:
            label_ids.append(submit_ranking(store, self.name, shown.ranking_id, self.order(shown), str(uuid.uuid4())))
        return label_ids

    def _score(self, text: str) -> float:
        value = self.score(text)
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
            raise InvalidInput(f"the oracle's scoring function returned {value!r}; it must return a finite number")
        return float(value)
