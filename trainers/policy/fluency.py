"""The new-root check: before an SFT version becomes the anchor (the KL reference, DPO's reference, the SFT side of
win-rate pairs), does it still read its parent's own writing as a language model should?

The check: up to `CHECK_PROMPTS` samples the parent wrote (those the store holds, held-out prompts first, cut at
`CHECK_TOKENS` tokens); the mean per-token NLL of those samples under the new version over their NLL under the parent
is the *fluency ratio*. A healthy SFT moves the style and leaves it near 1; an SFT that garbled the model puts it at
2-3x (docs/benchmarks.md has the runs). Above `COLLAPSE_RATIO` the version is registered but not made the root. It
needs no held-out demonstrations (one demonstration has none) and costs two forward passes over the samples, one
before SFT and one after, each reading the prompt ids every sample shares (a chat template's system prompt) once and
computing the vocabulary's logits only where a sample's token is predicted. A parent with no stored sample writes
`GENERATED_PROMPTS` short ones (`GENERATED_TOKENS` tokens at most, temperature 1, one batch) and its NLL of them is
read off the logits they were drawn from, so the check costs that generation and one pass after SFT (the budget: 10%
of the SFT job; docs/benchmarks.md has the costs).

    baseline = fluency_baseline(parent, tokenizer.pad_token_id, sampled_rows(parent, tokenizer, chat, prompts))
    ...SFT trains `parent` into the new version...
    check = baseline.check(new)
    check.ratio, check.collapsed      # 2.7, True
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from labeling.transfer.conversations import PromptInput

from ..models.chat_format import ChatFormat
from ..models.generation import left_pad
from ..models.sampling import cache_keyword, draw

CHECK_PROMPTS = 16  # the parent's stored samples read
CHECK_TOKENS = 32  # the most tokens read of each: enough to tell text from garble
GENERATED_PROMPTS = 4  # a parent with no stored sample writes one for each of this many held-out prompts, of at
GENERATED_TOKENS = 8  # most this many tokens (each a generation step; 4 tokens let a broken demo run through)
COLLAPSE_RATIO = 1.85  # fluency ratio above which a new root lost held-out quality (docs/benchmarks.md)


@dataclass(frozen=True)
class FluencyCheck:
    """The parent's samples' mean per-token NLL under the parent and under the new version, how many samples, and
    what the check cost."""

    parent_nll: float
    new_nll: float
    samples: int
    seconds: float

    @property
    def ratio(self) -> float:
        return self.new_nll / max(self.parent_nll, 1e-6)

    @property
    def collapsed(self) -> bool:
        return not self.ratio <= COLLAPSE_RATIO  # a NaN ratio is a collapse too

    def line(self) -> str:
        return (f"the parent's samples on {self.samples} held-out prompts have {self.ratio:.2f}× their NLL under the "
                f"new version ({self.new_nll:.2f} vs {self.parent_nll:.2f} nats per token; a collapse above "
                f"{COLLAPSE_RATIO:g}×)")


@torch.no_grad()
def mean_nll(model: PreTrainedModel, rows: list[tuple[list[int], list[int]]], pad: int, batch: int = 8) -> float:
    """Mean per-token NLL of each row's response ids after its prompt ids under `model` (every response token
    counted once), `batch` rows at a time, the vocabulary's log-softmax only where a response token is predicted. The
    prompt ids every row starts with (a chat template's system prompt) are read once, their cache shared."""
    device = next(model.parameters()).device
    shared = shared_prefix([prompt for prompt, _ in rows])
    keyword = cache_keyword(model)
    prefix = model(input_ids=torch.tensor([rows[0][0][:shared]], device=device),
                   use_cache=True).past_key_values if shared else None
    total, count = 0.0, 0
    for start in range(0, len(rows), batch):
        chunk = rows[start:start + batch]
        ids, mask = (t.to(device) for t in left_pad([prompt[shared:] + response for prompt, response in chunk], pad))
        width = max(len(response) for _, response in chunk)  # the responses end every row (left padding)
        positions = shared + (mask.cumsum(dim=1) - 1).clamp(min=0)
        cache = None
        if prefix is not None:
            cache = copy.deepcopy(prefix)
            cache.batch_repeat_interleave(len(chunk))
            mask = torch.cat([torch.ones(len(chunk), shared, dtype=mask.dtype, device=device), mask], dim=1)
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=width + 1,
                       **{keyword: cache}).logits[:, :-1]  # only where a response token is predicted
        logprobs = torch.log_softmax(logits.float(), dim=-1).gather(-1, ids[:, -width:, None]).squeeze(-1)  # (b, W)
        scored = torch.zeros_like(logprobs, dtype=torch.bool)
        for row, (_, response) in enumerate(chunk):
            scored[row, width - len(response):] = True
        total, count = total - (logprobs * scored).sum().item(), count + int(scored.sum())
    return total / max(count, 1)


