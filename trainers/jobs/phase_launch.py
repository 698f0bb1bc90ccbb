"""A job's training phase on several processes. The job's worker stays one process (it samples, queues pairs and waits
for labels, for hours if people label); when its job has an accelerate config, each training phase (reward model, PPO,
GRPO) runs as `accelerate launch --config_file FILE -m trainers.entry.phase_worker --spec FOLDER/spec.json`, and the
worker waits for it, relays its progress and registers what it trained.

The phase folder, `<data folder>/phases/job-<id>-<name>/` (shared by every machine of a multi-machine config):

    spec.json       written here: what every process needs (settings, model paths, prompts or examples, where to save)
    progress.json   rank 0, after every step: the last step's metrics and done/total (relayed to the job's listener)
    result.json     rank 0, at the end: completed (iterations, metrics) or cancelled
    rank-<r>.json   every rank that ended (cancelled too): the world size and a digest of its trained weights
    rank-<r>.error  a rank that raised: the last lines of its traceback

Only rank 0 of a phase touches the store (metrics, heartbeat and the cancel flag, through the job layer's reporter);
the other ranks read the spec and hear of a stop from rank 0. A rank killed without an error (SIGKILL, a lost
machine) ends the phase with `PhaseInterrupted` (the worker marks the job interrupted: resume continues from the
last saved state); a rank's error ends it with `PhaseFailed` (the job fails with that rank's error line).

    result = launch_phase(store, job_id, launch, "ppo-round-2", {"kind": "policy", "plan": ...}, report, listener)
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Mapping

from storage import Store
from storage import jobs as job_rows
from storage.errors import InvalidInput

from ..reporting import JobCancelled, Reporter
from .launch_config import AccelerateLaunch

ROOT = Path(__file__).resolve().parents[2]  # the repository: workers run from there
PHASES_FOLDER = "phases"
SPEC, PROGRESS, RESULT = "spec.json", "progress.json", "result.json"
POLL_S = 0.5
STOP_GRACE_S = 30.0  # a phase's processes get this long to end after the worker itself is stopped


class PhaseInterrupted(Exception):
    """A process of the phase died without an error of its own (killed); the job is interrupted and resumes."""


class PhaseFailed(Exception):
    """A process of the phase raised; `tail` is the end of its traceback, whose last line names the error."""

    def __init__(self, name: str, rank: int, tail: str):
        super().__init__(f"rank {rank} of the {name} phase failed: {tail.splitlines()[-1] if tail else '?'}")
        self.tail = f"rank {rank} of the {name} phase failed:\n{tail}"


def job_launch(store: Store, job_id: int | None) -> dict | None:
    """How job `job_id` runs its training phases (`AccelerateLaunch.to_dict()`), None in its own process."""
    return job_rows.get_job(store, job_id).launch if job_id is not None else None


def check_machine(launch: dict) -> None:
    """Refuse, in one line, a config that asks for more GPUs than this machine has (the UI cannot count them)."""
    import torch

    setup = AccelerateLaunch.from_dict(launch)
    have = torch.cuda.device_count()
    if setup.gpus_needed > have:
        raise InvalidInput(f"the accelerate config {setup.config_file} asks for {setup.gpus_needed} GPU"
                           f"{'s' * (setup.gpus_needed > 1)} on this machine but it has {have or 'none'}; use a config "
                           f"for {have} GPU{'s' * (have != 1)}" + (" or accelerate/cpu-2proc.yaml" if not have else ""))


def with_launch_precision(settings: dict, launch: dict) -> dict:
    """The trainer's settings with the config's mixed precision applied: bf16 when either asks for it."""
    return {**settings, "bf16": bool(settings.get("bf16")) or launch["mixed_precision"] == "bf16"}


def phase_folder(store: Store, job_id: int, name: str) -> Path:
    return store.data_dir / PHASES_FOLDER / f"job-{job_id}-{name}"


def phase_command(launch: dict, spec_path: Path) -> list[str]:
    """`accelerate launch` of the phase worker (no shell); on one machine on a free port, so that phases of other
    studios on the same machine never meet on accelerate's default one."""
    setup = AccelerateLaunch.from_dict(launch)
    argv = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", setup.config_file]
    if setup.machines == 1:
        argv += ["--main_process_port", str(free_port())]
    return argv + ["-m", "trainers.entry.phase_worker", "--spec", str(spec_path)]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch_phase(store: Store, job_id: int, launch: dict, name: str, spec: dict, report: Mapping,
                 listener: Reporter | None = None) -> dict:
    """Run phase `name` of job `job_id` under its accelerate config and wait for it; returns rank 0's result
    (`iterations`, `metrics`). `spec` is what the phase's processes need; `report` the job reporter's settings
    (`step_offset`, `phase`); `listener` hears the relayed progress. Raises JobCancelled (the job was stopped),
    PhaseFailed or PhaseInterrupted."""
    check_machine(launch)
    folder = phase_folder(store, job_id, name)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    full = {**spec, "name": name, "worker_pid": os.getpid(),
            "report": {"db": str(store.path.resolve()), "job_id": job_id, **report}}
    write_json(folder / SPEC, full)
    release_gpu_memory()
    process = subprocess.Popen(phase_command(launch, folder / SPEC), cwd=ROOT, stdin=subprocess.DEVNULL,
                               start_new_session=True)  # its own group: stopped whole if this worker stops
    relay = ProgressRelay(folder / PROGRESS, listener or Reporter())
    try:
        while process.poll() is None:
            relay.forward()
            time.sleep(POLL_S)
    except BaseException:
        stop_phase(process)
        raise
    relay.forward()
    return phase_outcome(folder, name, process.returncode, AccelerateLaunch.from_dict(launch).processes)


