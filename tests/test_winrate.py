"""Win-rate pairs in the store: made from two versions' evaluation samples with random sides, spread through the
queue, judged through the Label tab's path; their labels never train or validate a reward model, never count against
a round's budget and never leave in an export; the figures and the leaderboard follow the labels; the leaderboard
command and its CSV; the settings that size them."""

import csv
import math

import pytest

from app.audit import write_csv
from app.commands.cli import main
from labeling.queue.synthetic import OracleAnnotator
from labeling.transfer.export import export_labels
from labeling.versions.winrate import make_winrate_pairs, place_in_queue, version_names, winrate_report
from labeling.versions.winrate_stats import win_rate
from storage import InvalidInput, Outcome
from storage.generations import EVAL_SOURCE, NewGeneration, add_generations, list_generations
from storage.labels import count_labels, training_labels
from storage.pairs import NewPair, add_pairs, get_pair
from storage.policies import get_policy, list_policies
from storage.prompts import list_prompts
from storage.rounds import round_label_count, round_pair_count
from storage.types import Generation, Selector
from storage.winrate import (
    WinrateMark,
    list_winrate_pairs,
    open_places,
    queue_winrate_pairs,
    winrate_judgements,
)
from tests.helpers import label_pairs
from tests.winrate_helpers import HELD_OUT, by_version, versions
from trainers.jobs.reward_job import load_examples
from trainers.loop.config import LoopConfig
from trainers.loop.evaluation import evaluation_prompts
from trainers.loop.winrate_pairs import judge_open_pairs, queue_version_pairs


def eval_generations(store, policy_id) -> list[Generation]:
    return list_generations(store, policy_id=policy_id, source=EVAL_SOURCE)


def regular_pairs(store, n: int, round: int = 1) -> list[int]:
    """`n` ordinary pairs of the root's training-prompt samples in round `round`, scores n-1 ... 0."""
    [prompt] = list_prompts(store, heldout=False)
    made = add_generations(store, [NewGeneration(prompt.id, f"train {round}-{k}") for k in range(2 * n)])
    return add_pairs(store, [NewPair(prompt.id, made[2 * k], made[2 * k + 1], "random", float(n - k), round)
                             for k in range(n)])


def test_a_versions_samples_are_paired_once_each_against_the_same_prompts_with_random_sides(store):
    sft, v1, _ = versions(store)
    mine, theirs = eval_generations(store, v1), eval_generations(store, sft)
    pairs = make_winrate_pairs(mine, theirs, 24, seed=5, round=2)
    by_id = {g.id: g for g in mine + theirs}
    assert len(pairs) == 24
    assert all(p.selector == Selector.WINRATE and p.round == 2 and p.policy_id == v1 for p in pairs)
    version_side = [by_id[p.first_id].policy_id == v1 for p in pairs]
    assert 0 < sum(version_side) < 24  # sides are drawn, not fixed
    used = [p.first_id if first else p.second_id for p, first in zip(pairs, version_side, strict=True)]
    assert len(set(used)) == 24  # 32 samples: none used twice before every one is used once
    assert all(by_id[p.first_id].prompt_id == by_id[p.second_id].prompt_id == p.prompt_id for p in pairs)
    assert all({by_id[p.first_id].policy_id, by_id[p.second_id].policy_id} == {sft, v1} for p in pairs)
    assert make_winrate_pairs(mine, theirs, 24, seed=5, round=2) == pairs  # seeded
    more = make_winrate_pairs(mine, theirs, 64, seed=5, round=2)
    assert len({tuple(sorted((p.first_id, p.second_id))) for p in more}) == 64  # every combination once at most
    assert make_winrate_pairs(mine, [], 24, seed=5, round=2) == []  # no shared prompt, no pair


def test_win_rate_pairs_are_served_spread_among_the_next_places_before_the_last_of_them(store):
    sft, v1, _ = versions(store)
    regular = regular_pairs(store, 10, round=1)
    made = make_winrate_pairs(eval_generations(store, v1), eval_generations(store, sft), 4, seed=1, round=1)
    queue_version = place_in_queue(made, open_places(store, 6), within=6, round=1)
    marked = queue_winrate_pairs(store, queue_version, [WinrateMark(v1, sft)] * 4)
    served = OracleAnnotator(by_version).label(store, 14)
    pair_ids = [label.pair_id for label in _labels(store, served)]
    places = [pair_ids.index(pair_id) for pair_id in marked]
    assert places == [1, 3, 6, 8] and max(places) < pair_ids.index(regular[5])  # spread, all before the 6th pair
    assert [p for p in pair_ids if p not in marked] == regular


def _labels(store, label_ids):
    by_id = {label.label_id: label for label in training_labels(store)} | {
        j.label_id: j for j in winrate_judgements(store)}
    return [by_id[i] for i in label_ids]


