"""A round's summary as one line a person reads (the terminal of a headless `loop`, the job's log):

    round 2/3 done: v2 · 30 labels · reward val. accuracy 91% · RM score +0.42 · KL 1.20 · oracle score 0.53 → 0.81
    · v2 vs SFT pending (v1: 62% [43%, 79%], 24 judgements by the oracle annotator)

The numbers are the round's stored summary (`storage.rounds`); the oracle's score before the round and the newest
judged version's win rate and who judged it come from the caller (the new version's is pending until its win-rate
pairs are judged, after its round). The policy's training score is the reward model's ("RM score") only when the
reward is the reward model; otherwise it is the training reward, and each reward function's held-out pass rate before
and after the round is given with its interval (`trainers.loop.pass_rates`). A loop on the reward functions alone
(RLVR) has no labels to count:

    round 1/1 done: v1 · training reward +0.31 · KL 0.20 · math_answer 14% [10%, 20%] → 31% [25%, 38%] (+17 points
    [+9, +25]; 192 held-out samples)"""

from __future__ import annotations

from typing import Sequence

from labeling.versions.winrate import VersionFigures

from ..policy.config import RewardSource
from .pass_rates import PassRate, change_text


def signed(value: float) -> str:
    return f"{value:+.2f}"


def round_line(number: int, rounds: int, version: str, summary: dict, oracle_before: float | None = None,
               judged: VersionFigures | None = None, judged_by: str | None = None, reward: str = RewardSource.RM,
               functions: Sequence[tuple[PassRate | None, PassRate]] = ()) -> str:
    """Round `number` of `rounds` (the loop's count) that made policy `version`, in one line (`judged_by`: who gave
    the `judged` version's judgements, as `job_summary.who_judged` says it; `reward`: what the policy maximised;
    `functions`: each reward function's held-out pass rate before the round and after it)."""
    parts = [version] + ([] if reward == RewardSource.FUNCTIONS else [f"{summary['labels']} labels"])
    if summary.get("reward_val_accuracy") is not None:
        parts.append(f"reward val. accuracy {summary['reward_val_accuracy']:.0%}")
    if summary.get("score") is not None:
        scored = "RM score" if reward == RewardSource.RM else "training reward"
        parts.append(f"{scored} {signed(summary['score'])}")
    if summary.get("kl") is not None:
        parts.append(f"KL {summary['kl']:.2f}")
    if summary.get("oracle_score") is not None:
        before = f"{oracle_before:.2f} → " if oracle_before is not None else ""
        parts.append(f"oracle score {before}{summary['oracle_score']:.2f}")
    parts.extend(change_text(before, after) for before, after in functions)
    if summary.get("check_agreement") is not None:
        parts.append(f"check-pair agreement {summary['check_agreement']:.0%}")
    if judged is not None and judged.judgements:
        rate = f"{judged.rate:.0%} [{judged.low:.0%}, {judged.high:.0%}]"
        count = f"{judged.judgements} judgements{' by ' + judged_by if judged_by else ''}"
        # a version's win-rate pairs are judged after its round: until then its rate is pending, an older one named
        parts.append(f"{version} vs SFT {rate} ({count})" if judged.name == version else
                     f"{version} vs SFT pending ({judged.name}: {rate}, {count})")
    return f"round {number}/{rounds} done: " + " · ".join(parts)
