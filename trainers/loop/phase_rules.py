"""The failure-warning rules a loop checks after each phase, pure functions over the phase's metric series (no
torch); the whole-job rules of the Curves tab are in `diagnostics`.

Per-phase rules in absolute terms (what a loop checks after each reward-model and PPO/GRPO phase: `phase_findings`,
`reward_model_findings`, `held_out_oracle_falls`, `check_pair_findings`, `winrate_below_sft`); each finding names the
round and step where it fired.
A PPO/GRPO rule fires only when its condition held for `WINDOW` consecutive steps, so one odd batch never fires it.
Each rule, when it fires and why its threshold is where it is:

- `kl_per_token`: fires when KL to the reference / response length > 1.0 nats per token. Why: measured on the
  demo (answers of 5-10 tokens), 12 healthy loops (the README's three-round loop at 9 seeds, the Train tab's default
  one, the 3 healthy runs of `bench/failure_warnings.py`) held at most 0.09-0.80 over 2 steps, most of them 0.2-0.4
  by round 3, the KL accumulating round after round against the SFT policy; β = 0 with lr 1e-3 holds 1.45-2.06 by
  its fifth iteration. At 0.5 (the level before) two of the 12 healthy loops fired; at 1.0 every token is on
  average 2.7x likelier under the policy than the reference: it writes something else. (With a real model's long
  answers a healthy per-token KL is far lower: there `kl_growth` is the earlier signal.)
- `kl_growth`: fires when within one phase the KL per token grew 5-fold from the phase's first steps, to 0.3 or
  more. Why: a KL anchor holds the KL within a small factor during a phase; 5-fold growth to a level that matters
  means nothing holds it (none of the 12 healthy default demo loops of `kl_per_token` above fired it).
- `score_beyond_range`: fires when normalised reward-model score > 3. Why: rewards are normalised to mean 0, std 1
  on the samples the reward model was fitted to; 3 std above their mean is beyond ~all of them: the reward model is
  extrapolating.
- `oracle_falls`: fires when the oracle's score fell 0.3 or more (demo oracle units, ~1/3 of its samples' std) below
  the phase's first steps, or below the previous round's held-out score, while the reward-model score rose. Why: the
  policy is learning what the reward model gets wrong; a healthy phase moves the oracle up with the score.
- `oracle_uncorrelated`: fires when the correlation between the reward model's and the oracle's scores of each
  rollout's samples (`oracle_correlation`), averaged over the phase's steps so far, < 0.3 once 5 steps are in. Why:
  measured at bench scale (`bench/failure_warnings.py`, 16 samples a step): 10 healthy phases (5 seeds, 2 rounds)
  average +0.39 to +0.69 and their running means from step 5 on stay >= +0.37; labels stored the wrong way round
  average -0.48 to -0.58, a reward model from 8 labels -0.03 to +0.02, a 50%-noise oracle +0.12, +0.24, +0.24
  (fired) and +0.39, +0.44 (those seeds' reward models rank as well as healthy ones, and their policies gained on
  the held-out oracle as much); one step is noisy (healthy steps spread with std 0.22, one down to -0.22), so no
  single step decides: 5 steps bring that spread to ~0.1, and 0.3 sits halfway between the healthy and the noisy
  runs.
- `entropy_floor`: fires when per-token entropy < 0.1 nats. Why: ~0.1 nats means the likeliest token takes ~99% of
  the mass: sampling is nearly greedy and the samples stop varying.
- `length_collapse`: fires when mean response length < 2 tokens. Why: the policy answers with (almost) nothing: a
  reward found in ending at once.
- `never_ending`: fires when fewer than 20% of responses end with EOS. Why: the policy runs into the length limit
  instead of finishing (its scores are then cut texts).
- `validation_too_small`: fires when fewer than 20 held-out pairs. Why: the accuracy on n pairs has a standard error
  of ~0.5/sqrt(n): below 20 pairs (±0.22 at 95%) it cannot tell a useful reward model from a coin.
- `reward_model_near_chance`: fires when validation accuracy < 60% on 50 pairs or more. Why: 60% is the whole-job
  rule's threshold; on fewer than 50 pairs (±0.14 at 95%) a sound round-1 demo reward model often scores 50-56%, so
  less says too little to warn.
- `winrate_below_sft`: fires when people preferred the newest version to the SFT policy in fewer than half of its
  blind win-rate judgements, the 95% Wilson interval wholly below 50%, over 20 judgements or more, while its
  PPO/GRPO phase raised the reward-model score. Why: the question the loop exists for, answered by people rather
  than proxies: a rising reward-model score with a version people like less than the SFT policy is reward hacking;
  20 judgements (the default queues 24) are the fewest whose interval can lie clear of 50% for a clearly worse
  version (5 of 20: 9%-47%).
- `check_agreement_low`: fires when people agree with the reward model on fewer than `check_min_agreement` (60%) of
  its confident check pairs, over 5 labels or more. Why: on the pairs it is surest of, a sound reward model agrees
  with people far above 60%; below it, it rewards what people do not want.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping, Sequence

import numpy as np

from .diagnostics import Finding, reward_model_near_chance

# the thresholds (the table above says why)
WINDOW = 2  # consecutive PPO/GRPO steps a per-phase condition must hold for
KL_PER_TOKEN_MAX = 1.0
KL_PHASE_GROWTH = 5.0
KL_GROWTH_FLOOR = 0.3
SCORE_RANGE = 3.0
ORACLE_DROP = 0.3
ENTROPY_FLOOR = 0.1
MIN_LENGTH = 2.0
MIN_EOS_RATE = 0.2
MIN_VAL_PAIRS = 20
MIN_CHANCE_PAIRS = 50
MIN_CHECK_LABELS = 5
MIN_ORACLE_CORRELATION = 0.3
MIN_CORRELATION_STEPS = 5
MIN_WINRATE_JUDGEMENTS = 20



@dataclass(frozen=True)
class Phase:
    """One PPO/GRPO phase of a loop round: its steps and the optimiser's series over them, aligned with `steps` and
    named without the `ppo/` or `grpo/` prefix (`kl`, `score`, `entropy`, `response_length`, `eos_rate`,
    `oracle_score`, `oracle_correlation`)."""

    round: int
    steps: Sequence[int]
    series: Mapping[str, Sequence[float]]

    def values(self, name: str) -> np.ndarray | None:
        """The series, one value per step; None when it is missing (or not one value per step)."""
        values = self.series.get(name)
        if values is None or len(values) == 0 or len(values) != len(self.steps):
            return None
        return np.asarray(values, dtype=float)

    def held(self, name: str, high: bool = True) -> np.ndarray | None:
        """At each step, the level the series held over the last `WINDOW` steps (fewer at the start): their minimum
        (`high`: how high it stayed) or maximum (how low it stayed); None when the series is missing."""
        values, pick = self.values(name), np.min if high else np.max
        if values is None:
            return None
        return np.array([pick(values[max(0, i - WINDOW + 1):i + 1]) for i in range(len(values))])

    def mean_so_far(self, name: str) -> np.ndarray | None:
        """At each step, the mean of the series over the phase's steps up to it; None when the series is missing."""
        values = self.values(name)
        return None if values is None else np.cumsum(values) / np.arange(1, len(values) + 1)

    def first(self, fired: np.ndarray, start: int = WINDOW - 1) -> int | None:
        """The step where `fired` (one flag per step) first holds, judged from index `start` on; None if never."""
        hits = np.flatnonzero(np.asarray(fired, dtype=bool)[start:])
        return int(self.steps[start + hits[0]]) if len(hits) else None


