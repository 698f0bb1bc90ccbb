"""The studio's sampler: a decode loop over the model's own forward with a KV cache, drawing each token exactly
from the distribution the trainers' log-probs describe.

`sample_ids` is what both the label sampler (`trainers.models.generation.HFGenerator`) and the PPO/GRPO rollout
(`trainers.policy.rollout.HFRolloutBackend`) call. Per step it computes logits for the last position only, keeps the
keys and values in a cache allocated once for the whole response (a static cache, where the model supports one: no
copy of the cache per step), reads a prompt that several rows share once (K samples of a prompt, GRPO's groups: the
prompt's keys and values are copied to its rows), draws from `sampling_logits` by inverting the cumulative
distribution with one uniform per row (`torch.multinomial` on a 49k vocabulary spends ~10x longer drawing its random
numbers), drops the rows that have ended from the model's batch once a quarter of it has (their keys and values with
them) and stops as soon as every row has ended. An observer sees each step's logits, draws and last hidden states,
so a rollout keeps its log-probs (and its critic's inputs) without a second forward pass over the responses. Hugging
Face `generate` is not used: nothing from a checkpoint's generation config (a repetition penalty, n-gram blocking,
its own top-k) can reach the sampler, and its per-step machinery (logits processors, stopping criteria, cache
bookkeeping) is not paid for.

The distribution per token is softmax(`sampling_logits`): the logits divided by the temperature, the pad token ruled
out, then top-k and top-p as Hugging Face's warpers apply them: what `trainers.policy.ppo_math.sampler_logprobs`
scores, so PPO's and GRPO's log-probs are those of the tokens' distribution at any of these settings. Results are
deterministic for a torch seed, not the same random stream as `generate`'s.

    responses = sample_ids(model, input_ids, attention_mask, max_new_tokens=24, temperature=1.0, top_p=1.0,
                           top_k=0, end_ids=(eos,), pad_id=pad)   # (B, R <= 24); pads after each row's end id
"""

from __future__ import annotations

import inspect
from typing import Callable, Sequence

import torch
from torch import nn
from transformers import DynamicCache, StaticCache

Observer = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], None]  # (logits (B, V), drawn (B,), hidden (B, H))


def sampling_logits(logits: torch.Tensor, temperature: float, pad_id: int, top_k: int = 0,
                    top_p: float = 1.0) -> torch.Tensor:
    """(B, V) logits -> the float32 logits the sampler draws from: divided by `temperature` (> 0), the pad at -inf,
    then only the `top_k` likeliest tokens (0: all; ties at the k-th value kept), then the smallest set of likeliest
    tokens whose probability reaches `top_p` (at least one), the others at -inf. A new tensor; `logits` is unchanged."""
    scaled = logits.float() / temperature
    scaled[..., pad_id] = -torch.inf
    if 0 < top_k < scaled.shape[-1]:
        kth = torch.topk(scaled, top_k, dim=-1).values[..., -1:]  # (B, 1)
        scaled = scaled.masked_fill(scaled < kth, -torch.inf)
    if top_p < 1.0:
        scaled = scaled.masked_fill(~top_p_kept(scaled, top_p), -torch.inf)
    return scaled


NUCLEUS_SEARCH = (256, 4096)  # how many of the likeliest tokens top-p looks among, before the whole vocabulary


