"""`python app.py status`: the store's jobs (or one) with their status, progress and failure warnings, then each
policy version's win rate against the SFT policy and the leaderboard (as `python app.py leaderboard` prints them),
then each judge model's verdicts and its agreement with people (`labeling.judges.judge_agreement`),
for headless use (a paused loop says why; resume it with `python app.py loop --resume JOB` or the Train tab's Resume).

    python app.py status --db studio.db            # every job, newest first
    python app.py status --db studio.db --job 3    # one job
"""

from __future__ import annotations

import argparse
from pathlib import Path

from app.commands.leaderboard_cli import report_lines
from app.versions.function_scores import function_score_lines
from labeling.gold.gold import gold_scores
from labeling.judges.judge_agreement import judge_report_lines
from labeling.stats.reliability import label_alpha
from labeling.versions.winrate import winrate_report
from storage import Store
from storage import jobs as job_rows
from storage.errors import InvalidInput
from storage.job_warnings import list_warnings
from storage.rounds import open_items
from storage.types import Job, JobStatus
from trainers.jobs.launcher import reap_orphans
from trainers.loop.job_summary import job_summary

RESUME_COMMAND = {"loop": "loop", "policy": "ppo", "dpo": "dpo", "sft": "sft",  # job kind -> the command whose
                  "reward": "train-reward"}  # --resume continues it


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", default="studio.db", help="store file to read the jobs from")
    parser.add_argument("--job", type=int, default=None, help="show this job only")


def job_lines(store: Store, job: Job) -> list[str]:
    """A job's headline (id, kind, status, progress, phase), its result once it ended (a completed job's in place of
    its last phase, which no longer says anything), and one line per warning, in the order they fired."""
    summary = None if job.status.active else job_summary(store, job)
    progress = f" {job.progress:.0%}" if job.progress is not None else ""
    stale = summary is not None and job.status is JobStatus.COMPLETED
    phase = f" · {job.phase}" if job.phase and not stale else ""
    lines = [f"job {job.id} {job.kind}: {job.status.value}{progress}{phase}"]
    if summary is not None:
        lines.append(f"  result: {summary}")
    if job.status.resumable and job.kind in RESUME_COMMAND:
        lines.append(f"  resume: python app.py {RESUME_COMMAND[job.kind]} --resume {job.id} --db {store.path}")
    if job.status.resumable and job.kind == "loop":
        lines.extend(f"  {line}" for line in left_for_people(store, job))
    for w in list_warnings(store, job.id):
        step = f", step {w.step}" if w.step is not None else ""
        seen = " (acknowledged)" if w.acknowledged is not None else ""
        lines.append(f"  warning: {w.rule}: {w.title} (store round {w.round}{step}){seen}: {w.detail}")
    return lines


def left_for_people(store: Store, job: Job) -> list[str]:
    """What a stopped loop queued that nobody labelled: it stays in the people's queue, counts for that loop only
    (when resumed), and no other loop takes it."""
    pairs, rankings = open_items(store, job.id)
    items = [f"{n} {kind}{'s' if n != 1 else ''}" for n, kind in ((pairs, "pair"), (rankings, "ranking")) if n]
    if not items:
        return []
    return [f"queue: {' and '.join(items)} of this loop wait{'s' if pairs + rankings == 1 else ''} for people in the "
            "Label tab; their labels count for this loop when it is resumed, never for another"]


def run(args: argparse.Namespace) -> int:
    if not Path(args.db).is_file():
        raise InvalidInput(f"store {args.db} does not exist; pass the --db of a studio")
    store = Store(args.db)
    reap_orphans(store)  # a job whose process is gone (killed, crashed, rebooted) reads as interrupted, not running
    jobs = [job_rows.get_job(store, args.job)] if args.job is not None else job_rows.list_jobs(store)
    if not jobs:
        print("no jobs yet")
    for job in jobs:
        print("\n".join(job_lines(store, job)))
    print("\n".join(report_lines(winrate_report(store)) + function_score_lines(store)))
    for line in judge_report_lines(store):
        print(line)
    alpha, units = label_alpha(store)
    if units:  # items judged by two or more annotators (overlap)
        print(f"agreement: Krippendorff's α {'—' if alpha is None else f'{alpha:.2f}'} over {units} items "
              "(pairs and ranking comparisons)")
    for score in gold_scores(store):  # gold items: each annotator's accuracy
        print(f"gold accuracy {score.line()}")
    return 0
