"""How a judge model agrees with people, on every item both judged: agreement and Cohen's κ with counts and 95%
intervals, per judge and by round. Pure functions of (judge outcome, person's outcome) rows; people's "both bad"
counts as a tie (the judge's verdicts are first, second or tie).

κ's interval uses Cohen's (1960) large-sample standard error, sqrt(p_o (1 - p_o) / (n (1 - p_e)^2)); agreement's is
Wilson's.

    table = judge_agreement(judged_beside_people(store))      # [JudgeAgreement(judge, round=None, ...), by round ...]
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Sequence

from labeling.judges.judge_winrate import judge_winrate_lines
from labeling.stats.agreement import cohen_kappa, percent_agreement
from labeling.versions.winrate_stats import Z95, wilson_interval
from storage.judge_verdicts import STATUSES, judged_beside_people, status_counts
from storage.types import Outcome

MIN_ITEMS_FOR_WARNING = 10  # fewer items both judged say too little to warn about a judge


@dataclass(frozen=True)
class JudgeAgreement:
    """One judge against people, over all rounds (`round` None) or one round."""

    judge: str
    round: int | None
    items: int  # (pair, person) items both judged
    agreement: float | None
    agreement_low: float | None
    agreement_high: float | None
    kappa: float | None
    kappa_low: float | None
    kappa_high: float | None

    def line(self) -> str:
        """`qwen, round 2: agreement 0.78 [0.66, 0.87], κ 0.61 [0.43, 0.79] on 52 items`."""
        where = f"{self.judge}" + ("" if self.round is None else f", round {self.round}")
        if not self.items:
            return f"{where}: no item judged by both the judge and people yet"
        kappa = "κ n/a" if self.kappa is None else f"κ {self.kappa:.2f} [{self.kappa_low:.2f}, {self.kappa_high:.2f}]"
        return (f"{where}: agreement {self.agreement:.2f} [{self.agreement_low:.2f}, {self.agreement_high:.2f}], "
                f"{kappa} on {self.items} items")

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def as_verdict(outcome: Outcome) -> Outcome:
    """A person's outcome on the judge's scale: "both bad" is a tie."""
    return Outcome.TIE if outcome is Outcome.BOTH_BAD else outcome


def kappa_interval(a: Sequence[Outcome], b: Sequence[Outcome], z: float = Z95) -> tuple[float, float] | None:
    """Cohen's κ ± z·SE with Cohen's large-sample SE, clipped to [-1, 1]; None when κ is undefined."""
    kappa = cohen_kappa(a, b)
    if kappa is None:
        return None
    n, observed = len(a), percent_agreement(a, b)
    count_a, count_b = Counter(a), Counter(b)
    expected = sum(count_a[c] * count_b[c] for c in count_a) / (n * n)
    half = z * math.sqrt(observed * (1 - observed) / n) / (1 - expected)
    return max(-1.0, kappa - half), min(1.0, kappa + half)


def agreement_of(judge: str, round: int | None, judged: Sequence[Outcome], people: Sequence[Outcome]
                 ) -> JudgeAgreement:
    """The figures of paired outcomes (the judge's, people's)."""
    if not judged:
        return JudgeAgreement(judge, round, 0, None, None, None, None, None, None)
    people = [as_verdict(o) for o in people]
    agree = percent_agreement(judged, people)
    low, high = wilson_interval(agree * len(judged), len(judged))
    kappa = cohen_kappa(judged, people)
    interval = kappa_interval(judged, people) or (None, None)
    return JudgeAgreement(judge, round, len(judged), agree, low, high, kappa, *interval)


def judge_agreement(rows: Iterable[dict], by_round: bool = True) -> list[JudgeAgreement]:
    """Per judge, its figures over every item (round None), then (with `by_round`) round by round; rows as
    `storage.judge_verdicts.judged_beside_people` gives them."""
    groups: dict[tuple[str, int | None], tuple[list, list]] = {}
    for row in rows:
        keys = [(row["judge"], None)] + ([(row["judge"], row["round"])] if by_round else [])
        for key in keys:
            judged, people = groups.setdefault(key, ([], []))
            judged.append(Outcome(row["judge_outcome"]))
            people.append(Outcome(row["person_outcome"]))
    order = sorted(groups, key=lambda k: (k[0], -1 if k[1] is None else k[1]))
    return [agreement_of(judge, rnd, *groups[(judge, rnd)]) for judge, rnd in order]


def store_agreement(store, by_round: bool = True) -> list[JudgeAgreement]:
    """`judge_agreement` of the store's verdicts beside people's current labels."""
    return judge_agreement(judged_beside_people(store), by_round)


def judge_report_lines(store) -> list[str]:
    """What `status` prints about judges: each judge's verdicts by status, then its agreement with people over all
    rounds and round by round; nothing when no judge has answered."""
    counts = status_counts(store)
    if not counts:
        return []
    lines = ["judges (verdicts kept apart from people's labels; agreement on the items both judged, 95% intervals):"]
    table = store_agreement(store)
    for judge, row in counts.items():
        failures = ", ".join(f"{row[s]} {s}" for s in STATUSES[1:] if row[s])
        lines.append(f"  {judge}: {row['ok']} verdicts ({row['trains']} train){', ' + failures if failures else ''}")
        lines += [f"    {figures.line()}" for figures in table if figures.judge == judge]
    return lines + judge_winrate_lines(store)
