"""SFT runs on a store: the worker's `sft` jobs, `python app.py sft` and a loop's SFT steps (`sft_first`,
`sft_each_round`) all run here.

A run (`trainers.policy.sft_config.SFTRun`, saved as the job's config so a resumed job repeats it) fine-tunes a policy
version of the store (default: the newest) on the current demonstrations (of one source when asked) that fit its
context (`trainers.jobs.sft_data`: the others kept, counted, never cut), then registers the new version, merged (a
plain folder, no adapter). With `as_root` (the default) the version is a new root: `root_policy` stops at it, so later
rounds' KL reference, DPO's reference and the SFT side of win-rate pairs are the SFT version, and the version it was
trained from stays on the leaderboard (`trained_from` keeps the link). Without it the version is the start's child.

    outcome = run_sft(store, SFTRun(source="writers", settings={"epochs": 2}), job_id=job.id)  # JobCancelled: stopped
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from labeling.winrate import version_names
from storage import Store
from storage.policies import list_policies, set_trained_from
from storage.types import Job, Policy

from ..models.loading import load_chat_format, load_policy, load_tokenizer
from ..policy.sft_config import SFTConfig, SFTExample, SFTRun
from ..reporting import Reporter
from .layer import job_reporter, register_policy, staging_path
from .policy_job import pinned_examples, start_policy
from .sft_data import DemonstrationUse, checked_use

SFT_FOLDER = "sft"  # resumable states: <data dir>/sft/job-<id>[-<name>]/checkpoint-<step>
DEMONSTRATIONS_FILE = "demonstrations.json"  # beside them: the demonstration ids the run trains on


@dataclass
class SFTOutcome:
    steps: int = field(metadata={"help": "Optimiser steps done in total."})
    policy_id: int = field(metadata={"help": "The registered policy version."})
    metrics: dict = field(metadata={"help": "The last logged metrics."})
    demonstrations: int = field(metadata={"help": "Demonstrations used (trained on or held out)."})
    use: str = field(metadata={"help": "The line saying which demonstrations were used and which left out."})


def state_dir(store: Store, job_id: int, name: str = "") -> Path:
    """Where a job's resumable SFT state lives (`name` tells apart several SFT steps of one job)."""
    return store.data_dir / SFT_FOLDER / f"job-{job_id}{'-' + name if name else ''}"


def plan_examples(store: Store, run: SFTRun) -> tuple[SFTConfig, Policy, list[SFTExample], DemonstrationUse]:
    """The settings, start policy and examples of `run` after every check that loads no model; writes nothing."""
    config = run.config
    config.check()
    start = start_policy(store, run.policy_id)
    use = checked_use(store, start, run.source, run.since)
    return config, start, [SFTExample(d.id, d.prompt_content, d.text) for d in use.used], use


def run_sft(store: Store, run: SFTRun, job_id: int | None = None, state_name: str = "", step_offset: int = 0,
            phase: str | None = "sft", listener: Reporter | None = None) -> SFTOutcome:
    """Run (or resume) `run` reporting to `job_id`, register the new policy version, and drop the resumable state.
    Raises JobCancelled (after saving a checkpoint) when the job's cancel flag is set."""
    from ..policy.sft import save_sft_policy, train_sft

    config, start, examples, use = plan_examples(store, run)
    folder = state_dir(store, job_id, state_name) if job_id is not None else None
    if folder is not None:
        examples = pinned_examples(examples, folder / DEMONSTRATIONS_FILE, lambda e: e.demonstration_id,
                                   "demonstration", "SFT")
    staged = staging_path(store)
    try:
        tokenizer = load_tokenizer(start.path)
        result = train_sft(config, load_policy(start.path), tokenizer, load_chat_format(start.path, tokenizer),
                           examples, reporter=job_reporter(store, job_id, step_offset, phase, listener),
                           state_dir=folder)
        save_sft_policy(result, staged)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    start_name = version_names(list_policies(store))[start.id]
    policy_id = register_policy(store, staged, parent_id=None if run.as_root else start.id,
                                round=run.round if run.round is not None else start.round,
                                note=f"SFT of {start_name}, {result.steps} steps on {result.trained} demonstrations"
                                     f"{' (a new root)' if run.as_root else ''}")
    set_trained_from(store, policy_id, start.id)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
    return SFTOutcome(result.steps, policy_id, result.metrics, len(examples), use.line())


def run_job(store: Store, job: Job) -> None:
    """The worker's runner for `sft` jobs."""
    run_sft(store, SFTRun.from_dict(job.config), job.id)


def outcome_line(job_id: int, outcome: SFTOutcome, version: str) -> str:
    """What the command prints when the job completes (`version`: the registered policy, as
    `labeling.winrate.registered_version` names it)."""
    return f"sft job {job_id}: completed, {outcome.steps} steps; {outcome.use}; registered policy {version}"

