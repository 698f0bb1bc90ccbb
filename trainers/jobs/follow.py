"""`--accelerate-config FILE` on `loop`, `ppo` and `train-reward`: the job goes through the launcher (its training
phases run under `accelerate launch`, as the Train tab's jobs do under `serve --accelerate-config`) and the terminal
follows it from the store: the number of processes, a progress bar with the job's phase, how it ended. Ctrl-C asks
the job to stop (it ends `cancelled` within one step, resumable, and the command exits 130); a second Ctrl-C leaves
it running.

    add_accelerate_option(parser)
    job = launch_and_follow(store, JobKind.POLICY, settings, args.accelerate_config, resume=args.resume)
"""

from __future__ import annotations

import argparse
import signal
import sys
import time

from storage import Store
from storage import jobs as job_rows
from storage.types import Job

from .launch_config import read_launch_config
from .launcher import reap_orphans, resume_job, start_job, stop_job
from .layer import JobKind
from .stopping import note_stop_signal

POLL_S = 0.5


def add_accelerate_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--accelerate-config", default=None, metavar="FILE",
                        help="run each training phase under `accelerate launch --config_file FILE` (several GPUs or "
                             "machines; see docs/scale-out.md) and follow the job here")


def launch_and_follow(store: Store, kind: JobKind, settings: dict | None, accelerate_config: str,
                      resume: int | None = None) -> Job:
    """Start a job of `kind` with `settings` (or resume job `resume`) under `accelerate_config`, after checking the
    config and this machine's GPUs (one line, nothing started), and follow it to its end."""
    from .phase_launch import check_machine

    launch = read_launch_config(accelerate_config)
    check_machine(launch.to_dict())
    if resume is not None:
        job_id = resume_job(store, resume, accelerate_config).id
    else:
        job_id = start_job(store, kind, settings, accelerate_config)
    print(f"{kind} job {job_id} trains on {launch.describe()} ({accelerate_config})", file=sys.stderr)
    return follow_job(store, job_id)


def follow_job(store: Store, job_id: int) -> Job:
    """Show the job's progress and phase until it ends (Ctrl-C: ask it to stop); returns it as it ended."""
    from tqdm import tqdm

    bar = tqdm(total=1000, desc=f"job {job_id}", unit="‰", file=sys.stderr,
               bar_format="{l_bar}{bar}| {elapsed} {postfix}")
    stopping = False
    note_stop_signal(None)
    try:
        while True:
            try:
                job = watch_until_done(store, job_id, bar)
                break
            except KeyboardInterrupt:
                if stopping:
                    bar.write(f"left job {job_id} running; python app.py serve shows it, and stops it")
                    raise
                stopping = True
                note_stop_signal(signal.SIGINT)
                stop_job(store, job_id)
                bar.write(f"stopping job {job_id}: it ends within one step (Ctrl-C again to leave it running)")
    finally:
        bar.close()
    return job


def watch_until_done(store: Store, job_id: int, bar) -> Job:
    while True:
        reap_orphans(store)  # a worker that died ends the job `interrupted`
        job = job_rows.get_job(store, job_id)
        bar.update(int((job.progress or 0.0) * 1000) - bar.n)
        bar.set_postfix_str(job.phase or job.status.value)
        if not job.status.active:
            return job
        time.sleep(POLL_S)