def top_p_kept(scaled: torch.Tensor, top_p: float) -> torch.Tensor:
    """(B, V) logits -> (B, V) bool: the smallest set of likeliest tokens whose probability reaches `top_p` (the
    likeliest always), as Hugging Face's TopPLogitsWarper keeps it: a token stays when the tokens likelier than it
    hold less than `top_p` (tokens tied with the last one kept stay too). Looked for among the 256 likeliest tokens of
    a row, then 4096, then all of them, whichever first hold that mass: sorting a 49k vocabulary costs ~4 ms a row on
    one CPU thread, its 256 likeliest ~0.2 ms."""
    vocab = scaled.shape[-1]
    log_total = torch.logsumexp(scaled, dim=-1, keepdim=True)  # (B, 1)
    lowest = torch.empty_like(log_total)  # (B, 1): the least likely logit kept
    rows = torch.arange(len(scaled), device=scaled.device)  # those whose set is not found yet
    for k in [n for n in NUCLEUS_SEARCH if n < vocab] + [vocab]:
        values = torch.topk(scaled[rows] if len(rows) < len(scaled) else scaled, k, dim=-1).values  # likeliest first
        cumulative = (values - log_total[rows]).exp().cumsum(dim=-1)  # (b, k)
        likelier = torch.cat([torch.zeros_like(cumulative[:, :1]), cumulative[:, :-1]], dim=-1)
        count = (likelier < top_p).sum(dim=-1, keepdim=True)  # a prefix, the likeliest token at least
        found = cumulative[:, -1] >= top_p if k < vocab else torch.ones_like(cumulative[:, -1], dtype=torch.bool)
        lowest[rows[found]] = values[found].gather(-1, count[found] - 1)
        rows = rows[~found]
        if len(rows) == 0:
            break
    return scaled >= lowest


def draw(logits: torch.Tensor, temperature: float, pad_id: int, top_k: int, top_p: float) -> torch.Tensor:
    """One token per row from (B, V) logits: greedy (the pad excluded) at temperature 0, else a draw from
    softmax(`sampling_logits`) with torch's global generator: the first token whose cumulative probability passes a
    uniform draw (a token of probability 0 is never chosen; the float32 sum is within ~1e-7 of float64 on a 49k
    vocabulary); (B,)."""
    if temperature == 0:
        return logits.float().index_fill(-1, torch.tensor([pad_id], device=logits.device), -torch.inf).argmax(-1)
    cumulative = sampling_logits(logits, temperature, pad_id, top_k, top_p).softmax(dim=-1).cumsum(dim=-1)  # (B, V)
    uniform = torch.rand(logits.shape[0], 1, device=logits.device) * cumulative[:, -1:]  # in [0, total)
    return torch.searchsorted(cumulative, uniform, right=True).clamp_(max=logits.shape[-1] - 1).squeeze(1)


def cache_keyword(model: nn.Module) -> str:
    """The name the model's forward gives the KV cache (`cache` in recent transformers, `past_key_values` before)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def new_cache(model: nn.Module, length: int) -> DynamicCache | StaticCache:
    """A KV cache for `length` positions: static (allocated once, written in place) where the model supports it."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if getattr(base, "_can_compile_fullgraph", False):
        return StaticCache(config=base.config, max_cache_len=length)
    return DynamicCache(config=base.config)


