"""The loop's failure warnings: after each phase of a round, the per-phase rules of `trainers.loop.phase_rules` read
what the phase stored; new findings are recorded with the job (once per rule and round) and returned, and a loop set to
`on_warning: pause` stops before its next PPO/GRPO phase while any is not acknowledged (a resume acknowledges them).

    new = reward_phase_warnings(store, job_id, config, round=g, first_round=1)     # after the round's reward model
    new = policy_phase_warnings(store, job_id, config, round=g, first_round=1)   # after its PPO/GRPO and summary
    new = winrate_warnings(store, job_id, config, first_round=1)     # the loop's end: its final version judged
    reason = pause_reason(store, job_id)                              # "paused: kl_per_token: KL per token ..." or None
"""

from __future__ import annotations

import math
import time

from labeling.queue.check_pairs import agreement
from labeling.versions.winrate import version_figures, version_names
from storage import Store
from storage.check_pairs import check_votes
from storage.job_warnings import list_warnings, record_warnings
from storage.metrics import read_metrics
from storage.policies import latest_policy, list_policies, root_policy
from storage.types import JobWarning
from storage.winrate import winrate_judgements

from ..policy.config import Algorithm
from .config import LoopConfig
from .diagnostics import Finding
from .judging import judge_agreement_findings
from .phase_rules import (
    Phase,
    check_pair_findings,
    held_out_oracle_falls,
    phase_findings,
    reward_model_findings,
    winrate_below_sft,
)

VAL_PAIRS_METRIC = "round/val_pairs"  # held-out pairs of the round's reward model, logged at the round's step
DPO_STEP_OFFSET = "round/dpo_step_offset"  # the job's DPO steps before round g's, logged at step g
DPO_SAMPLE_SERIES = ("kl", "entropy", "response_length", "eos_rate", "oracle_score")  # measured on samples


def record(store: Store, job_id: int, findings: list[Finding]) -> list[JobWarning]:
    """Store the findings not stored yet for the job; returns the new ones."""
    now = time.time()
    return record_warnings(store, job_id, [JobWarning(job_id, f.rule, f.round or 0, f.step, f.title, f.detail, f.advice,
                                                      now) for f in findings])


def _values(store: Store, job_id: int, names: list[str]) -> dict[str, dict[int, float]]:
    """The job's series of `names` as {name: {step: value}}."""
    out: dict[str, dict[int, float]] = {name: {} for name in names}
    for row in read_metrics(store, job_id, names=names):
        out[row["name"]][row["step"]] = row["value"]
    return out


def reward_phase_warnings(store: Store, job_id: int, config: LoopConfig, round: int, first_round: int = 1
                          ) -> list[JobWarning]:
    """Record what `reward_phase_findings` finds; returns the new warnings."""
    return record(store, job_id, reward_phase_findings(store, job_id, config, round, first_round))


def reward_phase_findings(store: Store, job_id: int, config: LoopConfig, round: int, first_round: int = 1
                          ) -> list[Finding]:
    """Round `round`'s reward model (validation size and accuracy), its check pairs' agreement, and the people's
    judgements of the version it started from (labelled in this round) against the SFT policy."""
    series = _values(store, job_id, ["reward/val_accuracy", VAL_PAIRS_METRIC])
    accuracy = series["reward/val_accuracy"]
    step = max(accuracy) if accuracy else None
    if round not in series[VAL_PAIRS_METRIC]:
        return []  # no reward model of this round yet
    val_pairs = int(series[VAL_PAIRS_METRIC][round])
    found = reward_model_findings(round, step, accuracy.get(step) if step is not None else None, val_pairs)
    check = agreement(check_votes(store, round=round))
    found += check_pair_findings(round, check.value, check.labels, config.check_min_agreement)
    found += judge_agreement_findings(store, config, round)
    return found + winrate_findings(store, job_id, config, first_round)


def winrate_warnings(store: Store, job_id: int, config: LoopConfig, first_round: int) -> list[JobWarning]:
    """Record what `winrate_findings` finds (the loop's end: its final version judged); returns the new warnings."""
    return record(store, job_id, winrate_findings(store, job_id, config, first_round))


