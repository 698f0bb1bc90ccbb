"""The new-root check: before an SFT version becomes the anchor (the KL reference, DPO's reference, the SFT side of
win-rate pairs), does it still read its parent's own writing as a language model should?

The check: up to `CHECK_PROMPTS` samples the parent wrote (those the store holds, held-out prompts first; a parent
with none writes one per held-out prompt, temperature 1, at most `CHECK_TOKENS` tokens); the mean per-token NLL of
those samples under the new version over their NLL under the parent is the *fluency ratio*. A healthy SFT moves the
style and leaves it near 1; an SFT that garbled the model puts it at 2-3x (docs/benchmarks.md has the runs). Above
`COLLAPSE_RATIO` the version is registered but not made the root. It needs no held-out demonstrations (one
demonstration has none) and costs two forward passes over the samples, one before SFT and one after (and a short
generation when the store holds no sample of the parent).

    baseline = fluency_baseline(parent, tokenizer.pad_token_id, sampled_rows(parent, tokenizer, chat, prompts))
    ...SFT trains `parent` into the new version...
    check = baseline.check(new)
    check.ratio, check.collapsed      # 2.7, True
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from labeling.conversations import PromptInput

from ..models.chat_format import ChatFormat
from ..models.generation import HFGenerator, left_pad

CHECK_PROMPTS = 16  # held-out prompts the parent writes for
CHECK_TOKENS = 32  # the longest sample: enough tokens to tell text from garble
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
def mean_nll(model: PreTrainedModel, rows: list[tuple[list[int], list[int]]], pad: int, batch: int = 4) -> float:
    """Mean per-token NLL of each row's response ids after its prompt ids under `model` (every response token
    counted once), `batch` rows at a time, the vocabulary's log-softmax only where a response token is predicted."""
    device = next(model.parameters()).device
    total, count = 0.0, 0
    for start in range(0, len(rows), batch):
        chunk = rows[start:start + batch]
        ids, mask = (t.to(device) for t in left_pad([prompt + response for prompt, response in chunk], pad))
        width = max(len(response) for _, response in chunk)  # the responses end every row (left padding)
        positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits[:, -width - 1:-1]
        logprobs = torch.log_softmax(logits.float(), dim=-1).gather(-1, ids[:, -width:, None]).squeeze(-1)  # (b, W)
        scored = torch.zeros_like(logprobs, dtype=torch.bool)
        for row, (_, response) in enumerate(chunk):
            scored[row, width - len(response):] = True
        total, count = total - (logprobs * scored).sum().item(), count + int(scored.sum())
    return total / max(count, 1)


def sampled_rows(parent: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, chat: ChatFormat,
                 prompts: list[PromptInput], seed: int = 0) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, sample ids): one sample of `parent` (temperature 1, at most `CHECK_TOKENS` tokens) for each of the
    first `CHECK_PROMPTS` of `prompts` (which fit the context with `CHECK_TOKENS`); for a parent with no stored
    samples."""
    prompts = prompts[:CHECK_PROMPTS]
    samples = HFGenerator(parent, tokenizer, chat).generate(prompts, 1, CHECK_TOKENS, temperature=1.0, top_p=1.0,
                                                            seed=seed)
    return [(ids, group[0].token_ids) for ids, group in zip(chat.prompts_ids(prompts), samples, strict=True)]


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
                     started: float | None = None) -> FluencyBaseline:
    """The baseline of the check on the parent's samples `rows`; its cost counts from `started` (default: now)."""
    started = time.perf_counter() if started is None else started
    return FluencyBaseline(rows, mean_nll(parent, rows, pad), pad, time.perf_counter() - started)
