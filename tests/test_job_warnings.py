"""Stored failure warnings (once per rule and round), paused jobs that resume past them, and check pairs' votes."""

import pytest

from storage import Conflict, JobStatus
from storage import jobs as job_rows
from storage.check_pairs import check_pair_ids, check_votes, queue_pairs_with_checks
from storage.generations import NewGeneration, add_generations
from storage.job_warnings import list_warnings, record_warnings
from storage.labels import NewLabel, insert_label
from storage.pairs import NewPair, list_pairs
from storage.prompts import NewPrompt, add_prompts, list_prompts
from storage.types import JobWarning, Outcome, Selector


def warning(job_id, rule="kl_per_token", round=1, step=7):
    return JobWarning(job_id, rule, round, step, "KL too high", "KL 9 nats per token", "raise beta", 1.0)


def test_a_warning_is_stored_once_per_rule_and_round(store):
    job = job_rows.create_job(store, "loop", {})
    assert record_warnings(store, job, [warning(job), warning(job, round=2)]) == [warning(job), warning(job, round=2)]
    assert record_warnings(store, job, [warning(job, step=9), warning(job, rule="entropy_collapse")]) == [
        warning(job, rule="entropy_collapse")]
    stored = list_warnings(store, job)
    assert [(w.rule, w.round, w.step) for w in stored] == [
        ("kl_per_token", 1, 7), ("kl_per_token", 2, 7), ("entropy_collapse", 1, 7)]
    assert all(w.acknowledged is None for w in stored)


def test_a_paused_job_resumes_and_its_warnings_are_acknowledged(store):
    job = job_rows.create_job(store, "loop", {})
    job_rows.claim_job(store, job, pid=1)
    record_warnings(store, job, [warning(job)])
    job_rows.pause_job(store, job, "paused: kl_per_token: KL too high")
    paused = job_rows.get_job(store, job)
    assert paused.status is JobStatus.PAUSED and not paused.status.active
    assert paused.phase == "paused: kl_per_token: KL too high"
    assert job_rows.requeue_job(store, job).status is JobStatus.QUEUED
    assert all(w.acknowledged is not None for w in list_warnings(store, job))


def test_a_completed_job_does_not_resume(store):
    job = job_rows.create_job(store, "loop", {})
    job_rows.finish_job(store, job, JobStatus.COMPLETED)
    with pytest.raises(Conflict, match="paused job can resume"):
        job_rows.requeue_job(store, job)


def test_check_pairs_are_ordinary_pairs_with_the_reward_models_prediction(store):
    add_prompts(store, [NewPrompt("p")])
    [prompt] = list_prompts(store)
    a, b, c = add_generations(store, [NewGeneration(prompt.id, t) for t in "abc"])
    pairs = [NewPair(prompt.id, a, b, "random", 0.9, 2), NewPair(prompt.id, a, c, Selector.CHECK, 0.9, 2),
             NewPair(prompt.id, b, c, "random", 0.5, 2)]
    ids = queue_pairs_with_checks(store, pairs, {1: (None, 0.9)})
    assert [p.id for p in list_pairs(store)] == ids
    assert check_pair_ids(store, round=2) == [ids[1]] and check_pair_ids(store, round=1) == []
    with store.write() as db:
        insert_label(db, NewLabel(ids[1], "ann", Outcome.SECOND, "v1"), 1.0)
        insert_label(db, NewLabel(ids[1], "bob", Outcome.SKIP, "v2"), 1.0)
        insert_label(db, NewLabel(ids[0], "ann", Outcome.FIRST, "v3"), 1.0)
    [vote] = check_votes(store)
    assert (vote.pair_id, vote.round, vote.annotator, vote.outcome, vote.prob_first) == (
        ids[1], 2, "ann", Outcome.SECOND, 0.9)
