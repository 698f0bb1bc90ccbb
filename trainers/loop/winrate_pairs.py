"""Queue a policy version's win-rate pairs (`labeling.versions.winrate` says which pairs and where), and let the oracle
judge the open ones when a loop labels synthetically.

A version's pairs are queued once, after the round that samples from it has queued its own pairs, spread through the
first places annotators label in that round; the loop's final version gets its pairs when the loop ends, spread
through the places left in the queue. Its evaluation samples and the SFT root's are drawn first if missing.

    queued = queue_version_pairs(store, version, config, within=100, with_oracle=True)
    judge_open_pairs(store, config, seed=7)   # the oracle annotator labels every open win-rate pair
"""

from __future__ import annotations

from labeling.versions.winrate import make_winrate_pairs, place_in_queue
from storage import Store
from storage.generations import EVAL_SOURCE, list_generations
from storage.policies import get_policy, root_policy
from storage.types import Policy, Selector
from storage.winrate import (
    WinrateMark,
    list_winrate_pairs,
    newest_pair_round,
    open_places,
    queue_winrate_pairs,
)

from .config import LoopConfig
from .evaluation import ensure_eval_samples


def opponents(store: Store, version: Policy, config: LoopConfig) -> list[tuple[Policy, int]]:
    """Whom `version` is judged against, and with how many pairs: the SFT root, and the previous version (its parent,
    when it is not the root) with `winrate_previous`."""
    root = root_policy(store, version)
    if root.id == version.id:
        return []
    wanted = [(root, config.winrate_pairs)]
    if config.winrate_previous and version.parent_id not in (None, root.id):
        wanted.append((get_policy(store, version.parent_id), config.winrate_previous))
    return [(policy, n) for policy, n in wanted if n > 0]


def pending(store: Store, version: Policy, config: LoopConfig) -> list[tuple[Policy, int]]:
    """`opponents` while `version` has no win-rate pairs queued yet; none after."""
    return [] if list_winrate_pairs(store, version.id) else opponents(store, version, config)


def queue_version_pairs(store: Store, version: Policy, config: LoopConfig, within: int, with_oracle: bool,
                        seed: int = 0, job_id: int | None = None) -> int:
    """Queue `version`'s win-rate pairs, owned by loop job `job_id` (None: the people's queue), spread through the
    queue's first `within` open places, unless it has some already (or is the SFT root); returns how many were
    queued."""
    against = pending(store, version, config)
    if not against:
        return 0
    spread = []  # (place within its opponent's pairs, pair, mark): the kinds of pairs alternate in the queue
    for opponent, n in against:
        for policy in (version, opponent):
            ensure_eval_samples(store, policy, config, with_oracle)
        made = make_winrate_pairs(list_generations(store, policy_id=version.id, source=EVAL_SOURCE),
                                  list_generations(store, policy_id=opponent.id, source=EVAL_SOURCE), n,
                                  seed=seed * 1000 + version.id, round=version.round)
        spread += [(k / len(made), pair, WinrateMark(version.id, opponent.id)) for k, pair in enumerate(made)]
    spread.sort(key=lambda item: item[0])
    placed = place_in_queue([pair for _, pair, _ in spread], open_places(store, within), within,
                            max(newest_pair_round(store), version.round))
    return len(queue_winrate_pairs(store, placed, [mark for _, _, mark in spread], job_id))


def judge_open_pairs(store: Store, config: LoopConfig, seed: int, job_id: int | None = None) -> int:
    """The loop's oracle annotator labels every win-rate pair still open (with `job_id`: those that loop job queued;
    nothing else); returns how many."""
    from labeling.queue.synthetic import OracleAnnotator

    oracle = OracleAnnotator.from_spec(config.oracle, noise=config.oracle_noise, seed=seed)
    return len(oracle.label(store, len(list_winrate_pairs(store)), selector=Selector.WINRATE, job_id=job_id))