def _at(phase: Phase, fired, rule: str, title: str, detail, advice: str, start: int = WINDOW - 1) -> Finding | None:
    """The finding at the phase's first step where `fired` holds; `detail(index)` words it for that step."""
    if fired is None:
        return None
    step = phase.first(fired, start)
    if step is None:
        return None
    return Finding(rule, title, detail(list(phase.steps).index(step)), advice, phase.round, step)


def kl_findings(phase: Phase) -> list[Finding]:
    """KL per response token beyond what healthy runs reach, and KL growing many-fold within the phase."""
    kl, length = phase.series.get("kl"), phase.series.get("response_length")
    if kl is None or length is None:
        return []
    per_token_series = np.asarray(kl, dtype=float) / np.maximum(np.asarray(length, dtype=float), 1.0)
    per_token = Phase(phase.round, phase.steps, {"kl": per_token_series}).held("kl")
    base = per_token_series[:WINDOW].mean()
    advice = "The policy is drifting away from what the SFT model would write. Raise β (the KL coefficient), set a " \
             "target KL, or lower the PPO (or GRPO) learning rate (`policy_lr`)."
    found = [
        _at(phase, per_token > KL_PER_TOKEN_MAX, "kl_per_token", "KL per token beyond healthy runs",
            lambda i: f"The KL to the reference stayed above {per_token[i]:.2f} nats per response token for {WINDOW} "
                      f"steps ({kl[i]:.1f} per response at this step); healthy runs stay below {KL_PER_TOKEN_MAX}.",
            advice),
        _at(phase, (per_token >= KL_PHASE_GROWTH * base) & (per_token >= KL_GROWTH_FLOOR), "kl_growth",
            "KL growing fast within the round",
            lambda i: f"Within this round's phase the KL per token grew {per_token[i] / max(base, 1e-9):.0f}-fold, "
                      f"from {base:.3f} to {per_token[i]:.2f} nats.", advice, start=WINDOW),
    ]
    return [f for f in found if f is not None]


