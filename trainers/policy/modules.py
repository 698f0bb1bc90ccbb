"""The trained neural modules of the policy optimisers: `PolicyModel`, the actor alone (GRPO), and
`PolicyWithValueHead`, the actor and its critic (PPO). Both return the logits that predict each response token; the
critic also returns the value of the state before each. `response_pass` is their forward (and the reference's): a
prompt several rows share, as GRPO's groups do, is read once.

    model = PolicyWithValueHead(policy)
    logits, values = model(input_ids, attention_mask, position_ids(attention_mask), response_start)  # (B, R, V), (B, R)
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import DynamicCache

from ..models.sampling import cache_keyword, distinct_rows


def response_pass(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                  position_ids: torch.Tensor, response_start: int, hidden_states: bool = False
                  ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The causal LM's logits (B, R, V) at the positions that predict each response token (the columns from
    `response_start` on), and with `hidden_states` the last hidden states there (B, R, H). Rows that share their
    prompt (same ids and mask) read it once: its keys and values go to each of its rows, which then read only their
    responses: the same outputs, gradients summed over the rows, fewer tokens through the model. Gradient
    checkpointing drops a layer's cache, so under it every row is read whole."""
    prompt = slice(0, response_start)
    distinct, copies = distinct_rows(input_ids[:, prompt], attention_mask[:, prompt])
    # transformers' `is_activation_checkpointing` (named `is_gradient_checkpointing` before 5.2x), on any module
    checkpointing = torch.is_grad_enabled() and any(getattr(m, "gradient_checkpointing", False)
                                                    for m in model.modules())
    if len(distinct) == len(copies) or checkpointing:
        output = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False,
                       output_hidden_states=hidden_states, logits_to_keep=input_ids.shape[1] - response_start + 1)
        hidden = output.hidden_states[-1][:, response_start - 1:-1] if hidden_states else None
        return output.logits[:, :-1], hidden
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    cache, keyword = DynamicCache(config=base.config), cache_keyword(model)
    head = model(input_ids=input_ids[distinct, prompt], attention_mask=attention_mask[distinct, prompt],
                 position_ids=position_ids[distinct, prompt], use_cache=True, logits_to_keep=1,
                 output_hidden_states=hidden_states, **{keyword: cache})
    cache.reorder_cache(copies)  # each row gets its prompt's keys and values
    tail = model(input_ids=input_ids[:, response_start:], attention_mask=attention_mask,
                 position_ids=position_ids[:, response_start:], use_cache=True, output_hidden_states=hidden_states,
                 **{keyword: cache})
    logits = torch.cat([head.logits[copies], tail.logits[:, :-1]], dim=1)  # the prompt's last position predicts token 0
    if not hidden_states:
        return logits, None
    return logits, torch.cat([head.hidden_states[-1][copies][:, -1:], tail.hidden_states[-1][:, :-1]], dim=1)


class PolicyModel(nn.Module):
    """The actor alone (GRPO has no critic): a causal LM giving the logits that predict each response token."""

    def __init__(self, policy: nn.Module):
        super().__init__()
        self.policy = policy

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                response_start: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Logits predicting each response token (B, R, V), and no values."""
        logits, _ = response_pass(self.policy, input_ids, attention_mask, position_ids, response_start)
        return logits, None

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
        logits, hidden = response_pass(self.policy, input_ids, attention_mask, position_ids, response_start, True)
        return logits, self.values(hidden)  # (B, R, V), (B, R)

    def values(self, hidden: torch.Tensor) -> torch.Tensor:
        """The critic's values (B, R) of states given as last hidden states (B, R, H)."""
        return self.value_head(hidden).squeeze(-1).float()
