"""A loop started in the studio (`/start_loop`, the Train tab) may name only the judge `serve` was started with:
never another model folder or URL; `serve --judge` is checked before anything is served."""

import argparse
import json
from dataclasses import replace
from types import SimpleNamespace

import gradio as gr
import pytest

from app.auth import Users
from app.commands.cli import main
from app.train import train_tab
from app.train.judging import add_serve_judge_arguments, served_judge
from storage import jobs as job_rows
from tests.helpers import workerless_studio

OWNER = SimpleNamespace(username="owner")
SMALL = {"rounds": 1, "prompts_per_round": 8, "policy_batch_size": 8, "labels_per_round": 8}
SERVED = {"judge": "http://127.0.0.1:8000/v1", "judge_model": "qwen", "judge_key_env": None, "judge_template": None}


@pytest.fixture
def studio(store, monkeypatch):
    return workerless_studio(store, monkeypatch, Users({"owner": "o"}, frozenset({"owner"})))


@pytest.mark.parametrize("settings, message", [
    ({"annotator": "judge", "judge": "/tmp/some-model"}, "annotator judge needs a judge named on the command line"),
    ({"judge": "http://evil.example/v1"}, "judge may only be set to the judge serve was started with"),
])
def test_without_a_served_judge_no_judge_can_be_named(studio, store, settings, message):
    with pytest.raises(gr.Error, match=message):
        train_tab.api_start_loop(studio, json.dumps({**SMALL, **settings}), OWNER)
    assert job_rows.list_jobs(store) == []


def test_only_the_served_judge_can_be_named(studio, store):
    served = replace(studio, judge=SERVED)
    for other in ({"judge": "http://other:8000/v1"}, {"judge_template": "/etc/passwd"}, {"judge_key_env": "HOME"}):
        with pytest.raises(gr.Error, match="may only be set to the judge serve was started with"):
            train_tab.api_start_loop(served, json.dumps({**SMALL, "annotator": "judge", **SERVED, **other}), OWNER)
    assert job_rows.list_jobs(store) == []
    status = train_tab.api_start_loop(served, json.dumps({**SMALL, "annotator": "judge", "judge": SERVED["judge"],
                                                          "judge_model": "qwen", "judge_threshold": 0.8}), OWNER)
    [job] = job_rows.list_jobs(store)
    assert status["job_id"] == job.id and job.config["judge"] == SERVED["judge"]
    assert job.config["judge_threshold"] == 0.8


def test_serve_checks_its_judge_before_serving(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("UNSET_SERVE_KEY", raising=False)
    db = tmp_path / "s.db"
    assert main(["serve", "--db", str(db), "--judge", "http://127.0.0.1:9/v1", "--judge-model", "m",
                 "--judge-key-env", "UNSET_SERVE_KEY"]) == 2
    assert "UNSET_SERVE_KEY holds no key" in capsys.readouterr().err and not db.exists()
    assert main(["serve", "--db", str(db), "--judge-model", "m"]) == 2
    assert "go with --judge" in capsys.readouterr().err


def test_a_studio_loop_takes_serves_judge_timeout_and_answer_cap(studio, store, tmp_path, capsys):
    parser = argparse.ArgumentParser()
    add_serve_judge_arguments(parser)
    served = served_judge(parser.parse_args(["--judge", SERVED["judge"], "--judge-model", "qwen",
                                             "--judge-timeout", "3", "--judge-max-mb", "0.5"]))
    settings = {**SMALL, "annotator": "judge", "judge": SERVED["judge"], "judge_model": "qwen"}
    with pytest.raises(gr.Error, match="judge_timeout may only be set to the judge serve was started with"):
        train_tab.api_start_loop(replace(studio, judge=served), json.dumps({**settings, "judge_timeout": 600}), OWNER)
    assert job_rows.list_jobs(store) == []
    train_tab.api_start_loop(replace(studio, judge=served), json.dumps(settings), OWNER)
    [job] = job_rows.list_jobs(store)
    assert (job.config["judge_timeout"], job.config["judge_max_mb"]) == (3, 0.5)  # what its worker opens the judge with
    db = tmp_path / "s.db"
    for limit in ("--judge-timeout", "--judge-max-mb"):
        assert main(["serve", "--db", str(db), "--judge", SERVED["judge"], "--judge-model", "m", limit, "0"]) == 2
        err = capsys.readouterr().err
        assert "must be positive" in err and len(err.strip().splitlines()) == 1 and not db.exists()
