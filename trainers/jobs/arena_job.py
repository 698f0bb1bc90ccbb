"""An arena job: one answer per version to a person's prompt, sampled in the worker (never in the serving process)
with the studio's sampler and the model's chat template, stored as generations of their versions (source `arena`,
`params` naming the job and the answer's place on screen).

Arena jobs run one at a time in id order (a job waits while an earlier one is queued or running, `arena_place`), and
beside any training job. The job's config (`app.versions.arena_tab` writes it): `prompt_id`, `policies` (the versions in
the order their answers are shown), `response_length`, `temperature`, `top_p`, `top_k`, `seed`, `user`.
"""

from __future__ import annotations

import time

from storage import Store
from storage.arena import ARENA_SOURCE, arena_place
from storage.generations import NewGeneration, add_generations
from storage.policies import get_policy
from storage.prompts import get_prompt
from storage.types import Job

from ..models.generation import HFGenerator
from ..models.loading import load_sampler_policy, load_tokenizer
from ..reporting import JobCancelled
from .layer import StoreReporter

WAIT_S = 0.25  # how often a queued arena job looks whether its turn came


def wait_turn(store: Store, job: Job, reporter: StoreReporter) -> None:
    """Return once no earlier arena job is queued or running (heartbeating meanwhile; Stop still stops it)."""
    while arena_place(store, job.id) > 0:
        if reporter.should_stop():
            raise JobCancelled()
        time.sleep(WAIT_S)


def run_job(store: Store, job: Job) -> None:
    config = job.config
    reporter = StoreReporter(store, job.id, phase="answers done")
    wait_turn(store, job, reporter)
    prompt = get_prompt(store, config["prompt_id"])
    versions = config["policies"]
    for slot, policy_id in enumerate(versions):
        reporter.progress(slot, len(versions))
        if reporter.should_stop():
            raise JobCancelled()
        path = get_policy(store, policy_id).path
        generator = HFGenerator(load_sampler_policy(path), load_tokenizer(path))
        sample = generator.generate([prompt.content], 1, config["response_length"], config["temperature"],
                                    config["top_p"], seed=config["seed"], top_k=config["top_k"])[0][0]
        add_generations(store, [NewGeneration(
            prompt.id, sample.text, policy_id=policy_id, token_count=sample.num_tokens, seed=config["seed"],
            ended_with_eos=sample.ended_with_eos, source=ARENA_SOURCE,
            params={"arena_job": job.id, "arena_slot": slot, "temperature": config["temperature"],
                    "top_p": config["top_p"], "top_k": config["top_k"]})])
    reporter.progress(len(versions), len(versions))
    reporter.should_stop()
