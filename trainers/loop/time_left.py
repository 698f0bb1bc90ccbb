"""How long a job has left, from its progress so far: the estimate the Train tab shows ("about 3 min left"). Pure and
torch-free (the serving process imports it).

A loop's progress gives each round an equal share, split between its phases by fixed fractions (`rounds.py`: the
reward model from 0.3 of a round, the policy optimiser from `POLICY_START`). The fractions are not the phases' times:
on the demo the reward phase takes about three quarters of a round, so the pace of a first round's early phases says
little, and an estimate from it grew all through the reward phase (5:45 to 13:18 in one walkthrough). So:

- once a round of the job has ended: the measured time per round times the rounds still to run, less what the current
  round has run so far (never less than its fraction of a round left at that time per round);
- in the first round: the pace so far, only once its policy phase has begun (before that, no estimate);
- any other job (one phase of steps, evenly paced): the pace so far, once it has gone `MIN_PROGRESS` of the way.

    time_left(80, 0.4)                                # 120.0: a reward job at 40% after 80 s
    time_left(100, 0.4, rounds=3, round_ends=[90])    # 170.0: 90 s a round, round 2 of 3 ran 10 s
"""

from __future__ import annotations

MIN_PROGRESS = 0.03  # below it the pace says little about the time left
POLICY_START = 0.5  # the share of a loop's round done when its policy phase (PPO, GRPO or DPO) begins


def time_left(elapsed_s: float, progress: float | None, rounds: int | None = None,
              round_ends: list[float] | tuple = ()) -> float | None:
    """Seconds left of a job `elapsed_s` seconds and `progress` (0-1) of the way in; None while there is too little to
    go on. A loop gives its `rounds` and `round_ends`: the seconds from its start at which each of its rounds ended."""
    if progress is None or progress >= 1:
        return None
    pace = elapsed_s * (1 - progress) / progress if progress >= MIN_PROGRESS else None
    if rounds is None:
        return pace
    done = len(round_ends)
    if done == 0:  # the first round: its reward phase is no guide to the rest
        return pace if progress * rounds >= POLICY_START else None
    if done >= rounds:  # the last version's win-rate pairs, after the rounds
        return pace
    per_round = round_ends[-1] / done
    in_round = min(1.0, max(0.0, progress * rounds - done))  # the current round's fraction done
    current = max(per_round - (elapsed_s - round_ends[-1]), per_round * (1 - in_round))
    return current + per_round * (rounds - done - 1)
