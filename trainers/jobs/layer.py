"""The job layer's shared pieces: the kinds of job, the reporter that carries a trainer's reports into its job's
row, and the registration of a trained policy. Trainers never touch the store; the job runners (`policy_job`,
`dpo_job`, `reward_job`, `loop`) and the worker do, through these. Import-light (no torch), so the launcher in the UI
process uses `JobKind` from here.

    reporter = job_reporter(store, job.id, phase="ppo", listener=terminal_bar)   # null on non-main processes
    trainer.train(iterations, reporter)                                           # JobCancelled when stopped
    staged = staging_path(store)
    trainer.save_pretrained(staged)
    policy_id = register_policy(store, staged, parent_id=start.id, round=1, note="PPO, 10 iterations", made_by="ppo")
"""

from __future__ import annotations

import os
import shutil
import time
import traceback
import uuid
from enum import StrEnum
from pathlib import Path
from typing import Mapping

from storage import Store
from storage.jobs import heartbeat
from storage.metrics import log_metrics
from storage.policies import add_policy
from storage.types import Job

from ..policy.config import Algorithm, PolicyRun
from ..reporting import Reporter

POLICIES_FOLDER = "policies"
STAGING_PREFIX = ".tmp-"  # a policy being written
# a trained policy, renamed complete: <what made it>-r<round>-<time>-<random>, e.g. grpo-r2-...; an SFT version of
# an older store may be a ppo-r folder (the prefix once named every version so)
MADE_BY = ("ppo", "grpo", "dpo", "sft")
POLICY_PREFIXES = tuple(f"{made_by}-r" for made_by in MADE_BY)
TRACEBACK_LINES = 15  # what a failed job keeps of its traceback


def start_a_project(store: Store) -> str:
    """How to give an empty store something to train, as the end of an error: the demo, or the user's model."""
    return (f"seed the demo with python app.py init --demo --db {store.path}, or start a project on your own model "
            f"with python app.py init --model MODEL --prompts FILE --db {store.path}")


class JobKind(StrEnum):
    """What a job does; the store keeps the value (`jobs.kind`), the worker's `RUNNERS` maps each to its runner."""

    REWARD = "reward"
    POLICY = "policy"  # PPO or GRPO (stores before m021_policy_job_kind said "ppo": storage.jobs reads it as this)
    DPO = "dpo"
    SFT = "sft"
    LOOP = "loop"
    EXPORT = "export"  # a version taken out (trainers.export.job)
    ARENA = "arena"  # an arena prompt's answers (trainers.jobs.arena_job): runs beside a training job


def job_algorithm(job: Job) -> Algorithm | None:
    """How a loop, PPO or DPO job trains its policy (a loop's or PPO job's settings' `algorithm`, PPO when unset);
    None for other kinds."""
    if job.kind == JobKind.LOOP:
        return Algorithm(job.config.get("algorithm", Algorithm.PPO))
    if job.kind == JobKind.POLICY:
        return Algorithm(PolicyRun.from_dict(job.config).settings.get("algorithm", Algorithm.PPO))
    if job.kind == JobKind.DPO:
        return Algorithm.DPO
    return None


def job_kind_label(job: Job) -> str:
    """The job's kind as the UI shows it, naming a policy job's algorithm and a loop's when it is not PPO: `ppo`,
    `grpo`, `dpo`, `loop`, `grpo loop`, `dpo loop`."""
    algorithm = job_algorithm(job)
    if algorithm is None or (algorithm is Algorithm.PPO and job.kind == JobKind.LOOP):
        return job.kind
    return f"{algorithm.value} loop" if job.kind == JobKind.LOOP else algorithm.value


def error_tail(exc: BaseException) -> str:
    """The last lines of `exc`'s traceback, as a failed job records them (the last line names the error)."""
    return "\n".join("".join(traceback.format_exception(exc)).strip().splitlines()[-TRACEBACK_LINES:])


def is_main_process() -> bool:
    """True outside a distributed run and on its rank 0 (`accelerate launch` and `torchrun` set RANK)."""
    return int(os.environ.get("RANK", "0")) == 0


def is_single_process() -> bool:
    """True outside a distributed run (or in one of a single process)."""
    return int(os.environ.get("WORLD_SIZE", "1")) == 1


class StoreReporter(Reporter):
    """A trainer's reports into job `job_id`: metrics at `step_offset + step`; `should_stop` heartbeats (with the
    phase `"{phase} {done}/{total}"` and progress done/total when `phase` is given) and reads the cancel flag.
    A `listener` (a terminal bar, the loop's log) hears every step and every progress report too."""

    def __init__(self, store: Store, job_id: int, step_offset: int = 0, phase: str | None = None,
                 listener: Reporter | None = None):
        self.store, self.job_id, self.step_offset = store, job_id, step_offset
        self.phase, self.listener = phase, listener or Reporter()
        self.position: dict = {}

    def on_step(self, step: int, metrics: Mapping[str, float]) -> None:
        if metrics:
            log_metrics(self.store, self.job_id, self.step_offset + step, dict(metrics))
        self.listener.on_step(step, metrics)

    def progress(self, done: int, total: int) -> None:
        if self.phase is not None:
            self.position = {"phase": f"{self.phase} {done}/{total}", "progress": done / max(1, total)}
        self.listener.progress(done, total)

    def should_stop(self) -> bool:
        return heartbeat(self.store, self.job_id, **self.position)


def job_reporter(store: Store, job_id: int | None, step_offset: int = 0, phase: str | None = None,
                 listener: Reporter | None = None) -> Reporter:
    """The reporter a job's trainer gets: store-backed on the main process, the null reporter on the others; with
    no job, the listener alone (or nothing)."""
    if not is_main_process():
        return Reporter()
    if job_id is None:
        return listener or Reporter()
    return StoreReporter(store, job_id, step_offset, phase, listener)


def staging_path(store: Store, folder: str = POLICIES_FOLDER, prefix: str = STAGING_PREFIX) -> Path:
    """A new, not yet created, path under the store's data folder for a checkpoint that a launched phase (or this
    process) will write; nothing is left on disk if the run is killed before it saves, and the worker sweeps a
    half-written one a killed job left behind."""
    return store.data_dir / folder / f"{prefix}{uuid.uuid4().hex[:12]}"


def register_policy(store: Store, staged: Path, parent_id: int | None, round: int, note: str, made_by: str) -> int:
    """Check that every weight of the complete policy directory (saved into `staged` by the trainer) is finite, rename
    it to its final name beside it (named by what made it, `made_by`: one of `MADE_BY`) and register it; returns the
    new policy version's id. Non-finite weights: NonFiniteWeights, the folder removed, nothing registered."""
    if made_by not in MADE_BY:
        raise ValueError(f"made_by must be one of {', '.join(MADE_BY)}, got {made_by!r}")
    from ..models.finite import check_finite_weights  # torch: only where a policy is registered, never in the UI

    try:
        check_finite_weights(staged)
    except Exception:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    final = staged.parent / f"{made_by}-r{round}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    os.rename(staged, final)
    return add_policy(store, str(final), parent_id=parent_id, round=round, note=note)