def shared_prefix(prompts: list[list[int]]) -> int:
    """How many leading ids every prompt shares, leaving each at least one of its own (the one that predicts its
    response's first token)."""
    shortest = min(len(p) for p in prompts) - 1
    return next((i for i in range(max(shortest, 0)) if any(p[i] != prompts[0][i] for p in prompts)), max(shortest, 0))


@torch.inference_mode()
def sampled_rows(parent: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, chat: ChatFormat,
                 prompts: list[PromptInput], seed: int = 0) -> tuple[list[tuple[list[int], list[int]]], float]:
    """(rows, NLL): one sample of `parent` (temperature 1, at most `GENERATED_TOKENS` tokens) for each of the first
    `GENERATED_PROMPTS` of `prompts` (which fit the context with `GENERATED_TOKENS`) as (prompt ids, sample ids), in one
    batch whose shared prompt ids are read once, and the samples' mean per-token NLL under `parent` read off the
    logits they were drawn from (as `mean_nll` computes it); for a parent with no stored samples."""
    prompt_ids, pad = chat.prompts_ids(prompts[:GENERATED_PROMPTS]), tokenizer.pad_token_id
    device, keyword = next(parent.parameters()).device, cache_keyword(parent)
    shared = shared_prefix(prompt_ids)
    was_training = parent.training
    parent.eval()
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(seed)
            cache = parent(input_ids=torch.tensor([prompt_ids[0][:shared]], device=device),
                           use_cache=True).past_key_values if shared else None
            if cache is not None:
                cache.batch_repeat_interleave(len(prompt_ids))
            ids, mask = (t.to(device) for t in left_pad([p[shared:] for p in prompt_ids], pad))
            positions = shared + (mask.cumsum(dim=1) - 1).clamp(min=0)
            mask = torch.cat([torch.ones(len(prompt_ids), shared, dtype=mask.dtype, device=device), mask], dim=1)
            ends = torch.tensor(list(chat.end_ids), device=device)
            ended = torch.zeros(len(prompt_ids), dtype=torch.bool, device=device)
            drawn, logprobs = [], []
            for _ in range(GENERATED_TOKENS):
                output = parent(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                                logits_to_keep=1, **{keyword: cache})
                cache, logits = output.past_key_values, output.logits[:, -1]
                ids = draw(logits, 1.0, pad, 0, 1.0).masked_fill(ended, pad)  # (B,)
                drawn.append(ids)
                logprobs.append(torch.log_softmax(logits.float(), dim=-1).gather(-1, ids[:, None]).squeeze(-1))
                ended |= torch.isin(ids, ends)
                if bool(ended.all()):
                    break
                ids, positions = ids[:, None], positions[:, -1:] + 1
                mask = torch.cat([mask, torch.ones_like(ids)], dim=1)
    finally:
        parent.train(was_training)
    samples = [chat.cut_at_end(row)[0] for row in torch.stack(drawn, dim=1).tolist()]
    steps = torch.stack(logprobs, dim=1)  # (B, R): each row's tokens, up to and including its end id, come first
    total = -sum(steps[row, :len(sample)].sum().item() for row, sample in enumerate(samples))
    return list(zip(prompt_ids, samples, strict=True)), total / max(sum(map(len, samples)), 1)


@dataclass(frozen=True)
class FluencyBaseline:
    """The parent's samples (prompt ids, sample ids) and their mean per-token NLL under the parent, measured before
    SFT changes the parent's weights in place (so the parent is never loaded twice)."""

    rows: list
    parent_nll: float
    pad: int
    seconds: float

    def check(self, new: PreTrainedModel) -> FluencyCheck:
        """The fluency ratio of the trained `new` against the parent."""
        started = time.perf_counter()
        was_training = new.training
        new.eval()
        try:
            new_nll = mean_nll(new, self.rows, self.pad)
        finally:
            new.train(was_training)
        return FluencyCheck(self.parent_nll, new_nll, len(self.rows),
                            self.seconds + time.perf_counter() - started)


def fluency_baseline(parent: PreTrainedModel, pad: int, rows: list[tuple[list[int], list[int]]],
                     started: float | None = None, parent_nll: float | None = None) -> FluencyBaseline:
    """The baseline of the check on the parent's samples `rows` (their NLL under the parent measured here unless
    given: `sampled_rows` reads it off the generation); its cost counts from `started` (default: now)."""
    started = time.perf_counter() if started is None else started
    nll = mean_nll(parent, rows, pad) if parent_nll is None else parent_nll
    return FluencyBaseline(rows, nll, pad, time.perf_counter() - started)
