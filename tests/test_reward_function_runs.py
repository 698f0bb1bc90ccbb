"""PPO and GRPO on reward functions through `python app.py ppo --reward functions|rm+functions`: each prompt's
reference reaches a custom function by name, per-function metrics are written, a failing function stops the job in
one line naming it."""

import json

import pytest

from storage.jobs import list_jobs
from storage.metrics import read_metrics
from storage.policies import list_policies
from storage.prompts import NewPrompt, add_prompts
from tests.custom_rewards import SEEN
from tests.policy_helpers import CLI_SETTINGS, GRPO_CLI, cli

pytestmark = pytest.mark.usefixtures("one_thread")

FUNCTIONS = json.dumps([{"name": "length", "target": 3, "unit": "chars", "weight": 0.5},
                        {"name": "tests.custom_rewards:trl_style"}])


@pytest.fixture
def referenced_store(seeded_store):
    add_prompts(seeded_store, [NewPrompt("the film was", reference={"answer": "good"}),
                               NewPrompt("the show was", reference={"answer": "bad"})])
    return seeded_store


@pytest.mark.parametrize("algorithm", ["ppo", "grpo"])
def test_a_functions_run_passes_references_and_writes_per_function_metrics(referenced_store, capsys, algorithm):
    SEEN.clear()
    code = cli("ppo", "--db", str(referenced_store.path), "--iterations", "2", "--reward", "functions",
               "--reward-functions", FUNCTIONS, *CLI_SETTINGS, *(GRPO_CLI if algorithm == "grpo" else []))
    assert code == 0, capsys.readouterr().err
    [job] = list_jobs(referenced_store)
    names = [f"{algorithm}/{label}/{stat}" for label in ("length", "trl_style") for stat in ("mean", "pass_rate")]
    rows = read_metrics(referenced_store, job.id, names=names)
    assert {(r["name"], r["step"]) for r in rows} == {(name, step) for name in names for step in (1, 2)}
    assert all(0.0 <= r["value"] <= 1.0 for r in rows)
    assert set(SEEN["answer"]) <= {"good", "bad", None} and len(SEEN["answer"]) == len(SEEN["completions"])
    assert len(list_policies(referenced_store)) == 2


def test_rm_plus_functions_needs_a_reward_model(referenced_store, capsys):
    code = cli("ppo", "--db", str(referenced_store.path), "--iterations", "1", "--reward", "rm+functions",
               "--reward-functions", FUNCTIONS, *CLI_SETTINGS)
    assert code == 2 and "no reward model is registered" in capsys.readouterr().err


@pytest.mark.parametrize("arguments,message", [
    (["--reward", "functions"], "--reward functions needs --reward-functions"),
    (["--reward", "oracle", "--reward-functions", FUNCTIONS], "--reward-functions goes with --reward functions"),
    (["--reward", "functions", "--reward-functions", '[{"name": "nope"}]'], "unknown reward function 'nope'"),
])
def test_bad_reward_options_are_refused_in_one_line(referenced_store, capsys, arguments, message):
    code = cli("ppo", "--db", str(referenced_store.path), "--iterations", "1", *arguments, *CLI_SETTINGS)
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1
    assert list_jobs(referenced_store) == []


def test_a_failing_function_stops_the_job_in_one_line_naming_it(referenced_store, capsys):
    code = cli("ppo", "--db", str(referenced_store.path), "--iterations", "2", "--reward", "functions",
               "--reward-functions", '[{"name": "tests.custom_rewards:too_few"}]', *CLI_SETTINGS)
    err = capsys.readouterr().err
    assert code != 0 and "reward function too_few returned 1 values for 4 completions" in err
    [job] = list_jobs(referenced_store)
    assert job.status.value == "failed" and len(list_policies(referenced_store)) == 1
