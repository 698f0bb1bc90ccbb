"""The trained neural modules of the policy optimisers: `PolicyModel`, the actor alone (GRPO), and
`PolicyWithValueHead`, the actor and its critic (PPO). Both return the logits that predict each response token; the
critic also returns the value of the state before each. `response_pass` is their forward (and the reference's): a
prompt several rows share, as GRPO's groups do, is read once, and responses in chunks of like length.

    model = PolicyWithValueHead(policy)
    logits, values = model(input_ids, attention_mask, position_ids(attention_mask), response_start)  # (B, R, V), (B, R)
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import DynamicCache

from ..models.sampling import CPU_PASS_TOKENS, cache_keyword, distinct_rows, length_chunks


def response_pass(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                  position_ids: torch.Tensor, response_start: int, hidden_states: bool = False
                  ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The causal LM's logits (B, R, V) at the positions that predict each response token (the columns from
    `response_start` on), and with `hidden_states` the last hidden states there (B, R, H); zeros past the longest
    response of a row's chunk. On a CPU the rows go in chunks of like response length (`length_chunks`), each cut
    after its longest response, so the pads after shorter ones are not read; a response's last token predicts
    nothing and is not read either. Rows that share a prompt (GRPO's groups) read it once: its keys and values go to
    each of its rows, which then read only their responses. The same outputs and gradients as whole rows, fewer
    tokens through the model. Gradient checkpointing drops a layer's cache and sliding-window layers keep their own,
    so there each row is read whole (chunked all the same)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    rows, width = input_ids.shape[0], input_ids.shape[1] - response_start
    lengths = attention_mask[:, response_start:].sum(-1).clamp(min=1).tolist()  # (B,)
    chunks = length_chunks(lengths, CPU_PASS_TOKENS) if input_ids.device.type == "cpu" else []
    chunks = chunks if len(chunks) > 1 else [list(range(rows))]  # one chunk: every row, in order, to the longest
    prompt = slice(0, response_start)
    distinct, copies = distinct_rows(input_ids[:, prompt], attention_mask[:, prompt])
    # transformers' `is_activation_checkpointing` (named `is_gradient_checkpointing` before 5.2x), on any module
    checkpointing = torch.is_grad_enabled() and any(getattr(m, "gradient_checkpointing", False)
                                                    for m in model.modules())
    shared = len(distinct) < rows and not checkpointing and not any(DynamicCache(config=base.config).is_sliding)
    if shared:
        keyword, prompt_cache = cache_keyword(model), DynamicCache(config=base.config)
        head = model(input_ids=input_ids[distinct, prompt], attention_mask=attention_mask[distinct, prompt],
                     position_ids=position_ids[distinct, prompt], use_cache=True, logits_to_keep=1,
                     output_hidden_states=hidden_states, **{keyword: prompt_cache})  # the prompt's last position
    indices, logits, hidden = [], [], []  # per chunk: its rows, their outputs (n, its longest, V or H)
    for chunk in chunks:
        index, longest = torch.tensor(chunk, device=input_ids.device), max(lengths[i] for i in chunk)
        end = response_start + longest - 1  # the inputs: up to the longest response's last token but one
        indices.append(index)
        if not shared:
            output = model(input_ids=input_ids[index, :end], attention_mask=attention_mask[index, :end],
                           position_ids=position_ids[index, :end], use_cache=False, logits_to_keep=longest,
                           output_hidden_states=hidden_states)
            logits.append(output.logits)
            hidden.append(output.hidden_states[-1][:, response_start - 1:] if hidden_states else None)
            continue
        prompts = copies[index]
        logits.append(head.logits[prompts])  # the prompt's last position predicts token 0
        hidden.append(head.hidden_states[-1][prompts, -1:] if hidden_states else None)
        if longest > 1:
            cache = DynamicCache(ddp_cache_data=[(layer.keys[prompts], layer.values[prompts])
                                                 for layer in prompt_cache.layers], config=base.config)
            tail = model(input_ids=input_ids[index, response_start:end], attention_mask=attention_mask[index, :end],
                         position_ids=position_ids[index, response_start:end], use_cache=True,
                         output_hidden_states=hidden_states, **{keyword: cache})
            logits[-1] = torch.cat([logits[-1], tail.logits], 1)
            hidden[-1] = torch.cat([hidden[-1], tail.hidden_states[-1]], 1) if hidden_states else None
    return _in_rows(indices, logits, width), _in_rows(indices, hidden, width) if hidden_states else None


def _in_rows(indices: list[torch.Tensor], parts: list[torch.Tensor], width: int) -> torch.Tensor:
    """Chunks' outputs (n, longest, D), for the rows `indices` of each, as one (rows, width, D) tensor, zeros past a
    chunk's longest; one chunk of every row in order, as wide as `width`, as it is."""
    if len(parts) == 1 and parts[0].shape[1] == width:
        return parts[0]
    out = parts[0].new_zeros(sum(map(len, indices)), width, parts[0].shape[-1])
    for index, part in zip(indices, parts, strict=True):
        out[index, :part.shape[1]] = part
    return out


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
