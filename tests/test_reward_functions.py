"""Reward functions called as TRL calls `reward_funcs`: the keywords, None as no opinion, weights, the metrics, and
every failure stopping the run in one line naming the function."""

import pytest
import torch

from storage.errors import InvalidInput
from tests.custom_rewards import SEEN
from trainers.reward.function_specs import parse_reward_functions
from trainers.reward.functions import (
    CombinedReward,
    RewardFunctionError,
    RewardFunctions,
    prompt_key,
)

REFERENCES = {prompt_key("What is 2 + 3?"): {"answer": "5", "level": 1}, prompt_key("Say hi"): {"level": 0}}


def build(entries, references=REFERENCES, **options):
    return RewardFunctions.build(entries, references, encode=lambda text: list(text.encode()), **options)


def test_a_trl_function_gets_the_keywords_and_each_reference_field_by_name():
    functions = build([{"name": "tests.custom_rewards:trl_style"}])
    scores = functions(["What is 2 + 3?", "Say hi"], ["it is 5", "hi"])
    assert scores.tolist() == [1.0, 0.0]
    assert SEEN["prompts"] == ["What is 2 + 3?", "Say hi"] and SEEN["completions"] == ["it is 5", "hi"]
    assert SEEN["completion_ids"] == [list(b"it is 5"), list(b"hi")]
    assert SEEN["answer"] == ["5", None] and SEEN["level"] == [1, 0]


def test_conversations_come_as_turns_as_trl_passes_them():
    turns = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}]
    functions = build([{"name": "tests.custom_rewards:conversational"}], {})
    assert functions([turns, "Say hi"], ["abc", "de"]).tolist() == [3.0, 2.0]
    assert SEEN["prompts"] == [turns, [{"role": "user", "content": "Say hi"}]]
    assert SEEN["completions"] == [[{"role": "assistant", "content": "abc"}], [{"role": "assistant", "content": "de"}]]


def test_weights_sum_and_none_is_no_opinion():
    functions = build([{"name": "math_answer", "weight": 2.0},
                       {"name": "tests.custom_rewards:opinionated", "weight": 0.5}])
    scores = functions(["What is 2 + 3?", "What is 2 + 3?", "Say hi"], ["5", "4?", "hi"])
    assert scores.tolist() == [2.0 * 1 + 0.5 * 2, 2.0 * 0, 0.5 * 2]  # None: left out of the sum
    metrics = functions.metrics()
    assert metrics["math_answer/mean"] == 0.5 and metrics["math_answer/pass_rate"] == 0.5
    assert metrics["opinionated/mean"] == 2.0 and metrics["opinionated/pass_rate"] == 1.0


def test_the_reward_model_adds_with_its_weight():
    functions = build([{"name": "math_answer"}])
    combined = CombinedReward(lambda prompts, responses: torch.tensor([1.0, -1.0]), 0.5, functions)
    assert combined(["What is 2 + 3?"] * 2, ["5", "6"]).tolist() == [1.5, -0.5]
    assert combined.metrics()["math_answer/mean"] == 0.5


@pytest.mark.parametrize("name,message", [
    ("raises", "reward function raises raised ValueError: bad input$"),
    ("too_few", "reward function too_few returned 1 values for 2 completions"),
    ("not_a_number", "reward function not_a_number returned nan"),
    ("text_values", "reward function text_values returned '1', not a number"),
    ("slow", "reward function slow ran past its time limit of 0.2 s"),
])
def test_a_failing_function_stops_the_run_in_one_line_naming_it(name, message):
    functions = build([{"name": f"tests.custom_rewards:{name}"}], timeout_s=0.2)
    with pytest.raises(RewardFunctionError, match=message) as caught:
        functions(["Say hi", "Say hi"], ["a", "b"])
    assert "\n" not in str(caught.value)


def test_custom_functions_are_refused_where_the_browser_sends_settings():
    with pytest.raises(InvalidInput, match="names code to run, which only the command line may do"):
        parse_reward_functions('[{"name": "os:system"}]', allow_custom=False)
    assert parse_reward_functions('[{"name": "length", "target": 50}]', allow_custom=False)[0].options == {
        "target": 50}


@pytest.mark.parametrize("value,message", [
    ("{not json", "not valid JSON"),
    ('{"name": "math_answer"}', "must be a list"),
    ('[{"name": "math_answer"}, {"name": "math_answer"}]', "two reward functions are named 'math_answer'"),
    ('[{"name": "no_such_module_x:f"}]', None),
])
def test_bad_lists_are_refused(value, message):
    if message is None:  # parsed fine; the import fails when the run builds it
        with pytest.raises(InvalidInput, match="cannot import module 'no_such_module_x'"):
            build(value)
        return
    with pytest.raises(InvalidInput, match=message):
        parse_reward_functions(value)


def test_a_function_left_running_past_its_limit_does_not_hold_the_process_at_exit():
    import subprocess
    import sys
    from pathlib import Path

    code = ("from trainers.reward.functions import RewardFunctions, RewardFunctionError\n"
            "f = RewardFunctions.build([{'name': 'tests.custom_rewards:hangs'}], {}, timeout_s=0.2)\n"
            "try:\n    f(['p'], ['r'])\nexcept RewardFunctionError as exc:\n    print(exc)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parent.parent,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "reward function hangs ran past its time limit of 0.2 s" in done.stdout
