"""Tensors a reward model reads: responses after their prompts, each distinct prompt once, or whole rows. Apart from
`data` (examples, datasets), so that scoring rollouts imports no `datasets`, and with it no pandas or pyarrow (~100 MB
in every PPO/GRPO process).

    batch = prompted_rows(prompts_ids, responses_ids, pad_id)   # scorer.prompted_scores reads it
    input_ids, attention_mask = whole_rows(batch)                # each response after its prompt in one row
"""

from __future__ import annotations

from typing import Sequence

import torch

from ..models.generation import left_pad


def pad_right(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask), both (N, T), padded on the right."""
    width = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)  # (N, T)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)  # (N, T)
    for i, row in enumerate(rows):
        input_ids[i, :len(row)] = torch.tensor(row, dtype=torch.long)
        attention_mask[i, :len(row)] = 1
    return input_ids, attention_mask


def prompted_rows(prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]],
                  pad_id: int) -> dict[str, torch.Tensor]:
    """Responses after their prompts, each distinct prompt once: `prompt_ids` (U, P) padded on the left,
    `response_ids` (N, R) on the right, their masks, and `prompt_of` (N,), the prompt row of each response
    (`trainers.reward.scorer.prompted_scores` reads them; `whole_rows` makes them prompt + response rows again)."""
    index: dict[tuple[int, ...], int] = {}
    prompt_of = [index.setdefault(tuple(p), len(index)) for p in prompts]
    prompt_ids, prompt_mask = left_pad([list(p) for p in index], pad_id)
    response_ids, response_mask = pad_right(responses, pad_id)
    return {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "response_ids": response_ids,
            "response_mask": response_mask, "prompt_of": torch.tensor(prompt_of, dtype=torch.long)}


def whole_rows(batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask) (N, P + R): each response after its prompt in one row, padded on both sides."""
    owner = batch["prompt_of"]
    return (torch.cat([batch["prompt_ids"][owner], batch["response_ids"]], 1),
            torch.cat([batch["prompt_mask"][owner], batch["response_mask"]], 1))
