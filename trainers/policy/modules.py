"""The trained neural modules of the policy optimisers: `PolicyModel`, the actor alone (GRPO), and
`PolicyWithValueHead`, the actor and its critic (PPO). Both return the logits that predict each response token; the
critic also returns the value of the state before each.

    model = PolicyWithValueHead(policy)
    logits, values = model(input_ids, attention_mask, position_ids(attention_mask), response_start)  # (B, R, V), (B, R)
"""

from __future__ import annotations

import torch
from torch import nn


class PolicyModel(nn.Module):
    """The actor alone (GRPO has no critic): a causal LM giving the logits that predict each response token."""

    def __init__(self, policy: nn.Module):
        super().__init__()
        self.policy = policy

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                response_start: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Logits predicting each response token (B, R, V), and no values."""
        output = self.policy(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                             use_cache=False, logits_to_keep=input_ids.shape[1] - response_start + 1)
        return output.logits[:, :-1], None

    def values(self, hidden: torch.Tensor) -> torch.Tensor | None:
        """The values of states given as last hidden states (B, R, H): none without a critic."""
        return None


class PolicyWithValueHead(PolicyModel):
    """The actor and the critic: a causal LM and a zero-initialised scalar head on its last hidden state."""

    def __init__(self, policy: nn.Module):
        super().__init__(policy)
        self.value_head = nn.Linear(policy.config.hidden_size, 1)
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                response_start: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits predicting each response token (B, R, V) and the values of the states before them (B, R)."""
        output = self.policy(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                             output_hidden_states=True, use_cache=False,
                             logits_to_keep=input_ids.shape[1] - response_start + 1)
        hidden = output.hidden_states[-1][:, response_start - 1:-1]  # (B, R, H)
        return output.logits[:, :-1], self.values(hidden)

    def values(self, hidden: torch.Tensor) -> torch.Tensor:
        """The critic's values (B, R) of states given as last hidden states (B, R, H)."""
        return self.value_head(hidden).squeeze(-1).float()