def score_beyond_range(phase: Phase) -> Finding | None:
    """The normalised reward-model score far beyond the samples the reward model was fitted and normalised on."""
    score = phase.held("score")
    return _at(phase, None if score is None else score > SCORE_RANGE, "score_beyond_range",
               "Reward model extrapolating",
               lambda i: f"The policy's normalised reward-model score is {score[i]:.1f}: {score[i]:.0f} standard "
                         f"deviations above the samples the reward model was trained and normalised on (> "
                         f"{SCORE_RANGE}).",
               "The reward model is judging texts unlike any it has seen, and its scores there mean little. Raise β, "
               "run fewer PPO iterations per round, or collect labels on the policy's newest samples.")


ORACLE_ADVICE = ("The policy is learning what the reward model gets wrong. Collect more labels on its newest samples, "
                 "raise β, or run fewer PPO iterations per round.")


def oracle_falls(phase: Phase) -> Finding | None:
    """Within the phase the oracle's score fell while the reward-model score rose."""
    oracle, score = phase.held("oracle_score", high=False), phase.held("score")
    if oracle is None or score is None:
        return None
    start_oracle = float(np.mean(phase.series["oracle_score"][:WINDOW]))
    start_score = float(np.mean(phase.series["score"][:WINDOW]))
    return _at(phase, (oracle <= start_oracle - ORACLE_DROP) & (score > start_score), "oracle_falls",
               "Reward hacking: the oracle disagrees",
               lambda i: f"Within the round the oracle's score fell from {start_oracle:.2f} to {oracle[i]:.2f} while "
                         f"the reward-model score rose from {start_score:.2f} to {score[i]:.2f}.", ORACLE_ADVICE,
               start=WINDOW)


def oracle_uncorrelated(phase: Phase) -> Finding | None:
    """The reward model ranks the policy's own samples unlike the oracle: each rollout's correlation between the two
    scores, averaged over the phase's steps so far, below `MIN_ORACLE_CORRELATION` once `MIN_CORRELATION_STEPS` are
    in."""
    mean = phase.mean_so_far("oracle_correlation")

    def detail(i: int) -> str:
        how = "the wrong way round" if mean[i] < 0 else "hardly better than a coin"
        return (f"Over the round's first {i + 1} steps the reward model's scores of the policy's samples correlated "
                f"{mean[i]:+.2f} on average with the oracle's (< {MIN_ORACLE_CORRELATION}; sound reward models stay "
                f"near +0.5): it ranks them {how}.")

    return _at(phase, None if mean is None else mean < MIN_ORACLE_CORRELATION, "oracle_uncorrelated",
               "Reward model disagrees with the oracle", detail,
               "PPO is optimising a reward the oracle (and so your annotators) would not give. Check that labels are "
               "stored the right way round (first vs second) and that annotators agree (Samples tab), and collect "
               "more labels before the next PPO phase.", start=MIN_CORRELATION_STEPS - 1)


def held_out_oracle_falls(round: int, step: int | None, before: float, after: float, score_rise: float
                          ) -> Finding | None:
    """Across rounds: the new policy's held-out oracle score fell below the last one's while its phase raised the
    reward-model score by `score_rise`."""
    if after > before - ORACLE_DROP or score_rise <= 0:
        return None
    return Finding("oracle_falls", "Reward hacking: the oracle disagrees",
                   f"The held-out oracle score fell from {before:.2f} to {after:.2f} over the round while the "
                   f"reward-model score rose by {score_rise:.2f}.", ORACLE_ADVICE, round, step)


