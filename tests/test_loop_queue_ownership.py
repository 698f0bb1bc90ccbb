"""A loop owns its queue and its labels: the items a loop job queues belong to it (in store rounds no other job
shares), its oracle or judge labels nothing else, and a stopped loop's unlabelled items stay for people, counted by
that loop alone when it is resumed (trainers/loop/rounds.py, storage/rounds.claim_rounds). The cross-loop sequence of
issue 52 on the demo, in-process, at tiny settings."""

import json
from types import SimpleNamespace

import pytest

import trainers.loop.rounds as loop_rounds
from app.commands.cli import main
from app.commands.status_cli import job_lines
from assets.lexicon import sentiment_score
from storage import JobStatus
from storage import jobs as job_rows
from storage.judge_verdicts import list_verdicts
from storage.labels import list_labels
from storage.pairs import get_pair, list_pairs
from storage.policies import list_policies
from storage.rankings import list_rankings, ranking_verdicts
from storage.reward_models import list_reward_models
from storage.rounds import claim_rounds, list_rounds, owned_rounds
from tests.judge_server import JudgeServer, prefers_score
from trainers.reporting import JobCancelled

TINY = {"samples_per_prompt": 3, "prompts_per_round": 8, "queue_reserve": 4, "reward_epochs": 1,
        "policy_iterations": 1, "policy_batch_size": 8, "policy_epochs": 1, "response_length": 8, "eval_prompts": 2,
        "eval_samples": 1, "winrate_pairs": 0, "check_share": 0.0}
RANKINGS_OF_4 = {**TINY, "rank_k": 4, "samples_per_prompt": 4, "prompts_per_round": 12}


def loop(store, *options: str, config: dict = TINY) -> int:
    return main(["loop", "--db", str(store.path), "--rounds", "1", *options, "--config", json.dumps(config)])


@pytest.fixture
def stop_when_waiting(demo_store, monkeypatch):
    """A loop that waits for people is stopped at its first wait (as Stop in the Train tab does), and the phase it
    waited in is kept."""
    waited = []

    def stop(seconds: float) -> None:
        [job] = [job for job in job_rows.list_jobs(demo_store) if job.status is JobStatus.RUNNING]
        waited.append(job.phase)
        job_rows.request_cancel(demo_store, job.id)

    monkeypatch.setattr(loop_rounds, "time", SimpleNamespace(sleep=stop))
    return waited


def test_a_cancelled_ranking_loop_keeps_its_rankings_from_the_next_oracle_loop_and_resumes_waiting(
        demo_store, stop_when_waiting, capsys):
    loop(demo_store, "--labels-per-round", "8", "--annotator", "human", config=RANKINGS_OF_4)
    human = job_rows.list_jobs(demo_store)[0]
    assert human.status is JobStatus.CANCELLED and stop_when_waiting == ["round 1/1: waiting for rankings (0/8)"]
    theirs = {ranking.id for ranking in list_rankings(demo_store)}
    assert len(theirs) == 12 and {r.job_id for r in list_rankings(demo_store)} == {human.id}
    assert any("queue: 12 rankings of this loop wait for people" in line for line in job_lines(demo_store, human))

    assert loop(demo_store, "--labels-per-round", "8", "--annotator", "oracle") == 0, capsys.readouterr().err
    oracle = job_rows.list_jobs(demo_store)[0]
    assert ranking_verdicts(demo_store, include_skips=True) == []  # not one of the human loop's rankings labelled
    labels = list_labels(demo_store, annotator="oracle")
    assert len(labels) == 8 and {get_pair(demo_store, label.pair_id).job_id for label in labels} == {oracle.id}
    [done] = list_rounds(demo_store, oracle.id)
    assert done["summary"]["labels"] == 8 and done["round"] not in owned_rounds(demo_store, human.id)
    assert {p.round for p in list_pairs(demo_store) if p.job_id == oracle.id} == {done["round"]}

    main(["loop", "--db", str(demo_store.path), "--resume", str(human.id)])  # it waits for people: stopped again
    assert stop_when_waiting[-1] == "round 1/1: waiting for rankings (0/8)"
    assert job_rows.get_job(demo_store, human.id).status is JobStatus.CANCELLED
    assert list_rounds(demo_store, human.id) == [] and not [m for m in list_reward_models(demo_store)
                                                           if m.job_id == human.id]
    rounds = [p.round for p in list_policies(demo_store)]
    assert len(rounds) == len(set(rounds)) == 2  # v0 and the oracle loop's version: no store round twice


def test_a_judge_loop_after_a_cancelled_oracle_loop_asks_the_judge(demo_store, monkeypatch, capsys):
    def stopped(self, g):
        raise JobCancelled("the loop was stopped; resume to continue from this step")

    with monkeypatch.context() as patched:  # the oracle loop is stopped once its labels are in
        patched.setattr(loop_rounds.Loop, "train_reward", stopped)
        loop(demo_store, "--labels-per-round", "8", "--annotator", "oracle")
    oracle = job_rows.list_jobs(demo_store)[0]
    assert oracle.status is JobStatus.CANCELLED and len(list_labels(demo_store, annotator="oracle")) == 8

    with JudgeServer(prefers_score(sentiment_score)) as server:
        code = loop(demo_store, "--labels-per-round", "8", "--annotator", "judge", "--judge", server.url,
                    "--judge-model", "fake-judge")
    assert code == 0, capsys.readouterr().err
    judge = job_rows.list_jobs(demo_store)[0]
    verdicts = [v for v in list_verdicts(demo_store, "fake-judge") if v.trains]
    assert len(verdicts) == 8 and {get_pair(demo_store, v.pair_id).job_id for v in verdicts} == {judge.id}
    [done] = list_rounds(demo_store, judge.id)
    assert done["summary"]["labels"] == 8 and done["round"] not in owned_rounds(demo_store, oracle.id)


def test_each_loop_job_claims_its_own_store_rounds_once(demo_store):
    first = job_rows.create_job(demo_store, "loop", {"rounds": 3})
    assert claim_rounds(demo_store, first, 3) == 1 == claim_rounds(demo_store, first, 3)  # a resume keeps them
    job_rows.request_cancel(demo_store, first)
    second = job_rows.create_job(demo_store, "loop", {"rounds": 2})
    assert claim_rounds(demo_store, second, 2) == 4 and owned_rounds(demo_store, second) == range(4, 6)
