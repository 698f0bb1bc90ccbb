"""The arithmetic task: deterministic word problems whose answers a hand solver agrees with, training and held-out
problems apart, and `init --task arithmetic` (refused beside --prompts)."""

import re

import pytest

from app.commands.cli import main
from labeling.transfer.arithmetic import INSTRUCTION, arithmetic_task
from storage import Store
from storage.errors import InvalidInput
from storage.prompts import list_prompts
from trainers.reward.builtin_rewards import math_answer


def solve(text: str) -> int:
    """The answer of a problem, worked out from its wording and numbers (independently of the generator)."""
    n = [int(x) for x in re.findall(r"-?\d+", text)]
    if "gets" in text:
        return n[0] + n[1]
    if "gave" in text:
        return n[0] - n[1]
    if "box holds" in text:
        return n[0] * n[1]
    if "shares" in text:
        return n[0] // n[1]
    if "packs of" in text:
        return n[0] * n[1] - n[2]
    if "temperature" in text:
        return n[0] - n[1] + n[2]
    if "bakery" in text:
        return n[0] * n[1] - n[2]
    raise AssertionError(f"unknown problem: {text}")


@pytest.mark.parametrize("difficulty", [1, 2, 3])
def test_every_answer_is_the_hand_solvers_and_the_split_is_disjoint(difficulty):
    train, heldout = arithmetic_task(size=300, heldout=50, difficulty=difficulty)
    assert (len(train), len(heldout)) == (300, 50)
    assert not {p["prompt"] for p in train} & {p["prompt"] for p in heldout}
    for problem in train + heldout:
        assert problem["prompt"].endswith(INSTRUCTION)
        assert int(problem["answer"]) == solve(problem["prompt"].removesuffix(INSTRUCTION))
    assert math_answer([f"So the answer is {p['answer']}." for p in heldout], answer=[p["answer"] for p in heldout]) \
        == [1.0] * 50
    if difficulty == 3:
        assert any(int(p["answer"]) < 0 for p in train)


def test_the_same_options_give_the_same_problems_and_others_differ():
    assert arithmetic_task(20, 5, 2) == arithmetic_task(20, 5, 2)
    assert arithmetic_task(20, 5, 2) != arithmetic_task(20, 5, 3)
    assert arithmetic_task(30, 5, 2)[0][:20] == arithmetic_task(20, 5, 2)[0]  # more problems: the same first ones


@pytest.mark.parametrize("args,message", [((10, 2, 4), "must be 1, 2 or 3"), ((0, 2, 1), "--task-size must be"),
                                          ((10, -1, 1), "--task-heldout must be")])
def test_bad_task_options_are_refused(args, message):
    with pytest.raises(InvalidInput, match=message):
        arithmetic_task(*args)


def test_init_task_arithmetic_writes_prompts_with_answers(capsys, tmp_path, tiny_qwen_dir):
    code = main(["init", "--db", str(tmp_path / "p.db"), "--model", str(tiny_qwen_dir), "--task", "arithmetic",
                 "--task-size", "20", "--task-heldout", "6", "--task-difficulty", "2"])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "") and "20 prompts, 6 held out" in out
    store = Store(tmp_path / "p.db")
    train, heldout = list_prompts(store, heldout=False), list_prompts(store, heldout=True)
    expected_train, expected_heldout = arithmetic_task(20, 6, 2)
    assert [(p.text, p.reference) for p in train] == [(e["prompt"], {"answer": e["answer"]}) for e in expected_train]
    assert [p.reference["answer"] for p in heldout] == [e["answer"] for e in expected_heldout]


def test_init_task_with_prompts_is_refused_leaving_no_store(capsys, tmp_path, tiny_qwen_dir):
    (tmp_path / "p.txt").write_text("hello\n")
    code = main(["init", "--db", str(tmp_path / "p.db"), "--model", str(tiny_qwen_dir), "--task", "arithmetic",
                 "--prompts", str(tmp_path / "p.txt")])
    err = capsys.readouterr().err
    assert code == 2 and "--task arithmetic writes the training and held-out prompts itself" in err
    assert err.count("\n") == 1 and not (tmp_path / "p.db").exists()