def sampling_findings(phase: Phase) -> list[Finding]:
    """Entropy near zero, responses collapsing to (almost) nothing, or responses that never end."""
    entropy, length, eos = (phase.held(n, high=False) for n in ("entropy", "response_length", "eos_rate"))
    found = [
        _at(phase, None if entropy is None else entropy < ENTROPY_FLOOR, "entropy_floor", "Entropy collapse",
            lambda i: f"The policy's per-token entropy is {entropy[i]:.3f} nats (< {ENTROPY_FLOOR}): it writes nearly "
                      "the same tokens every time.",
            "Samples lose their variety and the reward model sees nothing new. Raise the entropy bonus or β, or "
            "lower the PPO (or GRPO) learning rate (`policy_lr`)."),
        _at(phase, None if length is None else length < MIN_LENGTH, "length_collapse", "Responses collapsed",
            lambda i: f"Responses are {length[i]:.1f} tokens long on average (< {MIN_LENGTH:.0f}).",
            "The policy found a reward in saying nothing. Raise β and check what the reward model scores short "
            "answers."),
        _at(phase, None if eos is None else eos < MIN_EOS_RATE, "never_ending", "Responses never end",
            lambda i: f"Only {eos[i]:.0%} of responses end with EOS (< {MIN_EOS_RATE:.0%}); the rest run into the "
                      "length limit.",
            "Raise the missing-EOS penalty or β, or lengthen responses if the task needs it."),
    ]
    return [f for f in found if f is not None]


def phase_findings(phase: Phase) -> list[Finding]:
    """Every per-phase rule that fires on one PPO/GRPO phase, each at its first step."""
    if not phase.steps:
        return []
    found = [*kl_findings(phase), score_beyond_range(phase), oracle_falls(phase), oracle_uncorrelated(phase),
             *sampling_findings(phase)]
    return [f for f in found if f is not None]


def reward_model_findings(round: int, step: int | None, val_accuracy: float | None, val_pairs: int) -> list[Finding]:
    """A round's reward model validated on too few pairs to say anything, or near chance on enough of them (a count
    in between says nothing either way)."""
    if val_pairs < MIN_VAL_PAIRS:
        accuracy = f" its accuracy of {val_accuracy:.0%} says nothing" if val_accuracy is not None else ""
        return [Finding("validation_too_small", "Reward model validated on too few pairs",
                        f"The reward model was validated on {val_pairs} held-out pair(s) (< "
                        f"{MIN_VAL_PAIRS}):{accuracy}.",
                        "Collect more labels per round (a fifth of them are held out for validation) before trusting "
                        "the reward model.", round, step)]
    if val_pairs < MIN_CHANCE_PAIRS:
        return []
    found = reward_model_near_chance([] if val_accuracy is None else [val_accuracy])
    return [replace(found, round=round, step=step)] if found else []


def check_pair_findings(round: int, agreement: float | None, labels: int, threshold: float) -> list[Finding]:
    """People agreeing with the reward model on too few of its confident check pairs of the round."""
    if agreement is None or labels < MIN_CHECK_LABELS or agreement >= threshold:
        return []
    return [Finding("check_agreement_low", "People disagree with the reward model",
                    f"On round {round}'s check pairs (the policy's samples the reward model ranked most confidently) "
                    f"people agreed with it {agreement:.0%} of the time over {labels} labels (< {threshold:.0%}).",
                    "The reward model rewards what people do not want: the policy may be hacking it. Raise β, collect "
                    "more labels on the policy's newest samples, and read its samples.", round, None)]


def winrate_below_sft(round: int, version: str, rate: float | None, low: float | None, high: float | None,
                      judgements: int, score_rise: float) -> Finding | None:
    """People prefer the SFT policy to version `version` (of round `round`): its win rate's 95% interval `low`-`high`
    below 50% over `judgements` >= MIN_WINRATE_JUDGEMENTS, while its phase raised the reward-model score."""
    if rate is None or judgements < MIN_WINRATE_JUDGEMENTS or high >= 0.5 or score_rise <= 0:
        return None
    return Finding("winrate_below_sft", "People prefer the SFT policy",
                   f"In {judgements} blind judgements people preferred {version}'s answers to the SFT policy's "
                   f"{rate:.0%} of the time (95% interval {low:.0%}-{high:.0%}, below 50%), while its phase raised the "
                   f"reward-model score by {score_rise:.2f}.",
                   "The policy is learning what the reward model gets wrong (reward hacking): read its samples beside "
                   "the SFT policy's (Samples tab), collect labels on its newest samples, raise β, or run fewer PPO "
                   "iterations per round.", round, None)
