"""Win-rate pairs and what their labels say: do people prefer a policy version to the SFT policy?

When a policy version is registered, `winrate_pairs` (default 24) blind pairs are made of its held-out evaluation
samples against the SFT root's samples of the same prompts (and, with `winrate_previous`, against the previous
version's): each of the version's samples is used once before any is used twice, and which of the two is the pair's
first is a seeded coin flip, stored with the pair. They are queued spread through the places annotators label next
(as check pairs are): the first places of the next round's pairs, or for a loop's final version the places left in
the queue, so neither place, id nor anything shown tells them apart. Their labels never train (see
`storage.winrate`).

The figures (`winrate_report`), computed from the current labels whenever asked, so they update as labels arrive:
per version, win / tie / loss against the SFT root with the Wilson 95% interval (ties half) and the length-controlled
win rate, on held-out prompts and, apart, on people's own prompts (the arena's votes, split by the prompt's source);
and a leaderboard of Bradley-Terry strengths of every version from all the win-rate judgements, with bootstrap
intervals (`labeling.versions.winrate_stats` holds the math).

    pairs = make_winrate_pairs(version_samples, sft_samples, n=24, seed=7, round=3)
    placed = place_in_queue(pairs, open_places(store, 100), within=100, round=3)
    report = winrate_report(store)       # report.versions[-1].rate, report.leaderboard[0].name
"""

from __future__ import annotations

import random
import re
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np

from labeling.queue.check_pairs import check_positions
from labeling.versions.winrate_stats import (
    BOOTSTRAP_ROUNDS,
    bootstrap_strengths,
    bradley_terry,
    length_controlled,
    length_difference,
    sigmoid,
    win_rate,
)
from storage import Store
from storage.pairs import NewPair
from storage.policies import list_policies, root_policy
from storage.types import Generation, Outcome, Policy, Selector
from storage.winrate import QueuePlace, WinrateJudgement, winrate_judgements

MIN_PAIRS_FOR_INTERVAL = 24  # the default `winrate_pairs`: 24 judgements can put a 95% interval clear of 50%


def version_names(policies: Sequence[Policy]) -> dict[int, str]:
    """`v0`, `v1`, ... by registration order: v0 is the first policy of the store (the SFT root)."""
    return {p.id: f"v{k}" for k, p in enumerate(sorted(policies, key=lambda p: p.id))}


def version_number(text: str) -> int | None:
    """The k of a version written `vk` or `k` (`v3`, `3`), as `loop --from` takes it; None for anything else."""
    match = re.fullmatch(r"v?([0-9]+)", text.strip().lower())
    return int(match.group(1)) if match else None


def named_version(policies: Sequence[Policy], text: str) -> Policy | None:
    """The version `text` names as a person writes it (`v3`; `3` as `loop --from` takes it); None when none is."""
    number = version_number(text) if isinstance(text, str) else None
    names = version_names(policies)
    return next((p for p in policies if number is not None and names[p.id] == f"v{number}"), None)


def registered_version(policies: Sequence[Policy], policy_id: int) -> str:
    """How a command names the policy it registered: `v3`, as `--policy` takes it (the policy id stays internal)."""
    return version_names(policies)[policy_id]