def winrate_findings(store: Store, job_id: int, config: LoopConfig, first_round: int) -> list[Finding]:
    """The newest policy version, when this job trained it: people's judgements of it against the SFT policy, with
    the reward-model score's rise over its PPO/GRPO phase (recorded under the version's round)."""
    policies = list_policies(store)
    newest = latest_policy(store)
    root = root_policy(store, newest) if newest else None
    if newest is None or newest.id == root.id or newest.round < first_round:
        return []
    name = version_names(policies)[newest.id]
    heldout = [j for j in winrate_judgements(store) if not j.own_prompt]  # arena votes are reported apart
    figures = version_figures(newest, name, heldout, root.id)
    score = phase_of(store, job_id, config, newest.round, first_round).series.get("score", [])
    if len(score) < 2:
        return []
    found = winrate_below_sft(newest.round, name, figures.rate, figures.low, figures.high, figures.judgements,
                              score[-1] - score[0])
    return [found] if found else []


def phase_of(store: Store, job_id: int, config: LoopConfig, round: int, first_round: int) -> Phase:
    """Round `round`'s PPO/GRPO steps and series (the loop numbers them `(round - first_round) * M + 1 ...`), or its
    DPO phase's samples of the policy (its steps start after the stored offset of the round, end before the next's)."""
    m, prefix = config.policy.iterations, f"{config.algorithm}/"
    low, high = (round - first_round) * m, (round - first_round + 1) * m
    rows = read_metrics(store, job_id, prefix=prefix)
    if config.algorithm == Algorithm.DPO:
        offsets = _values(store, job_id, [DPO_STEP_OFFSET])[DPO_STEP_OFFSET]
        low, high = offsets.get(round, 0), offsets.get(round + 1, math.inf)
        rows = [r for r in rows if r["name"][len(prefix):] in DPO_SAMPLE_SERIES]
    rows = [r for r in rows if low < r["step"] <= high]
    steps = sorted({r["step"] for r in rows})
    by_name: dict[str, dict[int, float]] = {}
    for r in rows:
        by_name.setdefault(r["name"][len(prefix):], {})[r["step"]] = r["value"]
    series = {name: [values[s] for s in steps] for name, values in by_name.items() if len(values) == len(steps)}
    return Phase(round, steps, series)


def policy_phase_warnings(store: Store, job_id: int, config: LoopConfig, round: int, first_round: int
                          ) -> list[JobWarning]:
    """Record what `policy_phase_findings` finds; returns the new warnings."""
    return record(store, job_id, policy_phase_findings(store, job_id, config, round, first_round))


def policy_phase_findings(store: Store, job_id: int, config: LoopConfig, round: int, first_round: int
                          ) -> list[Finding]:
    """Round `round`'s PPO/GRPO phase, and its new policy's held-out oracle score against the last policy's."""
    phase = phase_of(store, job_id, config, round, first_round)
    found = phase_findings(phase)
    held_out = _values(store, job_id, ["round/oracle_score"])["round/oracle_score"]
    score = phase.series.get("score", [])
    if round in held_out and round - 1 in held_out and len(score) >= 2:
        last_step = phase.steps[-1] if phase.steps else None
        crossing = held_out_oracle_falls(round, last_step, held_out[round - 1], held_out[round], score[-1] - score[0])
        found += [crossing] if crossing else []
    return found


def pause_reason(store: Store, job_id: int) -> str | None:
    """`paused: <rule>: <title>` of the job's first warning no resume acknowledged yet; None when all are."""
    pending = [w for w in list_warnings(store, job_id) if w.acknowledged is None]
    return f"paused: {pending[0].rule}: {pending[0].title}" if pending else None


def warning_line(warning: JobWarning) -> str:
    """How the `loop` command prints a warning when it fires."""
    return f"warning: {warning.rule}: {warning.title} (round {warning.round}, step {warning.step}) {warning.detail}"
