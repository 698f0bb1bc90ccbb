"""The built-in reward functions against hand cases."""

import pytest

from storage.errors import InvalidInput
from trainers.reward.builtin_rewards import (
    exact_match,
    final_answer,
    format,
    json_valid,
    length,
    math_answer,
    regex,
)
from trainers.reward.function_specs import parse_reward_functions


@pytest.mark.parametrize("text,number", [
    ("The answer is 42.", 42.0),
    ("She had 1,234 apples and sold 1,000, leaving 234", 234.0),
    ("It is -5 degrees", -5.0),
    ("It is −7 degrees", -7.0),
    ("costs $3.50 in total", 3.5),
    ("3 + 4 = 7, then 7 * 2 = 14", 14.0),
    ("so \\boxed{12} and then 99 more words 100", 12.0),
    ("Work: 5 + 6 = 11\n#### 11\nI hope 3 helps", 11.0),
    ("no number at all", None),
])
def test_the_final_answer_of_a_text(text, number):
    assert final_answer(text) == number


def test_math_answer_against_the_reference_answer():
    completions = ["so 2 + 3 = 5", "the total is 1,234", "I get -4", "it is 7.0", "no idea", "\\boxed{10}", "9"]
    answers = ["5", 1234, "#### -4", "7", "3", "The sum is 10. #### 10", None]
    assert math_answer(completions, answer=answers) == [1.0, 1.0, 1.0, 1.0, 0.0, 1.0, None]


def test_math_answer_tolerance_and_conversational_completions():
    assert math_answer(["about 3.14159"], answer=["3.1416"]) == [0.0]
    assert math_answer(["about 3.14159"], answer=["3.1416"], tolerance=1e-3) == [1.0]
    assert math_answer([[{"role": "assistant", "content": "it is 8"}]], answer=["8"]) == [1.0]
    assert math_answer(["8"]) == [None]  # no reference: no opinion


def test_exact_match():
    assert exact_match(["  Paris ", "paris", "Lyon", "x"], answer=["Paris", "Paris", "Paris", None]) == [
        1.0, 1.0, 0.0, None]
    assert exact_match(["paris"], answer=["Paris"], case_sensitive=True) == [0.0]
    assert exact_match(["B"], field="label", label=["b"]) == [1.0]


def test_regex_and_its_bounds():
    assert regex(["Answer: 4", "4"], pattern=r"^Answer: \d+$") == [1.0, 0.0]
    with pytest.raises(InvalidInput, match="over 200"):
        parse_reward_functions([{"name": "regex", "pattern": "a" * 201}])
    with pytest.raises(InvalidInput, match="not a regular expression"):
        parse_reward_functions([{"name": "regex", "pattern": "(unclosed"}])
    with pytest.raises(TimeoutError, match="ran past"):
        regex(["a" * 5000 + "!"], pattern=r"(a+)+$")


def test_format_tags_in_order():
    good = "<think>2 and 2</think> <answer>4</answer>"
    assert format([good, "<answer>4</answer><think>x</think>", "<think>x</think>"]) == [1.0, 0.0, 0.0]
    assert format(["<answer>4</answer>"], tags=["answer"]) == [1.0]


def test_length_is_one_up_to_the_target_then_falls_to_zero_at_twice_it():
    assert length(["a"] * 4, target=10, completion_ids=[[0] * 5, [0] * 10, [0] * 15, [0] * 30]) == [
        1.0, 1.0, 0.5, 0.0]
    assert length(["abcd", "abcdef"], target=4, unit="chars") == [1.0, 0.5]


def test_json_valid_never_evaluates_the_text():
    assert json_valid(['{"a": 1}', "```json\n[1, 2]\n```", "{'a': 1}", "__import__('os')", "42"]) == [
        1.0, 1.0, 0.0, 0.0, 1.0]


@pytest.mark.parametrize("entry,message", [
    ({"name": "nope"}, "unknown reward function 'nope'"),
    ({"name": "math_answer", "tolerance": -1}, "tolerance must be a number at least 0"),
    ({"name": "math_answer", "pattern": "x"}, "has no option 'pattern'"),
    ({"name": "length", "target": 0}, "target must be a whole number"),
    ({"name": "format", "tags": ["<b>"]}, "tags must be a list of tag names"),
    ({"name": "regex"}, "regex needs a pattern"),
    ({"name": "exact_match", "weight": "high"}, "weight must be a number"),
])
def test_bad_entries_are_refused_in_one_line(entry, message):
    with pytest.raises(InvalidInput, match=message) as caught:
        parse_reward_functions([entry])
    assert "\n" not in str(caught.value)