def make_winrate_pairs(version: Sequence[Generation], opponent: Sequence[Generation], n: int, seed: int,
                       round: int) -> list[NewPair]:
    """Up to `n` pairs of a `version` sample and an `opponent` sample of the same held-out prompt. The version's
    samples are taken in passes (every one once before any twice, prompts in a seeded order), each against the
    opponent's samples in turn; which one is first is a seeded coin flip."""
    rng = random.Random(seed)
    mine, theirs = _by_prompt(version), _by_prompt(opponent)
    prompts = sorted(set(mine) & set(theirs))
    rng.shuffle(prompts)
    passes = max((len(mine[p]) * len(theirs[p]) for p in prompts), default=0)
    pairs: list[NewPair] = []
    for k in range(passes):
        for prompt in prompts:
            ours, others = mine[prompt], theirs[prompt]
            if k >= len(ours) * len(others) or len(pairs) >= n:
                continue
            a, b = ours[k % len(ours)], others[(k % len(ours) + k // len(ours)) % len(others)]
            first, second = (a, b) if rng.random() < 0.5 else (b, a)
            pairs.append(NewPair(prompt, first.id, second.id, Selector.WINRATE, None, round, a.policy_id))
    return pairs


def _by_prompt(samples: Sequence[Generation]) -> dict[int, list[Generation]]:
    grouped: dict[int, list[Generation]] = defaultdict(list)
    for sample in sorted(samples, key=lambda g: g.id):
        grouped[sample.prompt_id].append(sample)
    return grouped


def place_in_queue(pairs: Sequence[NewPair], places: Sequence[QueuePlace], within: int, round: int) -> list[NewPair]:
    """The pairs with the round and score that make the queue serve them spread evenly among its first `within` open
    places (`places`: the open pairs in queue order), each before the last of those, so labelling them all labels
    the new pairs too. A new pair placed before open pair k takes the round and score of pair k - 1 (it has a higher
    id, so it is served right after that pair), or before the first, its round and a higher score; with no open pair
    it goes in `round` at score 0."""
    regular = min(within, len(places))
    out = []
    for k, (pair, position) in enumerate(zip(pairs, check_positions(len(pairs), regular + len(pairs)), strict=True)):
        before = min(position - k, max(regular - 1, 0))  # open pairs served before this one
        if not places:
            out.append(replace(pair, round=round, score=0.0))
        elif before == 0:
            out.append(replace(pair, round=places[0].round, score=(places[0].score or 0.0) + 1.0))
        else:
            out.append(replace(pair, round=places[before - 1].round, score=places[before - 1].score))
    return out


def version_result(judgement: WinrateJudgement) -> float:
    """1 when the judged version's response was preferred, 0 when its opponent's, 1/2 for a tie or both bad."""
    if judgement.outcome in (Outcome.TIE, Outcome.BOTH_BAD):
        return 0.5
    return float((judgement.outcome is Outcome.FIRST) == judgement.version_first)


@dataclass(frozen=True)
class VersionFigures:
    """One version against the SFT root: win / tie / loss, the win rate (ties half) with its 95% Wilson interval,
    and the length-controlled win rate with its 95% interval. Rates are None before any judgement."""

    policy_id: int
    name: str
    round: int
    judgements: int
    wins: int
    ties: int
    losses: int
    rate: float | None
    low: float | None
    high: float | None
    lc_rate: float | None
    lc_low: float | None
    lc_high: float | None
    length_coef: float | None

    @property
    def excludes_half(self) -> bool:
        """The 95% interval lies wholly on one side of 50%."""
        return self.low is not None and (self.low > 0.5 or self.high < 0.5)

    def line(self) -> str:
        """`v3: win rate vs SFT 71% [52%, 84%], length-controlled 69% [50%, 83%]; 24 judgements (...)`: a version by
        its own name (two versions made in one store round share the round, never the name)."""
        if not self.judgements:
            return f"{self.name}: no judgements against the SFT policy yet"
        return (f"{self.name}: win rate vs SFT {self.rate:.0%} [{self.low:.0%}, "
                f"{self.high:.0%}], length-controlled {self.lc_rate:.0%} [{self.lc_low:.0%}, {self.lc_high:.0%}]; "
                f"{self.judgements} judgements ({self.wins} W / {self.ties} T / {self.losses} L)")


@dataclass(frozen=True)
class Standing:
    """A version on the leaderboard: its Bradley-Terry strength (logits, the SFT root at 0) with a 95% bootstrap
    interval, the implied P(preferred to the SFT policy), and how many judgements it took part in. Strengths are
    None for a version no judgements join to the SFT root (the interval too, without bootstrap resamples)."""

    rank: int | None
    policy_id: int
    name: str
    round: int
    strength: float | None
    low: float | None
    high: float | None
    beats_sft: float | None
    judgements: int
    anchor: bool = False  # the SFT root, whose strength is 0 by definition


@dataclass(frozen=True)
class WinrateReport:
    """Every version after the SFT root against it (in version order) on held-out prompts, the same on people's own
    prompts (the arena's: never pooled with the held-out figures), and the leaderboard from all of them (strongest
    first, versions without a strength last)."""

    versions: list[VersionFigures]
    leaderboard: list[Standing]
    judgements: int
    own_prompts: list[VersionFigures] = field(default_factory=list)  # arena votes on people's own prompts, apart

    def latest(self) -> VersionFigures | None:
        """The newest version's figures (None when the store holds only the SFT policy)."""
        return self.versions[-1] if self.versions else None


def version_figures(policy: Policy, name: str, judgements: Sequence[WinrateJudgement], root_id: int
                    ) -> VersionFigures:
    """`policy`'s figures from the judgements of it against the SFT root `root_id`."""
    mine = [j for j in judgements if j.policy_id == policy.id and j.opponent_id == root_id]
    results = [version_result(j) for j in mine]
    counted = win_rate(results)
    lc = length_controlled(results, [length_difference(j.policy_tokens, j.opponent_tokens) for j in mine])
    return VersionFigures(policy.id, name, policy.round, counted.n, counted.wins, counted.ties, counted.losses,
                          counted.rate, counted.low, counted.high, lc.rate, lc.low, lc.high, lc.length_coef)


def leaderboard(policies: Sequence[Policy], names: dict[int, str], judgements: Sequence[WinrateJudgement],
                anchor_id: int, rounds: int = BOOTSTRAP_ROUNDS, seed: int = 0) -> list[Standing]:
    """Bradley-Terry strengths of every version from all win-rate judgements, anchored at `anchor_id` (the SFT
    root), with 95% bootstrap intervals; ranked strongest first."""
    index = {p.id: k for k, p in enumerate(policies)}
    data = [(index[j.policy_id], index[j.opponent_id], version_result(j)) for j in judgements
            if j.policy_id in index and j.opponent_id in index]
    strengths = bradley_terry(len(policies), data, index[anchor_id])
    low, high = bootstrap_strengths(len(policies), data, index[anchor_id], rounds, seed)
    counts = np.zeros(len(policies), dtype=int)
    for i, j, _ in data:
        counts[i] += 1
        counts[j] += 1
    standings = []
    for k, p in enumerate(policies):
        known = not np.isnan(strengths[k])
        bounded = known and not np.isnan(low[k])
        standings.append(Standing(None, p.id, names[p.id], p.round, float(strengths[k]) if known else None,
                                  float(low[k]) if bounded else None, float(high[k]) if bounded else None,
                                  float(sigmoid(strengths[k])) if known else None, int(counts[k]), p.id == anchor_id))
    ranked = sorted(standings, key=lambda s: (s.strength is None, -(s.strength or 0.0), s.policy_id))
    return [replace(s, rank=r + 1 if s.strength is not None else None) for r, s in enumerate(ranked)]


def winrate_report(store: Store, rounds: int = BOOTSTRAP_ROUNDS) -> WinrateReport:
    """Every version's figures against the SFT root and the leaderboard, from the store's current labels (`rounds`
    bootstrap resamples for the leaderboard's intervals; 0: none)."""
    policies = list_policies(store)
    if not policies:
        return WinrateReport([], [], 0)
    names, judgements = version_names(policies), winrate_judgements(store)
    root = root_policy(store, policies[-1])
    heldout, own = [j for j in judgements if not j.own_prompt], [j for j in judgements if j.own_prompt]
    later = [p for p in policies if p.id != root_policy(store, p).id]
    versions = [version_figures(p, names[p.id], heldout, root_policy(store, p).id) for p in later]
    own_prompts = [version_figures(p, names[p.id], own, root_policy(store, p).id) for p in later]
    return WinrateReport(versions, leaderboard(policies, names, judgements, root.id, rounds), len(judgements),
                         own_prompts)
