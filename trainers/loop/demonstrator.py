"""The synthetic demonstrator, the oracle annotator's counterpart for tests and benches: for each prompt it samples M
responses of the current policy and writes the one the oracle scores highest (best of M; ties: the first) as a
demonstration by `demonstrator` (source `synthetic`). It writes, it does not edit: every demonstration is a response
the policy can already produce, which SFT then makes likelier. With `shown` it also records each demonstration as
preferred to the first `shown` other samples (2: a pair, as the Label tab's `demonstration_preferences` records an
edit over the pair on screen, through the same `labeling.demonstrations.demonstrations.record_preferences_over`; labels
by `edits:demonstrator`, a sample equal to the demonstration left out).

    ids = write_synthetic_demonstrations(store, policy, prompts, oracle=load_scorer(), m=8, max_new_tokens=24, seed=0)
"""

from __future__ import annotations

import time

from labeling.demonstrations.demonstrations import record_preferences_over
from labeling.queue.synthetic import Scorer
from storage import Store
from storage.demonstrations import SYNTHETIC, NewDemonstration, add_demonstration
from storage.types import Policy, Prompt

from ..models.generation import HFGenerator
from ..models.loading import load_sampler_policy, load_tokenizer

AUTHOR = "demonstrator"


def best_of(texts: list[str], oracle: Scorer) -> str:
    """The text the oracle scores highest (the first of equals)."""
    return max(texts, key=oracle)


def write_synthetic_demonstrations(store: Store, policy: Policy, prompts: list[Prompt], oracle: Scorer, m: int,
                                   max_new_tokens: int, seed: int, temperature: float = 1.0, top_p: float = 1.0,
                                   generator: HFGenerator | None = None, shown: int = 0) -> list[int]:
    """One demonstration per prompt: the oracle's best of `m` samples of `policy`; returns their ids. Prompts where
    every sample is empty get none. `shown` > 0: each also preferred to that many of the other samples."""
    if generator is None:
        generator = HFGenerator(load_sampler_policy(policy.path), load_tokenizer(policy.path))
    groups = generator.generate([p.content for p in prompts], m, max_new_tokens, temperature, top_p, seed=seed)
    now, ids = time.time(), []
    with store.write():
        for prompt, group in zip(prompts, groups, strict=True):
            texts = [s.text for s in group if s.text.strip()]
            if texts:
                best = best_of(texts, oracle)
                ids.append(add_demonstration(store, NewDemonstration(prompt.id, best, AUTHOR, SYNTHETIC), now))
                if shown:
                    others = [text for text in texts if text != best][:shown]
                    record_preferences_over(store, AUTHOR, prompt, best, others, now)
    return ids
