"""RLVR reads as RLVR: a loop on the reward functions alone asks for, checks and shows no label or pair-queue setting,
starts from settings that fit a verifiable task, reports its evaluation's progress, and its round and result lines
give each function's held-out pass rate before → after with intervals and no reward-model figure; the Train tab's
reward form starts one without the label fields."""

import re
import time
from types import SimpleNamespace

import pytest

from app.commands.cli import main
from app.train import reward_form, train_checks, train_form, train_tab
from storage import Store
from storage import jobs as job_rows
from storage.errors import InvalidInput
from storage.generations import eval_samples
from storage.labels import count_labels
from storage.pairs import list_pairs
from storage.policies import list_policies
from tests.helpers import workerless_studio
from trainers.jobs.layer import JobKind
from trainers.loop.config import LoopConfig
from trainers.loop.pass_rates import PassRate, change_text
from trainers.loop.presets import RLVR_SETTINGS, loop_config
from trainers.loop.pulse import Pulse

pytestmark = pytest.mark.usefixtures("one_thread")

MATH = '[{"name": "math_answer"}]'
INTERVAL = r"\d+% \[\d+%, \d+%\]"


def test_a_functions_loop_with_no_label_settings_runs_on_24_prompts_and_reads_as_rlvr(capsys, tmp_path,
                                                                                    tiny_qwen_dir):
    db = str(tmp_path / "rlvr.db")
    assert main(["init", "--db", db, "--model", str(tiny_qwen_dir), "--task", "arithmetic", "--task-size", "20",
                 "--task-heldout", "4"]) == 0
    capsys.readouterr()
    # no label, pair or queue setting; tiny training settings on top of the RLVR defaults (4 prompts x G 4)
    code = main(["loop", "--db", db, "--reward", "functions", "--reward-functions", MATH, "--policy-iterations", "2",
                 "--response-length", "8", "--eval-samples", "2"])
    out, err = capsys.readouterr()
    assert code == 0, err[-2000:]
    assert "labels:" not in out and "labels" not in out.split("round 1/1 done")[1]  # no label schedule, no count
    assert "reward: math_answer alone (RLVR: no labels, pairs or reward model); 1 round of 2 GRPO iterations " \
           "(4 prompts x G 4, answers of up to 8 tokens)" in out
    [round_line] = [line for line in out.splitlines() if line.startswith("round 1/1 done")]
    assert "RM score" not in out and "training reward " in round_line
    # the pass rate before → after, each with its Wilson interval, the change with its interval, on 4 x 2 samples
    change = rf"math_answer {INTERVAL} → {INTERVAL} \([+-]\d+ points \[[+-]\d+, [+-]\d+\]; 8 held-out samples\)"
    assert re.search(change, round_line), round_line
    [result] = [line for line in out.splitlines() if line.startswith("job 1 (loop) completed")]
    assert re.search(change, result), result
    store = Store(db)
    [job] = job_rows.list_jobs(store)
    assert (job.config["algorithm"], job.config["policy_batch_size"], job.config["kl_coef"]) == ("grpo", 4, 0.02)
    assert list_pairs(store) == [] and count_labels(store) == 0
    sft, trained = list_policies(store)
    assert len(eval_samples(store, sft.id)) == len(eval_samples(store, trained.id)) == 8
    logs = job_rows.tail_logs(store, job.id, 200)
    # evaluation reports its samples as they are drawn, the policy phase its start after loading
    assert "round 1: evaluating policy v0: sample 8/8" in logs and "round 1: GRPO iteration 0/2" in logs, logs