def test_win_rate_labels_never_train_validate_count_or_export(store, tmp_path):
    sft, v1, _ = versions(store)
    regular = regular_pairs(store, 6, round=2)
    queued = queue_version_pairs(store, get_policy(store, v1), LoopConfig(), within=6, with_oracle=False)
    assert queued == 24 and round_pair_count(store, 2) == 6  # placed in round 2, not the round's own pairs
    assert {get_pair(store, p.pair_id).round for p in list_winrate_pairs(store)} == {2}
    OracleAnnotator(by_version).label(store, 30)
    judged = {j.label_id for j in winrate_judgements(store)}
    assert len(judged) == 24 and count_labels(store) == 30
    assert {lp.pair_id for lp in training_labels(store)} == set(regular)
    examples, _ = load_examples(store)  # what reward training (and its validation split) is made of
    assert {e.pair_id for e in examples} == set(regular) and not judged & {e.label_id for e in examples}
    assert round_label_count(store, 2) == 6 and count_labels(store, evaluation=False) == 6
    assert export_labels(store, "soft", tmp_path / "labels.jsonl").rows == 6


def test_a_store_whose_only_labels_judge_versions_trains_no_reward_model(store):
    sft, v1, _ = versions(store)
    queue_version_pairs(store, get_policy(store, v1), LoopConfig(), within=0, with_oracle=False)
    OracleAnnotator(by_version).label(store, 5)
    with pytest.raises(InvalidInput, match="every label is on a win-rate pair"):
        load_examples(store)


def test_the_oracle_judges_the_win_rate_pairs_alone_when_asked(store):
    sft, v1, _ = versions(store)
    regular = regular_pairs(store, 8, round=1)
    queue_version_pairs(store, get_policy(store, v1), LoopConfig(winrate_pairs=5), within=8, with_oracle=False)
    assert judge_open_pairs(store, LoopConfig(oracle="tests.test_winrate:by_version"), seed=0) == 5
    assert len(winrate_judgements(store)) == 5 and count_labels(store, evaluation=False) == 0
    assert [p.id for p in open_pair_rows(store)] == regular


def open_pair_rows(store):
    return [get_pair(store, place.pair_id) for place in open_places(store, 100)]


def test_each_version_is_queued_once_against_the_root_and_with_winrate_previous_its_parent(store):
    sft, v1, v2 = versions(store)
    config = LoopConfig(winrate_pairs=24, winrate_previous=8)
    assert queue_version_pairs(store, get_policy(store, sft), config, within=10, with_oracle=False) == 0
    assert queue_version_pairs(store, get_policy(store, v1), config, within=10, with_oracle=False) == 24  # parent: SFT
    assert queue_version_pairs(store, get_policy(store, v2), config, within=10, with_oracle=False) == 32
    assert queue_version_pairs(store, get_policy(store, v2), config, within=10, with_oracle=False) == 0  # once
    against = [p.opponent_id for p in list_winrate_pairs(store, v2)]
    assert against.count(sft) == 24 and against.count(v1) == 8
    assert against[:5] == [sft, v1, sft, sft, sft]  # the two kinds alternate through the queue


def test_the_figures_and_the_leaderboard_follow_the_labels_by_hand(store):
    sft, v1, v2 = versions(store)
    config = LoopConfig(winrate_pairs=12, winrate_previous=4)
    for version in (v1, v2):
        queue_version_pairs(store, get_policy(store, version), config, within=0, with_oracle=False)
    assert [v.judgements for v in winrate_report(store).versions] == [0, 0]
    wanted = {}  # v1 against SFT: 6 wins, 3 ties, 3 losses; v2 against SFT: 11 wins, 1 loss; v2 against v1: all wins
    for k, pair in enumerate(list_winrate_pairs(store, v1)):
        result = "win" if k < 6 else "tie" if k < 9 else "loss"
        wanted[pair.pair_id] = _outcome(result, pair.version_first)
    for k, pair in enumerate(list_winrate_pairs(store, v2)):
        wanted[pair.pair_id] = _outcome("loss" if pair.opponent_id == sft and k == 0 else "win", pair.version_first)
    label_pairs(store, "alice", wanted, first_on_left=False)  # the screen side never changes what is stored
    report = winrate_report(store)
    first, second = report.versions
    assert (first.name, first.wins, first.ties, first.losses, first.judgements) == ("v1", 6, 3, 3, 12)
    hand = win_rate([1] * 6 + [0.5] * 3 + [0] * 3)
    assert (first.rate, first.low, first.high) == (hand.rate, hand.low, hand.high) == (0.625, hand.low, hand.high)
    assert (second.wins, second.losses, second.judgements) == (11, 1, 12) and second.excludes_half
    assert report.judgements == 28
    board = report.leaderboard
    assert [s.name for s in board] == ["v2", "v1", "v0"] and [s.rank for s in board] == [1, 2, 3]
    assert board[-1].anchor and board[-1].strength == 0.0 and board[0].judgements == 16
    assert all(s.low < s.strength < s.high for s in board[:2])
    assert board[1].beats_sft == pytest.approx(1 / (1 + math.exp(-board[1].strength)))
    assert first.line().startswith("v1: win rate vs SFT 62% [") and "(6 W / 3 T / 3 L)" in first.line()


