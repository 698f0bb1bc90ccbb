"""Sampling a policy's responses into the store and queueing pairs of them: step (1)-(2) of a round.

Used by the demo seed and by the round orchestrator, so the queue is filled one way everywhere.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Sequence

from labeling.queue.selection import candidate_pairs, select_random
from storage import Store
from storage.generations import SAMPLE_SOURCE, NewGeneration, add_generations
from storage.pairs import NewPair, add_pairs, list_pairs
from storage.types import Generation, Policy, Prompt

from ..models.generation import HFGenerator
from ..models.loading import load_sampler_policy, load_tokenizer


@dataclass(frozen=True)
class SamplingConfig:
    samples_per_prompt: int = field(default=4, metadata={"help": "K: responses sampled per prompt"})
    max_new_tokens: int = field(default=24, metadata={"help": "longest response, in tokens"})
    temperature: float = field(default=1.0, metadata={"help": "sampling temperature (0 = greedy)"})
    top_p: float = field(default=1.0, metadata={"help": "nucleus sampling mass"})
    top_k: int = field(default=0, metadata={"help": "sample among the k likeliest tokens (0: off)"})
    batch_size: int = field(default=64, metadata={"help": "prompts+samples generated per forward batch"})
    bf16: bool = field(default=False, metadata={"help": "sample in bfloat16 (on a GPU)"})


def sample_policy(store: Store, policy: Policy, prompts: list[Prompt], config: SamplingConfig, seed: int,
                  generator: HFGenerator | None = None) -> list[int]:
    """Generate K responses per prompt with `policy` and store them; returns the new generation ids."""
    if generator is None:
        generator = HFGenerator(load_sampler_policy(policy.path, config.bf16), load_tokenizer(policy.path))
    samples = generator.generate([p.content for p in prompts], config.samples_per_prompt, config.max_new_tokens,
                                 config.temperature, config.top_p, seed=seed, batch_size=config.batch_size,
                                 top_k=config.top_k)
    params = asdict(config)
    rows = [NewGeneration(prompt.id, s.text, policy_id=policy.id, token_count=s.num_tokens, params=params, seed=seed,
                          ended_with_eos=s.ended_with_eos, source=SAMPLE_SOURCE)
            for prompt, group in zip(prompts, samples, strict=True) for s in group]
    return add_generations(store, rows)


def random_pairs(store: Store, samples: list[Generation], n: int, seed: int, round: int,
                 older: Sequence[Generation] = ()) -> list[NewPair]:
    """Up to `n` new random pairs of two `samples` of one prompt, or of a sample and one of `older` (an earlier
    version's samples); pairs already queued are not repeated."""
    queued = [(p.first_id, p.second_id) for p in list_pairs(store)]
    return select_random(candidate_pairs(samples, exclude=queued, older=older), n, seed, round)


def queue_random_pairs(store: Store, samples: list[Generation], n: int, seed: int, round: int) -> list[int]:
    """Queue up to `n` new random pairs of two `samples` of one prompt (pairs already queued are not repeated)."""
    return add_pairs(store, random_pairs(store, samples, n, seed, round))