def test_functions_alone_take_no_label_or_pair_settings_and_the_rlvr_defaults():
    functions = {"reward": "functions", "reward_functions": [{"name": "math_answer"}]}
    # what the pair queue needs is not checked: no labels, 8 prompts, K 1, a decay of 0
    config = LoopConfig.from_dict({**functions, "labels_per_round": 0, "prompts_per_round": 8,
                                   "samples_per_prompt": 1, "label_decay": 0.0})
    assert config.labels_per_round == 0
    with pytest.raises(InvalidInput, match="labels_per_round must be at least 1"):
        LoopConfig.from_dict({"labels_per_round": 0})  # the reward model's loop still needs them
    with pytest.raises(InvalidInput, match="a round queues at most 48 pairs"):
        LoopConfig.from_dict({"prompts_per_round": 8})
    real = LoopConfig(lora=True, response_length=256, policy_lr=1e-4, kl_coef=0.05, temperature=0.7)
    rlvr = loop_config(real, {**functions, "labels_per_round": 0})
    assert rlvr.response_length == 48 and rlvr.lora  # a verifiable task's answers, not 256 tokens
    assert {name: rlvr.setting(name) for name in RLVR_SETTINGS} == RLVR_SETTINGS
    assert rlvr.eval_prompts * rlvr.eval_samples >= 150  # a pass rate's 95% interval within ±8 points
    assert loop_config(real, {**functions, "policy_iterations": 7}).policy.iterations == 7  # what is given wins
    assert loop_config(real, {"rounds": 2}) == real.updated({"rounds": 2})  # the reward model's loop: as before


def test_a_pass_rate_change_reads_with_wilson_and_newcombe_intervals():
    # 27/192 → 60/192: Wilson [10%, 20%] and [25%, 38%]; Newcombe's interval of the +17 points: [+9, +25]
    assert change_text(PassRate("math_answer", 27, 192), PassRate("math_answer", 60, 192)) == (
        "math_answer 14% [10%, 20%] → 31% [25%, 38%] (+17 points [+9, +25]; 192 held-out samples)")
    assert change_text(None, PassRate("format", 3, 4)) == "format 75% [30%, 95%] (4 held-out samples)"


def test_the_pulse_repeats_a_phase_that_runs_long():
    beats = []
    with Pulse(lambda phase, fraction: beats.append((phase, fraction)), every=0.05) as pulse:
        with pulse.lock:
            pulse.moved("round 1/1: GRPO iteration 0/40", 0.2)
        time.sleep(0.3)
    assert len(beats) >= 3 and beats[0][0].startswith("round 1/1: GRPO iteration 0/40 · ") and beats[0][1] == 0.2
    assert beats[-1][0].endswith(" s since")


OWNER = SimpleNamespace(username="owner")


def test_the_reward_form_starts_a_functions_loop_without_the_label_fields(store, monkeypatch):
    from app.auth import Users

    studio = workerless_studio(store, monkeypatch, Users({"owner": "o"}, frozenset({"owner"})))
    weights = [1.0 if name == "math_answer" else 0.0 for name in reward_form.BUILTIN_NAMES]
    advanced, *updates = reward_form.use_rewards("{}", "functions", 1.0, 200, "", *weights)
    hidden, values = updates[:1 + len(reward_form.LABEL_FIELDS)], updates[1 + len(reward_form.LABEL_FIELDS):]
    assert all(update["visible"] is False for update in hidden)  # the schedule and every label field
    form = dict(zip(train_form.FORM, train_form.fill_preset("demo"), strict=True))
    form.update(dict(zip(reward_form.RLVR_FIELDS, (update["value"] for update in values), strict=True)))
    form.update({name: None for name in reward_form.LABEL_FIELDS})  # left blank: never asked for
    form["labels_per_round"] = 0  # or nonsense: not read
    state = train_tab.start(studio, JobKind.LOOP, train_checks.config_from_form(
        {"demo": LoopConfig()}, "demo", advanced, *form.values()), OWNER)
    [job] = job_rows.list_jobs(store)
    assert state["job_id"] == job.id
    assert (job.config["reward"], job.config["algorithm"], job.config["policy_iterations"]) == ("functions", "grpo",
                                                                                                 40)
    # the reward model's loop still asks for them
    with pytest.raises(InvalidInput, match="K: samples per prompt is required"):
        train_checks.config_from_form({"demo": LoopConfig()}, "demo", "{}", *form.values())
    shown = reward_form.use_rewards(advanced, "rm", 1.0, 200, "", *weights)[1:2 + len(reward_form.LABEL_FIELDS)]
    assert all(update["visible"] is True for update in shown)
