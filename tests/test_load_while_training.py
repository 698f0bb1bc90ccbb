"""The short version of bench/load_while_training.py: 4 annotators label for 20 s through the API while a loop job
trains in its worker. No acknowledged vote is lost, no pair goes to two annotators, and the loop moves on meanwhile.
(No speed is asserted here: the bench prints votes/s, latency and the worker's progress against a baseline.)"""

import json
import time

from gradio_client import Client

from bench.studio_driver import annotate, audit, job_progress, stop_and_wait
from storage import JobStatus
from storage import jobs as job_rows

LOOP = {"rounds": 1, "prompts_per_round": 8, "samples_per_prompt": 3, "labels_per_round": 8, "queue_reserve": 4,
        "reward_epochs": 1, "reward_batch_size": 8, "policy_iterations": 20, "policy_batch_size": 8, "policy_epochs": 1,
        "response_length": 8}
ANNOTATORS, SECONDS = 4, 20.0


def wait_until_working(store, job_id, timeout=300):
    """The job's progress once its worker reports a phase (it has started and claimed the job)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if job_rows.get_job(store, job_id).phase:
            return job_progress(store, job_id)
        time.sleep(0.2)
    raise AssertionError("the loop's worker never reported a phase")


def test_annotators_label_while_a_loop_trains(demo_store, serve_studio):
    store = demo_store
    url = serve_studio(store).local_url
    job_id = Client(url, verbose=False).predict(json.dumps(LOOP), api_name="/start_loop")["job_id"]
    try:
        before = wait_until_working(store, job_id)
        run = annotate(url, ANNOTATORS, SECONDS)
        after = job_progress(store, job_id)
    finally:
        stop_and_wait(store, job_id)
    assert run.errors == [] and len(run.latencies) > ANNOTATORS
    assert audit(store, run.ledger) == {"lost": 0, "changed": 0, "double_assigned": 0, "labeled_twice": 0}
    job = job_rows.get_job(store, job_id)
    assert job.status is not JobStatus.FAILED, job.error
    assert (after.fraction, after.phase) != (before.fraction, before.phase)  # the loop moved on while people labeled
