"""A judge model's own win rates on the win-rate pairs, reported beside people's and never pooled with them: per judge,
each policy version against its opponent (the SFT root, or the previous version), ties counted half, with the 95%
Wilson interval (`labeling.versions.winrate_stats.win_rate`, as people's figures).

    lines = judge_winrate_lines(store)     # ["  qwen judged v2 against v0: win rate 60% [39%, 78%] on 20 pairs"]
    beside = judges_against_sft(store)     # {policy id: [JudgeWinRate("qwen", ...)]}, for the Leaderboard tab
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from labeling.versions.winrate import version_names
from labeling.versions.winrate_stats import WinRate, win_rate
from storage import Store
from storage.judge_verdicts import judge_winrate_rows
from storage.policies import list_policies, root_policy


def result(outcome: str, version_first: bool) -> float:
    """A verdict on a win-rate pair as the judged version's result: 1 (win), 0.5 (tie) or 0 (loss)."""
    if outcome == "tie":
        return 0.5
    return 1.0 if (outcome == "first") == version_first else 0.0


def judge_win_rates(rows: list[dict]) -> dict[tuple[str, int, int], WinRate]:
    """(judge, policy id, opponent id) -> the judge's win rate of the version against the opponent."""
    results: dict[tuple[str, int, int], list[float]] = defaultdict(list)
    for row in rows:
        results[(row["judge"], row["policy_id"], row["opponent_id"])].append(
            result(row["outcome"], bool(row["version_first"])))
    return {key: win_rate(values) for key, values in results.items()}


def judge_winrate_lines(store: Store) -> list[str]:
    """One line per judge and version compared, for `status` (beside people's win rates, never pooled)."""
    names = version_names(list_policies(store))
    return [f"  {judge} judged {names[policy]} against {names[opponent]}: win rate {rate.rate:.0%} "
            f"[{rate.low:.0%}, {rate.high:.0%}] on {rate.n} pairs (never pooled with people's)"
            for (judge, policy, opponent), rate in judge_win_rates(judge_winrate_rows(store)).items()]


@dataclass(frozen=True)
class JudgeWinRate:
    """One judge's win rate of one version against the version's SFT root (ties half, 95% Wilson interval)."""

    judge: str
    policy_id: int
    rate: WinRate

    def label(self) -> str:
        """`judge:qwen 54% [40%, 67%] n=30`."""
        return (f"judge:{self.judge} {self.rate.rate:.0%} [{self.rate.low:.0%}, {self.rate.high:.0%}] "
                f"n={self.rate.n}")


def judges_against_sft(store: Store) -> dict[int, list[JudgeWinRate]]:
    """Policy id -> each judge's win rate of that version against its SFT root (judges by name), for the figures
    beside people's against the SFT policy; versions no judge compared with their root are absent."""
    roots = {p.id: root_policy(store, p).id for p in list_policies(store)}
    found: dict[int, list[JudgeWinRate]] = defaultdict(list)
    for (judge, policy, opponent), rate in sorted(judge_win_rates(judge_winrate_rows(store)).items(),
                                                  key=lambda item: item[0]):
        if roots.get(policy) == opponent != policy:
            found[policy].append(JudgeWinRate(judge, policy, rate))
    return dict(found)
