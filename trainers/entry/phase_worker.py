"""One process (rank) of a training phase: `accelerate launch --config_file FILE -m trainers.entry.phase_worker --spec
FOLDER/spec.json`, started by the job's worker (`trainers.jobs.phase_launch`), one per GPU (or CPU process) and machine.

Every rank reads the spec and trains its share (PPO and GRPO split the prompts, the reward model's Trainer the
batches; gradients are averaged). Only rank 0 opens the store: its reporter logs each step's metrics once, heartbeats
and reads the cancel flag, and `trainers.reporting.stop_requested` hands its answer to every rank; it also relays
progress to the worker (`progress.json`), saves what the phase trained and writes `result.json`. Rank 0 stops the
phase, as if cancelled, when the worker that started it is gone. Every rank writes `rank-<r>.json` (a digest of its
trained weights; cancelled: none) when it ends, or `rank-<r>.error` when it raises.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Callable, Mapping

from ..jobs import dpo_job, policy_job, reward_job
from ..jobs.launcher import pid_alive
from ..jobs.layer import error_tail, is_main_process, job_reporter
from ..jobs.phase_launch import PROGRESS, RESULT, write_json
from ..reporting import JobCancelled, Reporter

Phase = Callable[[dict, Reporter], dict]  # (spec, reporter) -> {"metrics", "digest" (weights_digest), ...}
PHASES: dict[str, Phase] = {"policy": policy_job.run_phase, "reward": reward_job.run_phase,  # what each rank runs
                            "dpo": dpo_job.run_phase}


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


class RelayedReporter(Reporter):
    """Rank 0's reporter: the store's (`inner`), with every step and progress also written to `progress.json` for
    the worker, and a stop once the worker (`worker_pid`) is gone."""

    def __init__(self, inner: Reporter, folder: Path, worker_pid: int):
        self.inner, self.path, self.worker_pid = inner, folder / PROGRESS, worker_pid
        self.state: dict = {"step": 0, "metrics": {}, "done": 0, "total": 0}

    def on_step(self, step: int, metrics: Mapping[str, float]) -> None:
        self.inner.on_step(step, metrics)
        self.state.update(step=step, metrics=dict(metrics))
        write_json(self.path, self.state)

    def progress(self, done: int, total: int) -> None:
        self.inner.progress(done, total)
        self.state.update(done=done, total=total)
        write_json(self.path, self.state)

    def should_stop(self) -> bool:
        return self.inner.should_stop() or not pid_alive(self.worker_pid)


def phase_reporter(spec: dict, folder: Path) -> Reporter:
    """Rank 0: the job's store reporter, relayed; every other rank: the null reporter (it never opens the store)."""
    if not is_main_process():
        return Reporter()
    from storage import Store

    report = spec["report"]
    inner = job_reporter(Store(report["db"]), report["job_id"], report.get("step_offset", 0), report.get("phase"))
    return RelayedReporter(inner, folder, spec["worker_pid"])


def run(spec_path: Path) -> None:
    """Run the phase of `spec_path` on this rank and record how it ended in the phase folder."""
    folder = spec_path.parent
    spec = json.loads(spec_path.read_text())
    record = {"world_size": int(os.environ.get("WORLD_SIZE", "1")), "digest": None}
    try:
        outcome = PHASES[spec["kind"]](spec, phase_reporter(spec, folder))
    except JobCancelled as exc:
        write_json(folder / f"rank-{rank()}.json", {**record, "cancelled": True})
        if is_main_process():
            write_json(folder / RESULT, {"status": "cancelled", "message": str(exc)})
        return
    except BaseException as exc:
        (folder / f"rank-{rank()}.error").write_text(error_tail(exc) + "\n")
        raise
    write_json(folder / f"rank-{rank()}.json", {**record, "digest": outcome.pop("digest")})
    if is_main_process():
        write_json(folder / RESULT, {"status": "completed", **outcome})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="One process of a studio job's training phase (started by its worker).")
    parser.add_argument("--spec", required=True, help="the phase's spec.json, written by the job's worker")
    args = parser.parse_args(argv)
    run(Path(args.spec))
    return 0


if __name__ == "__main__":
    sys.exit(main())
