"""An `export` job: the Leaderboard's Export button takes a version out in the worker's process (the serving process
never loads torch), into the store's data folder, `exports/vK-<time>/`; the folder's lines go into the job's log and
its last phase.

    start_job(store, JobKind.EXPORT, {"version": "v3", "quant": "q8_0"})   # quant None: no GGUF
"""

from __future__ import annotations

import time

from storage import Store
from storage import jobs as job_rows
from storage.types import Job

from .folder import export_version

EXPORTS_FOLDER = "exports"


def run_job(store: Store, job: Job) -> None:
    version, quant = job.config["version"], job.config.get("quant")
    job_rows.heartbeat(store, job.id, phase=f"exporting {version}" + (f" with a {quant} GGUF" if quant else ""))
    out = store.data_dir / EXPORTS_FOLDER / f"{version}-{time.strftime('%Y%m%d-%H%M%S')}"
    out.parent.mkdir(parents=True, exist_ok=True)
    lines = export_version(store, version, out, quant=quant).line().splitlines()
    for line in lines:
        job_rows.add_log(store, job.id, line)
    job_rows.heartbeat(store, job.id, phase=lines[0], progress=1.0)
