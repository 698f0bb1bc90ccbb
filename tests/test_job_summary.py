"""A loop job's result line (the end of `loop`, `status`, the Train tab's result card), on rows written by hand:
the versions it made, the newest one's win rate with its interval and who judged it, the oracle's score before and
after, its warnings; and who judged, named."""

import os

from labeling.queue.synthetic import OracleAnnotator
from storage import jobs as job_rows
from storage.job_warnings import record_warnings
from storage.metrics import log_metrics
from storage.policies import get_policy
from storage.rounds import add_round
from storage.types import JobStatus, JobWarning
from tests.winrate_helpers import by_version, versions
from trainers.loop.config import LoopConfig
from trainers.loop.job_summary import job_summary, who_judged
from trainers.loop.winrate_pairs import queue_version_pairs


def test_a_finished_loop_reads_as_its_versions_win_rate_oracle_scores_and_warnings(store):
    sft, v1, v2 = versions(store, 2)
    job_id = job_rows.create_job(store, "loop", {})
    job_rows.claim_job(store, job_id, os.getpid())
    assert job_summary(store, job_rows.get_job(store, job_id)) is None  # no round done yet
    for g, policy_id in ((1, v1), (2, v2)):
        add_round(store, job_id, g, {}, {"labels": 10}, policy_id, None)
    log_metrics(store, job_id, 0, {"round/oracle_score": 0.531})
    log_metrics(store, job_id, 2, {"round/oracle_score": 1.224})
    queue_version_pairs(store, get_policy(store, v2), LoopConfig(winrate_pairs=8), within=0, with_oracle=False)
    OracleAnnotator(by_version).label(store, 8)  # v2 wins each: 8/8, Wilson's 95% low end 8 / (8 + 1.96²) = 68%
    job_rows.finish_job(store, job_id, JobStatus.COMPLETED)
    assert job_summary(store, job_rows.get_job(store, job_id)) == (
        f"job {job_id} (loop) completed: made v1–v2 in 2 rounds · v2 vs SFT 100% [68%, 100%] (8 judgements by the "
        "oracle annotator) · oracle score 0.53 → 1.22 · no warnings")
    record_warnings(store, job_id, [JobWarning(job_id, "kl_runaway", 2, None, "KL is rising", "", "", 0.0)])
    assert job_summary(store, job_rows.get_job(store, job_id)).endswith("· oracle score 0.53 → 1.22 · 1 warning")
    assert job_summary(store, job_rows.get_job(store, job_rows.create_job(store, "ppo", {}))) is None


def test_who_judged_is_named_with_counts():
    assert who_judged(["oracle"] * 3) == "the oracle annotator"
    assert who_judged(["alice", "bob", "alice"]) == "people (2 annotators)"
    assert who_judged(["alice"]) == "people (1 annotator)"
    assert who_judged(["alice", "oracle", "oracle"]) == "people and the oracle annotator (1 and 2)"