def _outcome(result: str, version_first: bool) -> Outcome:
    if result == "tie":
        return Outcome.TIE
    return Outcome.FIRST if (result == "win") == version_first else Outcome.SECOND


def test_a_version_without_judgements_is_listed_last_without_a_strength(store):
    sft, v1, v2 = versions(store)
    queue_version_pairs(store, get_policy(store, v1), LoopConfig(winrate_pairs=4), within=0, with_oracle=False)
    OracleAnnotator(by_version).label(store, 4)
    board = winrate_report(store).leaderboard
    assert [s.name for s in board] == ["v1", "v0", "v2"] and board[-1].strength is None and board[-1].rank is None
    assert version_names(list_policies(store)) == {sft: "v0", v1: "v1", v2: "v2"}


def test_evaluation_prompts_are_the_same_seeded_choice_for_every_version(store):
    versions(store)
    chosen = evaluation_prompts(store, LoopConfig(eval_prompts=5, winrate_pairs=0))
    assert len(chosen) == 5 and chosen == evaluation_prompts(store, LoopConfig(eval_prompts=5, winrate_pairs=0))
    assert [p.id for p in chosen] == sorted(p.id for p in chosen)
    assert len(evaluation_prompts(store, LoopConfig(eval_prompts=40, winrate_pairs=0))) == HELD_OUT  # all, when fewer


@pytest.mark.parametrize(("settings", "message"), [
    ({"winrate_pairs": 33}, "winrate_pairs is 33 but each version has eval_prompts x eval_samples = 32"),
    ({"winrate_pairs": 10, "eval_prompts": 4}, "winrate_pairs is 10 but each version has .* = 8"),
    ({"winrate_previous": -1}, "winrate_previous is -1"),
    ({"eval_samples": 0}, "eval_samples must be at least 1"),
    ({"eval_prompts": 0}, "eval_prompts must be at least 1"),
])
def test_win_rate_and_evaluation_settings_that_cannot_work_are_refused(settings, message):
    with pytest.raises(InvalidInput, match=message):
        LoopConfig.from_dict(settings)


def test_the_defaults_draw_enough_evaluation_samples_for_the_pairs():
    config = LoopConfig()
    assert config.eval_prompts * config.eval_samples >= 32 and config.winrate_pairs >= 24
    assert config.winrate_pairs <= config.eval_prompts * config.eval_samples


def test_the_leaderboard_command_prints_and_writes_csv(store, tmp_path, capsys):
    sft, v1, v2 = versions(store)
    for version in (v1, v2):
        queue_version_pairs(store, get_policy(store, version), LoopConfig(winrate_previous=8), within=0,
                            with_oracle=False)
    OracleAnnotator(by_version).label(store, 56)
    out = tmp_path / "board.csv"
    assert main(["leaderboard", "--db", str(store.path), "--csv", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "  v2: win rate vs SFT 100% [" in printed and "  1. v2: strength +" in printed
    assert "round" not in printed  # a version is named vK alone: a store round can hold two versions
    rows = list(csv.DictReader(out.open()))
    assert [r["version"] for r in rows] == ["v2", "v1", "v0"] and rows[0]["wins"] == "24"
    assert float(rows[0]["win_rate_low"]) > 0.5 and rows[2]["win_rate"] == ""  # the SFT policy has no win rate
    assert main(["status", "--db", str(store.path)]) == 0 and "leaderboard (Bradley-Terry" in capsys.readouterr().out


@pytest.mark.parametrize(("args", "message"), [
    (["--csv", "board.txt"], "leaderboard file board.txt must end in .csv"),
    (["--csv", "missing/board.csv"], "folder missing does not exist; create it or choose another --csv"),
])
def test_the_leaderboard_command_refuses_bad_files_in_one_line(store, tmp_path, capsys, monkeypatch, args,
                                                                message):
    monkeypatch.chdir(tmp_path)
    assert main(["leaderboard", "--db", str(store.path), *args]) == 2
    assert capsys.readouterr().err.strip() == f"error: {message}"
    assert main(["leaderboard", "--db", str(tmp_path / "none.db")]) == 2
    assert "does not exist; pass the --db of a studio" in capsys.readouterr().err


def test_csv_text_cells_cannot_run_as_formulas_and_numbers_stay_numbers(tmp_path):
    write_csv(tmp_path / "t.csv", ["name", "value"], [["=HYPERLINK(1)", -0.25], ["v1", None]])
    assert (tmp_path / "t.csv").read_text().splitlines() == ["name,value", "'=HYPERLINK(1),-0.25", "v1,"]
