"""A loop whose labels come from a judge model over loopback HTTP: RLAIF, and hybrid (the judge's confident verdicts
train, the pairs it is unsure of go to people, played by the oracle here); the judge's agreement with people."""

import argparse
import json
import time
from types import SimpleNamespace

import pytest

from app.commands import loop_cli
from app.commands.cli import main
from assets.lexicon import sentiment_score
from labeling.judges.judge_http import EndpointRefused
from storage import jobs as job_rows
from storage.errors import InvalidInput
from storage.judge_verdicts import list_verdicts
from storage.labels import list_labels, training_labels
from storage.reward_models import list_reward_models
from storage.rounds import list_rounds
from tests.judge_server import HostileServer, JudgeServer, dripping, prefers_score, streaming
from trainers.loop.judging import collect_judge_labels

TINY = {"prompts_per_round": 8, "samples_per_prompt": 3, "queue_reserve": 6, "reward_epochs": 2,
        "policy_iterations": 1, "policy_batch_size": 8, "policy_epochs": 1, "response_length": 8, "eval_prompts": 4,
        "eval_samples": 1, "winrate_pairs": 0, "check_share": 0.0}


def test_a_hybrid_loop_trains_on_confident_verdicts_and_people_label_the_rest(demo_store, capsys):
    with JudgeServer(prefers_score(sentiment_score), logprobs=True) as server:
        code = main(["loop", "--db", str(demo_store.path), "--rounds", "1", "--labels-per-round", "12",
                     "--annotator", "judge", "--judge", server.url, "--judge-model", "fake-judge",
                     "--judge-threshold", "0.7", "--judge-people", "oracle", "--config", json.dumps(TINY)])
    assert code == 0, capsys.readouterr().err
    [round_row] = list_rounds(demo_store)
    assert round_row["summary"]["labels"] == 12
    verdicts = [v for v in list_verdicts(demo_store, "fake-judge") if v.status == "ok"]
    sure = {v.pair_id for v in verdicts if v.trains}
    unsure = {v.pair_id for v in verdicts if not v.trains}
    assert sure and unsure and all(v.confidence >= 0.7 for v in verdicts if v.trains)
    people = {label.pair_id for label in list_labels(demo_store, annotator="oracle")}
    assert not people & sure  # people were never handed a pair the judge labelled for training
    assert unsure <= people or len(people) + len(sure) == 12  # the unsure pairs went to people
    trained = training_labels(demo_store)
    assert len(trained) == 12 == len(sure) + len(people)
    assert {lp.annotator for lp in trained} == {"judge:fake-judge", "oracle"}
    [member] = list_reward_models(demo_store)
    assert member.labels_used <= 12
    [job] = job_rows.list_jobs(demo_store)
    assert any("judge fake-judge judged 12 pairs" in line for line in job_rows.tail_logs(demo_store, job.id, 200))


def test_an_rlaif_loop_labels_with_the_judge_alone(demo_store, capsys):
    with JudgeServer(prefers_score(sentiment_score)) as server:
        code = main(["loop", "--db", str(demo_store.path), "--rounds", "1", "--labels-per-round", "10",
                     "--annotator", "judge", "--judge", server.url, "--judge-model", "fake-judge",
                     "--config", json.dumps(TINY)])
    assert code == 0, capsys.readouterr().err
    assert list_labels(demo_store) == []  # nobody labelled: the judge's verdicts alone trained
    assert list_rounds(demo_store)[0]["summary"]["labels"] == 10
    assert {lp.annotator for lp in training_labels(demo_store)} == {"judge:fake-judge"}


class OneRoundOfJudging:
    """What `collect_judge_labels` asks of a loop: its config and store, the round's labels wanted, a job's log."""

    def __init__(self, config, store, wanted: int):
        self.config, self.store, self.wanted = config, store, wanted
        self.job = SimpleNamespace(id=job_rows.create_job(store, "loop", config.to_dict()))

    def labels_wanted(self, index: int) -> int:
        return self.wanted

    def step(self, *args) -> None:
        pass

    def log(self, line: str) -> None:
        pass


def loop_options(*options: str):
    parser = argparse.ArgumentParser()
    loop_cli.add_arguments(parser)
    return loop_cli.config_from_args(parser.parse_args(list(options)))


def test_a_loops_judge_takes_the_loops_timeout_and_answer_cap(store, queue_pairs):
    with HostileServer(dripping("body")) as drip:
        config = loop_options("--annotator", "judge", "--judge", drip.url, "--judge-model", "slow", "--judge-people",
                              "oracle", "--labels-per-round", "1", "--judge-timeout", "1", "--judge-max-mb", "0.5")
        assert (config.judge_timeout, config.judge_max_mb) == (1, 0.5)
        for bad in ({"judge_timeout": 0}, {"judge_max_mb": -1}):
            with pytest.raises(InvalidInput, match="judge_timeout and judge_max_mb must be positive or null"):
                config.updated(bad)
        loop = OneRoundOfJudging(config, store, wanted=1)
        queue_pairs([("p1", "good", "bad")], round=0, job_id=loop.job.id)  # the loop's own pair: its judge's only
        began = time.monotonic()
        collect_judge_labels(loop, 0, 0, seed=0)
        took = time.monotonic() - began
    [verdict] = list_verdicts(store, "slow")
    assert verdict.status == "timeout" and took < 4, took  # both orders timed out after 1 s each, not 60
    assert [label.annotator for label in list_labels(store)] == ["oracle"]  # the pair went to people instead
    queue_pairs([("p2", "good", "bad")], round=1, job_id=loop.job.id)
    with HostileServer(streaming(2_000_000, announced=False)) as huge:
        loop.config = config.updated({"judge": huge.url})
        with pytest.raises(EndpointRefused, match="over 0.5 MB"):
            collect_judge_labels(loop, 1, 1, seed=0)
    assert len(list_verdicts(store, "slow")) == 1  # the refused answer stored nothing
