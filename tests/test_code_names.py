"""Settings from the browser or the API never name code to run (app/train/code_names.py): every path that starts a job
with settings (the Train tab's buttons, Run SFT, `/start_loop`, `/start_sft`) refuses a `module:function` name in any
setting, in one line, before a job row is written; the studio's own values (the default oracle, the served judge)
pass. Handlers are called with a Store as tests/test_sft_action.py does (no server, no worker)."""

import json
import re
from types import SimpleNamespace

import gradio as gr
import pytest

from app.auth import Users
from app.context import Studio
from app.train import sft_action, train_form, train_tab
from app.train.code_names import names_code
from storage import jobs as job_rows
from storage.demonstrations import NewDemonstration, add_demonstration
from storage.prompts import list_prompts
from tests.helpers import workerless_studio

USERS = Users({"alice": "a", "owner": "o"}, frozenset({"owner"}))
OWNER = SimpleNamespace(username="owner")
SMALL = {"rounds": 1, "prompts_per_round": 8, "policy_batch_size": 8, "labels_per_round": 8}
CODE = "os:system"
# a code name in loop settings of every kind: a reward function, options of one, a text setting, the oracle
HIDING_PLACES = [
    ("reward_functions[0].name", {"reward": "functions", "reward_functions": [{"name": CODE}]}),
    ("reward_functions[0].pattern", {"reward": "rm+functions", "reward_functions": [
        {"name": "regex", "pattern": CODE}]}),
    ("reward_functions[1].label", {"reward": "functions", "reward_functions": [
        {"name": "length", "target": 9}, {"name": "length", "target": 12, "label": CODE}]}),
    ("judge_template", {"judge_template": CODE}),
    ("oracle", {"oracle": "builtins:eval"}),
]


@pytest.fixture
def studio(store, monkeypatch):
    studio = workerless_studio(store, monkeypatch, USERS)
    monkeypatch.setattr(sft_action, "start_job",
                        lambda store, kind, config, accelerate_config: job_rows.create_job(store, kind, config))
    for prompt in list_prompts(store)[:3]:
        add_demonstration(store, NewDemonstration(prompt.id, "A warm, well-paced film.", "alice", "written"))
    return studio


@pytest.mark.parametrize("text", ["os:system", "builtins:eval", "labeling.queue.synthetic:other", " os : system ",
                                  "/tmp/evil.py:run", "pkg.mod:Class.method", "ada:lovelace"])
def test_a_module_function_name_names_code(text):
    assert names_code(text)


@pytest.mark.parametrize("text", ["http://localhost:8000/v1", "12:30", "v3", "os:", ":system", "rm+functions",
                                  "qwen2.5:7b", "A warm film: really", "math_answer"])
def test_other_text_names_no_code(text):
    assert not names_code(text)


@pytest.mark.parametrize(("where", "settings"), HIDING_PLACES)
def test_run_sft_in_the_tab_refuses_a_code_name_in_any_setting_of_its_form(studio, store, where, settings):
    values = train_form.fill_preset("demo")
    with pytest.warns(UserWarning, match=f"{re.escape(where)} '[^']+' names code to run"):
        sft_action.on_start_sft(studio, OWNER, "demo", json.dumps(settings), *values)
    assert job_rows.list_jobs(store) == []


@pytest.mark.parametrize("kind", ["loop", "reward", "policy"])
@pytest.mark.parametrize(("where", "settings"), HIDING_PLACES[:3])
def test_the_train_tabs_buttons_refuse_a_code_name_in_any_setting(studio, store, kind, where, settings):
    values = train_form.fill_preset("demo")
    with pytest.warns(UserWarning, match=f"{re.escape(where)} '[^']+' names code to run"):
        train_tab.on_start(studio, kind, OWNER, "demo", json.dumps(settings), *values)
    assert job_rows.list_jobs(store) == []


@pytest.mark.parametrize(("settings", "where"), [
    ({"source": CODE}, "source"), ({"lora_target_modules": ["q_proj", CODE]}, "lora_target_modules\\[1\\]")])
def test_start_sft_refuses_a_code_name_in_any_setting(studio, store, settings, where):
    with pytest.raises(gr.Error, match=f"{where} 'os:system' names code to run, which only the command line may do"):
        sft_action.api_start_sft(studio, json.dumps(settings), OWNER)
    assert job_rows.list_jobs(store) == []


@pytest.mark.parametrize(("where", "settings"), HIDING_PLACES[:3])
def test_start_loop_refuses_a_code_name_in_any_setting(studio, store, where, settings):
    with pytest.raises(gr.Error, match=f"{re.escape(where)} 'os:system' names code to run"):
        train_tab.api_start_loop(studio, json.dumps({**SMALL, **settings}), OWNER)
    assert job_rows.list_jobs(store) == []


def test_the_studios_own_oracle_and_served_judge_pass(store, monkeypatch):
    served = {"judge": "http://localhost:11434/v1", "judge_model": "mistral:latest", "judge_key_env": None,
              "judge_template": None}
    workerless_studio(store, monkeypatch, USERS)
    studio = Studio(store, USERS, judge=served)
    settings = {**SMALL, "annotator": "judge", "judge": served["judge"], "judge_model": "mistral:latest"}
    status = train_tab.api_start_loop(studio, json.dumps(settings), OWNER)
    assert job_rows.get_job(store, status["job_id"]).config["judge_model"] == "mistral:latest"
    with pytest.raises(gr.Error, match="judge_model 'llama:latest' names code to run"):
        train_tab.api_start_loop(studio, json.dumps({**settings, "judge_model": "llama:latest"}), OWNER)