def phase_outcome(folder: Path, name: str, returncode: int, processes: int) -> dict:
    """How the phase of `processes` ranks ended, from its folder: rank 0's result, or the exception that says why
    there is none. A rank that left no record was killed: the others' errors (a lost peer) follow from that."""
    silent = [r for r in range(processes) if not (folder / f"rank-{r}.json").exists()
              and not (folder / f"rank-{r}.error").exists()]
    result = read_json(folder / RESULT)
    if returncode != 0 and (silent or result is None):
        how = f"signal {-returncode}" if returncode < 0 else f"exit code {returncode}"
        raise PhaseInterrupted(f"rank {silent[0] if silent else 0} of the {name} phase stopped without an error "
                               f"({how}: killed, or its machine was lost); resume the job to continue from its last "
                               "saved state")
    errors = sorted(folder.glob("rank-*.error"), key=lambda path: int(path.stem.split("-")[1]))
    if errors:
        raise PhaseFailed(name, int(errors[0].stem.split("-")[1]), errors[0].read_text().strip())
    if result["status"] == "cancelled":
        raise JobCancelled(result["message"])
    digests = {read_json(path)["digest"] for path in folder.glob("rank-*.json")} - {None}
    if len(digests) > 1:
        raise PhaseFailed(name, 0, f"RuntimeError: the processes of the {name} phase ended with different weights; "
                                   "check that every machine runs the same code and libraries")
    (folder / SPEC).unlink(missing_ok=True)  # the prompts or examples it held are in the store; the rest is a record
    return result


def stop_phase(process: subprocess.Popen) -> None:
    """End the phase's process group: asked first (SIGTERM), then killed."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=STOP_GRACE_S)
            return
        except subprocess.TimeoutExpired:
            continue


def release_gpu_memory() -> None:
    """Hand this process's cached GPU memory back before the phase's processes take the GPUs."""
    if "torch" in sys.modules:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()


class ProgressRelay:
    """Forwards what rank 0 wrote to `progress.json` to `listener`: each new step's metrics, then done/total."""

    def __init__(self, path: Path, listener: Reporter):
        self.path, self.listener = path, listener
        self.step, self.position = 0, None

    def forward(self) -> None:
        progress = read_json(self.path)
        if progress is None:
            return
        if progress.get("step", 0) > self.step:
            self.step = progress["step"]
            self.listener.on_step(self.step, progress["metrics"])
        position = (progress.get("done"), progress.get("total"))
        if position != self.position and position[1]:
            self.position = position
            self.listener.progress(*position)


def weights_digest(model) -> str:
    """A digest of a torch module's trainable weights: equal on every rank when the gradients were averaged."""
    digest = hashlib.sha256()
    for name, parameter in sorted(model.named_parameters()):
        if parameter.requires_grad:
            digest.update(name.encode())
            digest.update(parameter.detach().float().cpu().numpy().tobytes())
    return digest.hexdigest()


def write_json(path: Path, value) -> None:
    """Write JSON whole: into a temporary file, renamed into place (a reader never sees half of it)."""
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(value))
    os.replace(temporary, path)


def read_json(path: Path):
    """The JSON in `path`, or None when it is not there (yet)."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
