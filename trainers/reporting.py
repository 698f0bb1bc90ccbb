"""What a trainer reports to, and how it is told to stop. No store here: the job layer (`trainers.jobs.layer`) builds
the reporter, so a trainer (PPO, the reward model, later GRPO) never reaches the store itself.

    reporter.progress(done, total)        # where the trainer is (steps finished of the run)
    if stop_requested(reporter):          # the main process's answer, the same on every process
        ...save what resumes the run...
        raise JobCancelled("PPO was stopped after 3 of 10 iterations; resume the job to continue")
    reporter.on_step(step, metrics)       # one step's metrics, e.g. {"ppo/kl": 0.4, "ppo/score": 1.2}

Imports nothing heavy (torch only inside `same_on_all_ranks`), so the UI process may import the job layer.
"""

from __future__ import annotations

from typing import Mapping


class JobCancelled(Exception):
    """The job was asked to stop; the trainer saved what a resumed job continues from (the one cancellation
    exception: the worker records the job as `cancelled`)."""


class JobPaused(Exception):
    """A loop stopped itself on a failure warning (`on_warning: pause`); the message, `paused: <rule>: <title>`, becomes
    the job's phase. The worker records the job as `paused`; a resume continues it past the warning."""


class Reporter:
    """Where a trainer reports. This base reports nowhere and never stops: the null reporter (tests, benches, and
    every process but the main one in a distributed run)."""

    def on_step(self, step: int, metrics: Mapping[str, float]) -> None:
        """The metrics of step `step` (1-based, counted by the trainer), namespaced such as `ppo/kl`."""

    def progress(self, done: int, total: int) -> None:
        """`done` of the run's `total` steps are finished (after each step; PPO also before its first)."""

    def should_stop(self) -> bool:
        """True once the job should stop; asked between steps (PPO: every iteration; reward: every logging step)."""
        return False


def same_on_all_ranks(value):
    """The main process's `value`, broadcast to every process of a distributed run (unchanged otherwise)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]
    return value


def stop_requested(reporter: Reporter) -> bool:
    """`reporter.should_stop()` as the main process answers it, on every process (the others hold a null reporter)."""
    return bool(same_on_all_ranks(reporter.should_stop()))
