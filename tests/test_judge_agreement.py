"""The judge checked against people (labeling.judges.judge_agreement): agreement and κ with intervals against hand
computations, per judge and by round, and the failure warning while the judge labels for training."""

import math

import pytest

from labeling.judges.judge_agreement import agreement_of, judge_agreement, store_agreement
from storage.judge_verdicts import NewVerdict, add_verdicts
from storage.types import Outcome, Selector
from tests.helpers import label_pairs
from trainers.loop.config import LoopConfig
from trainers.loop.judging import JUDGE_AGREEMENT_RULE, judge_agreement_findings

F, S, T, BB = Outcome.FIRST, Outcome.SECOND, Outcome.TIE, Outcome.BOTH_BAD


def test_agreement_and_kappa_match_a_hand_computation():
    figures = agreement_of("j", None, [F, F, S, T], [F, S, S, BB])  # both bad is a tie on the judge's scale
    assert figures.items == 4 and figures.agreement == 0.75
    expected = (2 * 1 + 1 * 2 + 1 * 1) / 16  # chance agreement from the two marginals
    assert math.isclose(figures.kappa, (0.75 - expected) / (1 - expected))
    half = 1.959963984540054 * math.sqrt(0.75 * 0.25 / 4) / (1 - expected)
    assert math.isclose(figures.kappa_low, figures.kappa - half) and figures.kappa_high == 1.0  # clipped
    assert figures.agreement_low < 0.75 < figures.agreement_high
    assert "agreement 0.75" in figures.line() and "on 4 items" in figures.line()


def test_no_items_give_no_figures():
    assert agreement_of("j", 1, [], []).agreement is None
    assert "no item judged by both" in agreement_of("j", 1, [], []).line()


def test_rows_group_by_judge_then_round():
    rows = [{"judge": "j", "round": r, "judge_outcome": a, "person_outcome": b}
            for r, a, b in [(1, "first", "first"), (1, "second", "first"), (2, "tie", "tie")]]
    table = judge_agreement(rows)
    assert [(f.judge, f.round, f.items, f.agreement) for f in table] == [
        ("j", None, 3, pytest.approx(2 / 3)), ("j", 1, 2, 0.5), ("j", 2, 1, 1.0)]


def test_the_judge_is_checked_against_people_and_warned_about_while_it_trains(store, queue_pairs):
    ids = queue_pairs([(f"p{i}", f"a{i}", f"b{i}") for i in range(12)])
    add_verdicts(store, [NewVerdict(i, "j", "ok", F, 1.0) for i in ids])
    label_pairs(store, "alice", {i: (F if n < 3 else S) for n, i in enumerate(ids)})  # agrees on 3 of 12
    [overall, round0] = store_agreement(store)
    assert (overall.items, overall.agreement, round0.round) == (12, 0.25, 0)
    judged = LoopConfig(annotator="judge", judge="http://127.0.0.1:1/v1", judge_model="m")
    [finding] = judge_agreement_findings(store, judged, round=1)
    assert finding.rule == JUDGE_AGREEMENT_RULE and "agreement 0.25" in finding.detail
    assert judge_agreement_findings(store, LoopConfig(), round=1) == []  # people label: nothing to warn about


def test_status_and_the_data_tab_show_each_judge_beside_people(store, queue_pairs, capsys):
    from app.commands.cli import main
    from app.context import Studio
    from app.data.judge_panel import judges_view

    ids = queue_pairs([(f"p{i}", f"a{i}", f"b{i}") for i in range(4)])
    add_verdicts(store, [NewVerdict(i, "qwen", "ok", F, 1.0, trains=True) for i in ids[:3]]
                 + [NewVerdict(ids[3], "qwen", "timeout")])
    label_pairs(store, "alice", {ids[3]: F})
    assert judges_view(Studio(store)).judge_table == []  # no item judged by both yet: no figures
    add_verdicts(store, [NewVerdict(ids[3], "qwen", "ok", S, 0.5)])
    view = judges_view(Studio(store))
    assert "**qwen**: 4 verdicts (3 train)" in view.judge_summary
    assert view.judge_table == [["qwen", "all", 1, "0.00", "[0.00, 0.79]", "0.00", "[0.00, 0.00]"],
                                ["qwen", 0, 1, "0.00", "[0.00, 0.79]", "0.00", "[0.00, 0.00]"]]
    assert main(["status", "--db", str(store.path)]) == 0
    out = capsys.readouterr().out
    assert "  qwen: 4 verdicts (3 train)" in out
    assert "    qwen: agreement 0.00 [0.00, 0.79], κ 0.00 [0.00, 0.00] on 1 items" in out