def distinct_rows(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(first row of each distinct prompt (U,), the distinct prompt of each row (B,)): `input_ids[first][copies]`
    is `input_ids` again, and the same for the mask; both are every row in order when no prompt repeats."""
    _, copies = torch.unique(torch.cat([input_ids, attention_mask], 1), dim=0, return_inverse=True)
    rows = torch.arange(len(copies), device=copies.device)
    count = int(copies.max()) + 1
    if count == len(copies):
        return rows, rows
    first = torch.full((count,), len(copies), device=copies.device).scatter_reduce(0, copies, rows, reduce="amin")
    return first, copies


CPU_PASS_TOKENS = 64  # what a CPU forward pass costs beyond its tokens, in tokens (`length_chunks`)


def length_chunks(lengths: Sequence[int], pass_tokens: int) -> list[list[int]]:
    """Row indices, longest first, cut into the chunks of like length that read the fewest tokens, a pass costing
    its rows x its longest plus `pass_tokens` (the fixed cost of a forward pass, in tokens): the best cut of the
    sorted rows, found over their distinct lengths."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    starts = [k for k in range(len(order)) if not k or lengths[order[k]] != lengths[order[k - 1]]]  # length groups
    best, cut = [0] + [None] * len(starts), [0] * (len(starts) + 1)  # over the first j groups
    for j in range(1, len(starts) + 1):
        rows_end = starts[j] if j < len(starts) else len(order)
        best[j], cut[j] = min((best[i] + (rows_end - starts[i]) * lengths[order[starts[i]]] + pass_tokens, i)
                              for i in range(j))
    chunks, j = [], len(starts)
    while j:
        chunks.append(order[starts[cut[j]]:starts[j] if j < len(starts) else len(order)])
        j = cut[j]
    return chunks[::-1]


def _in_batch(values: torch.Tensor, rows: torch.Tensor, batch: int) -> torch.Tensor:
    """The model's output for its rows `rows` (A, ...) as a (batch, ...) tensor, zeros for the rows out of it."""
    if len(rows) == batch:
        return values
    return values.new_zeros(batch, *values.shape[1:]).index_copy_(0, rows, values)


@torch.no_grad()
def sample_ids(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, max_new_tokens: int,
               temperature: float, top_p: float, top_k: int, end_ids: Sequence[int], pad_id: int,
               observe: Observer | None = None) -> torch.Tensor:
    """Left-padded prompts (B, P) -> sampled ids (B, R), R <= `max_new_tokens`: each row until its first end id,
    the pad after it; the loop stops when every row has ended. The model should be in eval mode. With `observe`,
    every step calls `observe(logits, drawn, hidden)`: the model's (B, V) logits the step drew from, the (B,) tokens
    drawn (the pad in rows that had ended) and the (B, H) last hidden states that gave the logits (zeros, and zero
    logits, in rows that had left the batch)."""
    batch, width = input_ids.shape
    device = input_ids.device
    cache = new_cache(model, width + max_new_tokens)
    static = isinstance(cache, StaticCache)
    keyword = cache_keyword(model)
    mask = torch.ones(batch, width + max_new_tokens, dtype=attention_mask.dtype, device=device)  # (B, P + R)
    mask[:, :width] = attention_mask
    positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # real tokens only, as in training
    next_position = positions[:, -1:] + 1  # (B, 1)
    ends = torch.tensor(list(end_ids), device=device)
    tokens = torch.full((batch, max_new_tokens), pad_id, dtype=torch.long, device=device)
    ended = torch.zeros(batch, dtype=torch.bool, device=device)
    rows = torch.arange(batch, device=device)  # the rows still in the model's batch
    distinct, copies = distinct_rows(input_ids, attention_mask)
    prompt_mask = (mask if static else attention_mask)[distinct]
    hidden_states = observe is not None
    output = model(input_ids=input_ids[distinct], attention_mask=prompt_mask, position_ids=positions[distinct],
                   use_cache=True, logits_to_keep=1, output_hidden_states=hidden_states, **{keyword: cache})
    logits = output.logits[:, -1]  # (U, V)
    hidden = output.hidden_states[-1][:, -1] if hidden_states else None  # (U, H)
    if len(distinct) < batch:
        cache.reorder_cache(copies)
        logits, hidden = logits[copies], hidden[copies] if hidden_states else None  # (B, V), (B, H)
    for step in range(max_new_tokens):
        chosen = draw(logits, temperature, pad_id, top_k, top_p).masked_fill(ended, pad_id)  # (B,)
        tokens[:, step] = chosen
        if observe is not None:
            observe(logits, chosen, hidden)
        ended |= torch.isin(chosen, ends)
        if step == max_new_tokens - 1 or bool(ended.all()):
            return tokens[:, :step + 1]
        running = ~ended[rows]  # (A,) over the model's batch
        if 4 * int((~running).sum()) >= len(rows):  # a quarter has ended: compute only the others from here on
            kept = running.nonzero().squeeze(1)
            cache.reorder_cache(kept)
            rows, mask, next_position = rows[kept], mask[kept], next_position[kept]
        seen = width + step + 1
        output = model(input_ids=chosen[rows, None], attention_mask=mask if static else mask[:, :seen],
                       position_ids=next_position + step, use_cache=True, logits_to_keep=1,
                       output_hidden_states=hidden_states, **{keyword: cache})
        logits = _in_batch(output.logits[:, -1], rows, batch)  # (B, V); dropped rows: drawn, then padded
        hidden = _in_batch(output.hidden_states[-1][:, -1], rows, batch) if hidden_states else None
    return tokens  # max_new_tokens == 0 is refused by the callers; here for completeness
