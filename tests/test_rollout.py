"""Rollout bookkeeping (trainers/policy/rollout.py): prompts padded on the left, responses cut after any end id."""

import torch

from trainers.models.generation import left_pad
from trainers.policy.rollout import cut_at_end


def test_left_pad_and_cut_at_any_end_id():
    ids, mask = left_pad([[5, 6, 7], [8]], pad=1)
    assert ids.tolist() == [[5, 6, 7], [1, 1, 8]] and mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    responses = torch.tensor([[4, 0, 9, 9], [4, 5, 6, 7], [0, 3, 0, 3], [4, 3, 0, 9]])  # end ids 0 and 3
    kept, mask, ended = cut_at_end(responses, end_ids=(0, 3), pad=1)
    assert kept.tolist() == [[4, 0, 1, 1], [4, 5, 6, 7], [0, 1, 1, 1], [4, 3, 1, 1]]
    assert mask.tolist() == [[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 0, 0]]
    assert ended.tolist() == [True, False, True, True]