def test_a_judges_win_rate_counts_its_verdicts_as_the_judged_versions_results():
    from labeling.judges.judge_winrate import judge_win_rates, result

    assert [result("first", True), result("first", False), result("second", False), result("tie", True)] == \
        [1.0, 0.0, 1.0, 0.5]
    rows = [{"judge": "j", "policy_id": 2, "opponent_id": 1, "outcome": o, "version_first": vf}
            for o, vf in [("first", True), ("second", True), ("tie", False), ("second", False)]]
    rate = judge_win_rates(rows)[("j", 2, 1)]
    assert (rate.wins, rate.ties, rate.losses, rate.rate) == (2, 1, 1, 0.625)


def test_verdicts_on_win_rate_pairs_never_train_and_show_beside_peoples_figures(store, tmp_path):
    from labeling.judges.judge import JudgeTemplate, Reply, judge_queue
    from labeling.judges.judge_agreement import judge_report_lines
    from storage.generations import NewGeneration, add_generations
    from storage.labels import training_labels
    from storage.pairs import NewPair
    from storage.policies import add_policy
    from storage.prompts import NewPrompt, add_prompts, list_prompts
    from storage.winrate import WinrateMark, queue_winrate_pairs

    sft, new = add_policy(store, str(tmp_path / "sft")), add_policy(store, str(tmp_path / "v1"), round=1)
    add_prompts(store, [NewPrompt("held out")], heldout=True)
    prompt = list_prompts(store)[0].id
    mine, theirs = add_generations(store, [NewGeneration(prompt, "new answer", new), NewGeneration(prompt, "old", sft)])
    queue_winrate_pairs(store, [NewPair(prompt, theirs, mine, Selector.WINRATE, round=1)], [WinrateMark(new, sft)])

    class PrefersNew:  # prefers the new version's answer in both orders
        name = "j"

        def complete(self, messages):
            user = messages[-1]["content"]
            return Reply("[[A]]" if user.index("new answer") < user.index("old") else "[[B]]")

    run = judge_queue(store, PrefersNew(), JudgeTemplate.load(), n=5, trains=True)
    assert run.counts["ok"] == 1 and run.training == 0 and training_labels(store) == []
    assert "  j judged v1 against v0: win rate 100% [21%, 100%] on 1 pairs (never pooled with people's)" in \
        judge_report_lines(store)


def test_the_leaderboard_shows_a_judges_win_rate_beside_peoples_and_never_pooled(store, capsys):
    from app.commands.cli import main
    from app.context import Studio
    from app.versions.leaderboard_tab import api_leaderboard, show_leaderboard
    from labeling.queue.synthetic import OracleAnnotator
    from labeling.versions.winrate import winrate_report
    from storage.policies import get_policy
    from storage.winrate import list_winrate_pairs
    from tests.winrate_helpers import by_version, versions
    from trainers.loop.winrate_pairs import queue_version_pairs

    sft, v1, v2 = versions(store)
    for version in (v1, v2):
        queue_version_pairs(store, get_policy(store, version), LoopConfig(winrate_previous=4), within=0,
                            with_oracle=False)
    OracleAnnotator(by_version, seed=1).label(store, 10)
    people = winrate_report(store)
    against_sft = [p for p in list_winrate_pairs(store, v2) if p.opponent_id == sft]
    against_v1 = [p for p in list_winrate_pairs(store, v2) if p.opponent_id == v1]
    # the judge prefers v2's answer on 3 of its pairs against the SFT policy and the SFT policy's on the rest; it
    # prefers v2 to v1 on every pair (not shown beside the win rates against the SFT policy)
    add_verdicts(store, [NewVerdict(p.pair_id, "smollm2", "ok", F if (k < 3) == p.version_first else S, 0.9)
                         for k, p in enumerate(against_sft)]
                 + [NewVerdict(p.pair_id, "smollm2", "ok", F if p.version_first else S, 0.9) for p in against_v1])
    assert winrate_report(store) == people  # never pooled with people's figures
    n = len(against_sft)
    expected = f"judge:smollm2 {3 / n:.0%} ["
    shown = show_leaderboard(Studio(store))
    assert "Judge models vs SFT" in shown.versions and expected in shown.versions and f"n={n}</td>" in shown.versions
    assert shown.versions.count("judge:smollm2") == 1  # v1 was not judged: its cell is empty
    [judged] = api_leaderboard(Studio(store))["judges"]
    assert (judged["judge"], judged["policy_id"], judged["n"], judged["wins"]) == ("smollm2", v2, n, 3)
    assert main(["leaderboard", "--db", str(store.path)]) == 0
    out = capsys.readouterr().out
    assert f"  smollm2 judged v2 against v0: win rate {3 / n:.0%}" in out
    assert "  smollm2 judged v2 against v1:" in out  # the command keeps every comparison, as status does
