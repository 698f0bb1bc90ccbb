"""Reward-model data: labelled pairs and rankings as examples, the split by item, bootstrap resamples, token ids and
batches.

    train, val = split_by_pair(examples, val_fraction=0.2, seed=0)
    dataset = tokenize_examples(chat, train)      # {prompt, responses, first, second, target, margin, length} each
    batch = PreferenceCollator(tokenizer.pad_token_id)(rows)  # the N responses after their prompts, C comparisons
    rows_per_step = examples_per_batch(train, pairs_per_batch=16)    # 16 pairs, or 8 rankings of 4

An example is one batch element: a pair (two sequences, one comparison) or a ranking verdict (K sequences, its C(K,2)
comparisons, each weighted 1/C(K,2) so that the ranking counts as one element: InstructGPT's loss). A batch is sized in
pairs' worth of answers read: a ranking of K reads K answers, K/2 pairs' worth, so rankings get the optimiser steps of
the pairs they stand for. Token ids come from the reward model's `ChatFormat` (prompt, then response closed by the
end-of-turn id), the same function that scores rollouts for PPO; nothing is cut: an example longer than the model's
context is left out.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Collection, Sequence, Union

import torch
from datasets import Dataset

from labeling.transfer.conversations import PromptInput

from ..models.chat_format import ChatFormat
from .batches import prompted_rows


@dataclass(frozen=True)
class PreferenceExample:
    """One training label: target p = P(first preferred) = 1, 0 or 0.5; the winner must lead by `margin`."""

    label_id: int
    pair_id: int
    prompt: PromptInput
    first: str
    second: str
    target: float
    margin: float = 0.0

    @property
    def texts(self) -> tuple[str, ...]:
        return (self.first, self.second)

    @property
    def unit(self) -> int:
        """What the split keeps on one side: the pair."""
        return self.pair_id

    @property
    def key(self) -> int:
        """The judgement it comes from, unique among labels and ranking verdicts (what a reward model has seen)."""
        return self.label_id

    @property
    def comparisons(self) -> list[tuple[int, int, float]]:
        return [(0, 1, self.target)]


@dataclass(frozen=True)
class RankingExample:
    """One ranking verdict: its `responses` (the stored order) and `comparisons` (a, b, p = P(a preferred)), every
    one weighted 1/C(K,2); the winner of each must lead by `margin`."""

    label_id: int
    ranking_id: int
    prompt: PromptInput
    responses: tuple[str, ...]
    comparisons: list[tuple[int, int, float]]
    margin: float = 0.0

    @property
    def texts(self) -> tuple[str, ...]:
        return tuple(self.responses)

    @property
    def unit(self) -> str:
        """What the split keeps on one side: the ranking item (every annotator's verdict on it)."""
        return f"ranking-{self.ranking_id}"

    @property
    def key(self) -> str:
        """The judgement it comes from, unique among labels and ranking verdicts (their ids are two sequences)."""
        return f"ranking-label-{self.label_id}"


Example = Union[PreferenceExample, RankingExample]


def example_from_dict(values: dict) -> Example:
    """An example as `dataclasses.asdict` wrote it (a launched phase reads its plan so)."""
    if "responses" in values:
        return RankingExample(**{**values, "responses": tuple(values["responses"]),
                                 "comparisons": [tuple(c) for c in values["comparisons"]]})
    return PreferenceExample(**values)


def unit_order(unit: int | str) -> tuple[bool, int | str]:
    """A sort key over split units (the pairs by id, then the rankings) and over example keys alike."""
    return isinstance(unit, str), unit


def split_by_pair(examples: Sequence[Example], val_fraction: float, seed: int) -> tuple[list[Example], list[Example]]:
    """(train, validation), at least one item training; a pair's labels, and a ranking's verdicts with all their
    comparisons, stay on one side: a seeded shuffle of the items puts round(n x val_fraction) of them in
    validation."""
    units = sorted({e.unit for e in examples}, key=unit_order)
    random.Random(seed).shuffle(units)
    val_units = set(units[:min(round(len(units) * val_fraction), len(units) - 1)])
    return [e for e in examples if e.unit not in val_units], [e for e in examples if e.unit in val_units]


def lineage_split(examples: Sequence[Example], seen_keys: Collection[int | str], held_out: Collection[int | str],
                  val_fraction: float, seed: int) -> tuple[list[Example], list[Example]]:
    """(train, validation) for a model that continues one trained before it (a warm start, incremental training):
    every item its lineage held out (`held_out`: the previous model's validation items) validates again, and of the
    items the lineage has never seen (no label among `seen_keys`) `split_by_pair` holds out its share; the rest train.
    So the lineage is never validated on what it trained on, and its validation set grows with the store."""
    seen_keys = set(seen_keys)
    seen_units = {e.unit for e in examples if e.key in seen_keys}
    fresh = [e for e in examples if e.unit not in seen_units and e.unit not in held_out]
    val_units = set(held_out) | {e.unit for e in split_by_pair(fresh, val_fraction, seed)[1]}
    return [e for e in examples if e.unit not in val_units], [e for e in examples if e.unit in val_units]


def bootstrap(examples: Sequence[Example], seed: int) -> list[Example]:
    """A seeded resample with replacement, as large as `examples` (one ensemble member's training set); a ranking
    verdict is drawn whole, with all its comparisons."""
    rng = random.Random(seed)
    return [examples[rng.randrange(len(examples))] for _ in examples]


def examples_per_batch(examples: Sequence[Example], pairs_per_batch: int) -> int:
    """Examples per optimiser step so that a batch reads as many answers as `pairs_per_batch` pairs: a pair reads 2, a
    ranking of K reads K (K/2 pairs' worth), so round(pairs_per_batch x 2 x examples / answers), at least 1 (only pairs,
    or none: `pairs_per_batch` itself). 150 pairs and the 75 rankings of 4 that read as many answers then train for the
    same steps, each step on about 2 x `pairs_per_batch` sequences."""
    answers = sum(len(e.texts) for e in examples)
    if not answers:
        return pairs_per_batch
    return max(1, round(pairs_per_batch * 2 * len(examples) / answers))


@dataclass
class PreferenceCollator:
    """Batches examples' rows into their N responses after their prompts (`prompted_rows`: each distinct prompt
    once) and their C comparisons: `first`, `second` (indices into the N responses), `target`, `margin` and
    `weight` (1 / the row's comparisons, so each row weighs 1), all (C,)."""

    pad_id: int

    def __call__(self, rows: list[dict]) -> dict[str, torch.Tensor]:
        prompts, responses, first, second, target, margin, weight = [], [], [], [], [], [], []
        for row in rows:
            offset, n = len(responses), len(row["first"])
            prompts.extend([row["prompt"]] * len(row["responses"]))
            responses.extend(row["responses"])
            first.extend(offset + i for i in row["first"])
            second.extend(offset + j for j in row["second"])
            target.extend(row["target"])
            margin.extend(row["margin"])
            weight.extend([1.0 / n] * n)
        return {**prompted_rows(prompts, responses, self.pad_id),
                "first": torch.tensor(first, dtype=torch.long), "second": torch.tensor(second, dtype=torch.long),
                "target": torch.tensor(target, dtype=torch.float32),
                "margin": torch.tensor(margin, dtype=torch.float32),
                "weight": torch.tensor(weight, dtype=torch.float32)}


def tokenize_examples(chat: ChatFormat, examples: Sequence[Example]) -> Dataset | None:
    """The Trainer's dataset, a row per example: {prompt (its token ids), responses (each response's token ids,
    closed by the end-of-turn id: prompt + response is `chat.sequences_ids`), first, second, target, margin (one
    entry per comparison), length (the prompt and the longest response)}."""
    if not examples:
        return None
    prompts = iter(chat.prompts_ids([e.prompt for e in examples]))
    ids = iter(chat.responses_ids([text for e in examples for text in e.texts]))
    rows = []
    for e in examples:
        prompt, responses = next(prompts), [next(ids) for _ in e.texts]
        rows.append({"prompt": prompt, "responses": responses, "first": [c[0] for c in e.comparisons],
                     "second": [c[1] for c in e.comparisons], "target": [float(c[2]) for c in e.comparisons],
                     "margin": [float(e.margin)] * len(e.comparisons),
                     "length": len(prompt) + max(map(len, responses))})
    return Dataset.from_list(rows)


def split_by_fit(chat: ChatFormat, examples: Sequence[Example],
                 context: int | None) -> tuple[list[Example], list[Example]]:
    """(fitting, too long): the examples whose prompt and longest response fit the model's `context`, and the others,
    left out (nothing is cut). With no known context, every example fits."""
    if context is None or not examples:
        return list(examples), []
    prompts = [e.prompt for e in examples for _ in e.texts]
    responses = chat.responses_ids([text for e in examples for text in e.texts])
    counts = iter(len(p) + len(r) for p, r in zip(chat.prompts_ids(prompts), responses, strict=True))
    tokens = [max(next(counts) for _ in e.texts) for e in examples]
    return ([e for e, n in zip(examples, tokens, strict=True) if n <= context],
            [e for e, n in zip(examples, tokens, strict=True) if n > context])
