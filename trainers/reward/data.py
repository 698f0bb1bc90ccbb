"""Reward-model data: labelled pairs as examples, the split by pair, bootstrap resamples, token ids and batches.

    train, val = split_by_pair(examples, val_fraction=0.2, seed=0)
    dataset = tokenize_examples(chat, train, context=512)     # {first_ids, second_ids, target, margin, length}
    batch = PreferenceCollator(tokenizer.pad_token_id)(rows)  # input_ids (2B, T): the B firsts, then the B seconds

Token ids come from the reward model's `ChatFormat` (prompt, then response closed by the end-of-turn id), the same
function that scores rollouts for PPO; nothing is cut: a pair longer than the model's context is refused.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence

import torch
from datasets import Dataset

from labeling.conversations import PromptInput
from storage.errors import InvalidInput

from ..models.chat_format import ChatFormat


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


def split_by_pair(examples: Sequence[PreferenceExample], val_fraction: float, seed: int,
                  stable: bool = False) -> tuple[list[PreferenceExample], list[PreferenceExample]]:
    """(train, validation), at least one pair training. By default a seeded shuffle of the pair ids puts
    round(n x val_fraction) of the pairs in validation; `stable`: a pair validates when its own seeded draw is below
    `val_fraction`, so it keeps its side as labels are added (a model warm-started from one trained on fewer labels
    is never validated on pairs it trained on)."""
    pair_ids = sorted({e.pair_id for e in examples})
    if stable:
        draws = {pair_id: random.Random(f"{seed}/{pair_id}").random() for pair_id in pair_ids}
        val_pairs = {pair_id for pair_id, draw in draws.items() if draw < val_fraction}
        if val_pairs and len(val_pairs) == len(pair_ids):
            val_pairs.discard(max(pair_ids, key=draws.get))
    else:
        random.Random(seed).shuffle(pair_ids)
        val_pairs = set(pair_ids[:min(round(len(pair_ids) * val_fraction), len(pair_ids) - 1)])
    return [e for e in examples if e.pair_id not in val_pairs], [e for e in examples if e.pair_id in val_pairs]


def bootstrap(examples: Sequence[PreferenceExample], seed: int) -> list[PreferenceExample]:
    """A seeded resample with replacement, as large as `examples` (one ensemble member's training set)."""
    rng = random.Random(seed)
    return [examples[rng.randrange(len(examples))] for _ in examples]


def pad_right(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask), both (N, T), padded on the right."""
    width = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)  # (N, T)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)  # (N, T)
    for i, row in enumerate(rows):
        input_ids[i, :len(row)] = torch.tensor(row, dtype=torch.long)
        attention_mask[i, :len(row)] = 1
    return input_ids, attention_mask


@dataclass
class PreferenceCollator:
    """Batches {first_ids, second_ids, target, margin} into input_ids (2B, T): the B firsts, then the B seconds."""

    pad_id: int

    def __call__(self, rows: list[dict]) -> dict[str, torch.Tensor]:
        sequences = [r["first_ids"] for r in rows] + [r["second_ids"] for r in rows]
        input_ids, attention_mask = pad_right(sequences, self.pad_id)
        return {"input_ids": input_ids, "attention_mask": attention_mask,
                "target": torch.tensor([r["target"] for r in rows], dtype=torch.float32),
                "margin": torch.tensor([r["margin"] for r in rows], dtype=torch.float32)}


def tokenize_examples(chat: ChatFormat, examples: Sequence[PreferenceExample]) -> Dataset | None:
    """The Trainer's dataset: {first_ids, second_ids, target, margin, length} per example (length: the longer side)."""
    if not examples:
        return None
    prompts = [e.prompt for e in examples]
    firsts = chat.sequences_ids(prompts, [e.first for e in examples])
    seconds = chat.sequences_ids(prompts, [e.second for e in examples])
    return Dataset.from_list([{"first_ids": f, "second_ids": s, "target": e.target, "margin": e.margin,
                               "length": max(len(f), len(s))}
                              for f, s, e in zip(firsts, seconds, examples, strict=True)])


def check_examples_fit(chat: ChatFormat, examples: Sequence[PreferenceExample], context: int | None,
                       model: str = "reward model") -> list[int]:
    """Raise InvalidInput naming the first label whose prompt and longer response exceed the `model`'s `context`;
    returns each example's prompt length in tokens (none without a context)."""
    if context is None or not examples:
        return []
    prompts = chat.prompts_ids([e.prompt for e in examples])
    firsts = chat.responses_ids([e.first for e in examples])
    seconds = chat.responses_ids([e.second for e in examples])
    for example, prompt, first, second in zip(examples, prompts, firsts, seconds, strict=True):
        tokens = len(prompt) + max(len(first), len(second))
        if tokens > context:
            raise InvalidInput(f"label {example.label_id} (pair {example.pair_id}): prompt and response take {tokens} "
                               f"tokens, over the {model}'s context of {context}; nothing is cut, so undo that "
                               f"label or start the {model} from a longer-context model")
    return [len(prompt) for prompt in prompts]
