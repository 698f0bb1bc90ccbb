"""Plain-words warnings when training curves show a known failure, and the series helpers the charts use.

Pure functions over metric series (sequences of floats in step order); no torch, so the UI process imports this.
Most rules compare the means of a series' four quarters (q1..q4, in step order), which ignores single spikes:

- KL rising without bound: the KL to the reference rose in every quarter, q4 >= 2 x q1, q4 >= 1 nat, and the
  last quarter still rose at least half as fast as the quarters before it (no levelling off);
- entropy collapse: the mean entropy of the last tenth of the run is at most 20% of the first tenth's;
- reward hacking: the reward-model score rose (q4 - q1 > half the series' standard deviation) while the KL grew
  at least 4-fold to 1 nat or more; or, over the last three rounds, the score rose while the oracle score fell;
- reward model near chance: its latest validation accuracy is below 60%.

    findings = diagnose({"ppo/kl": kl, "ppo/entropy": entropy, "ppo/score": score, "reward/val_accuracy": acc})

A GRPO job's series (`grpo/kl`, `grpo/entropy`, `grpo/score`: the same names and units) are read the same way.

Per-phase rules in absolute terms (what a loop checks after each reward-model and PPO/GRPO phase: `phase_findings`,
`reward_model_findings`, `held_out_oracle_falls`, `audit_findings`); each finding names the round and step where it
fired.
A PPO/GRPO rule fires only when its condition held for `WINDOW` consecutive steps, so one odd batch never fires it:

| rule | fires when | why this threshold |
|---|---|---|
| `kl_per_token` | KL to the reference / response length > 0.5 nats per token | the demo's healthy rounds end at 0.12-0.18 while β = 0 with lr 1e-3 passes 0.5 within 2-3 iterations; at 0.5 every token is on average 1.6x likelier under the policy than the reference: it writes something else |
| `kl_growth` | within one phase the KL per token grew 5-fold from the phase's first steps, to 0.3 or more | a KL anchor holds the KL within a small factor during a phase; 5-fold growth to a level that matters means nothing holds it (healthy demo rounds reach 0.12-0.18 from ~0) |
| `score_beyond_range` | normalised reward-model score > 3 | rewards are normalised to mean 0, std 1 on the samples the reward model was fitted to; 3 std above their mean is beyond ~all of them: the reward model is extrapolating |
| `oracle_falls` | the oracle's score fell 0.3 or more (demo oracle units, ~1/3 of its samples' std) below the phase's first steps, or below the previous round's held-out score, while the reward-model score rose | the policy is learning what the reward model gets wrong; a healthy phase moves the oracle up with the score |
| `oracle_uncorrelated` | the correlation between the reward model's and the oracle's scores of each rollout's samples (`oracle_correlation`), averaged over the phase's steps so far, < 0.3 once 5 steps are in | measured at bench scale (`bench/failure_warnings.py`, 16 samples a step): 10 healthy phases (5 seeds, 2 rounds) average +0.39 to +0.69 and their running means from step 5 on stay >= +0.37; labels stored the wrong way round average -0.48 to -0.58, a reward model from 8 labels -0.03 to +0.02, a 50%-noise oracle +0.12, +0.24, +0.24 (fired) and +0.39, +0.44 (those seeds' reward models rank as well as healthy ones, and their policies gained on the held-out oracle as much); one step is noisy (healthy steps spread with std 0.22, one down to -0.22), so no single step decides: 5 steps bring that spread to ~0.1, and 0.3 sits halfway between the healthy and the noisy runs |
| `entropy_floor` | per-token entropy < 0.1 nats | ~0.1 nats means the likeliest token takes ~99% of the mass: sampling is nearly greedy and the samples stop varying |
| `length_collapse` | mean response length < 2 tokens | the policy answers with (almost) nothing: a reward found in ending at once |
| `never_ending` | fewer than 20% of responses end with EOS | the policy runs into the length limit instead of finishing (its scores are then cut texts) |
| `validation_too_small` | fewer than 20 held-out pairs | the accuracy on n pairs has a standard error of ~0.5/sqrt(n): below 20 pairs (±0.22 at 95%) it cannot tell a useful reward model from a coin |
| `reward_model_near_chance` | validation accuracy < 60% on 50 pairs or more | 60% is the whole-job rule's threshold; on fewer than 50 pairs (±0.14 at 95%) a sound round-1 demo reward model often scores 50-56%, so less says too little to warn |
| `audit_agreement_low` | people agree with the reward model on fewer than `audit_min_agreement` (60%) of its confident audit pairs, over 5 labels or more | on the pairs it is surest of, a sound reward model agrees with people far above 60%; below it, it rewards what people do not want |
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Mapping, Sequence

import numpy as np

MIN_POINTS = 8  # shorter series are too noisy to judge
KL_FLOOR = 1.0  # nats: below this a rising KL is no concern yet
KL_GROWTH = 2.0
HACKING_KL_GROWTH = 4.0
ENTROPY_KEPT = 0.2
CHANCE_ACCURACY = 0.6
ORACLE_ROUNDS = 3
# the per-phase rules' thresholds (the table above says why)
WINDOW = 2  # consecutive PPO/GRPO steps a per-phase condition must hold for
KL_PER_TOKEN_MAX = 0.5
KL_PHASE_GROWTH = 5.0
KL_GROWTH_FLOOR = 0.3
SCORE_RANGE = 3.0
ORACLE_DROP = 0.3
ENTROPY_FLOOR = 0.1
MIN_LENGTH = 2.0
MIN_EOS_RATE = 0.2
MIN_VAL_PAIRS = 20
MIN_CHANCE_PAIRS = 50
MIN_AUDIT_LABELS = 5
MIN_ORACLE_CORRELATION = 0.3
MIN_CORRELATION_STEPS = 5


@dataclass(frozen=True)
class Finding:
    """One warning: a stable rule id, a headline, what the numbers show and what to do about it."""

    rule: str
    title: str
    detail: str
    advice: str
    round: int | None = None  # where the rule fired (per-phase rules; None for the whole-job rules)
    step: int | None = None


def quarter_means(values: Sequence[float]) -> np.ndarray:
    """Means of the four consecutive quarters of a series (the first quarters take the remainder)."""
    return np.array([chunk.mean() for chunk in np.array_split(np.asarray(values, dtype=float), 4)])


def kl_runaway(kl: Sequence[float]) -> Finding | None:
    """KL to the reference rising quarter after quarter with no sign of levelling off."""
    if len(kl) < MIN_POINTS:
        return None
    q = quarter_means(kl)
    still_rising = q[3] - q[2] >= 0.5 * (q[3] - q[0]) / 3
    if np.all(np.diff(q) > 0) and q[3] >= KL_GROWTH * max(q[0], 0.0) and q[3] >= KL_FLOOR and still_rising:
        return Finding(
            "kl_runaway", "KL is rising without bound",
            f"The KL divergence to the reference model rose in every quarter of the run, from {q[0]:.2f} to "
            f"{q[3]:.2f} nats on average, and is still climbing.",
            "The policy is drifting away from what the SFT model would write. Raise β (the KL coefficient), set a "
            "target KL for the adaptive controller, or lower the PPO (or GRPO) learning rate (`ppo_lr`).")
    return None


def entropy_collapse(entropy: Sequence[float]) -> Finding | None:
    """The policy's entropy fell to a small fraction of where it started."""
    if len(entropy) < MIN_POINTS:
        return None
    values = np.asarray(entropy, dtype=float)
    tenth = max(1, len(values) // 10)
    start, end = values[:tenth].mean(), values[-tenth:].mean()
    if start > 0 and end <= ENTROPY_KEPT * start:
        return Finding(
            "entropy_collapse", "Entropy collapse",
            f"The policy's per-token entropy fell from {start:.2f} to {end:.2f} nats ({end / start - 1:+.0%}): it "
            "now writes nearly the same tokens every time.",
            "Samples lose their variety and the reward model sees nothing new. Raise the entropy bonus or β, or "
            "lower the PPO (or GRPO) learning rate (`ppo_lr`).")
    return None


def reward_hacking(score: Sequence[float], kl: Sequence[float]) -> Finding | None:
    """The reward-model score climbs while the KL to the reference explodes."""
    if len(score) < MIN_POINTS or len(kl) < MIN_POINTS:
        return None
    s, k = quarter_means(score), quarter_means(kl)
    score_rose = s[3] - s[0] > 0.5 * float(np.std(score))
    kl_exploded = k[3] >= HACKING_KL_GROWTH * max(k[0], 0.0) and k[3] >= KL_FLOOR
    if score_rose and kl_exploded:
        return Finding(
            "reward_hacking", "Possible reward hacking",
            f"The reward-model score rose from {s[0]:.2f} to {s[3]:.2f} while the KL to the reference grew "
            f"{k[3] / max(k[0], 1e-9):.0f}-fold ({k[0]:.2f} → {k[3]:.2f} nats).",
            "The policy may be exploiting the reward model's mistakes rather than getting better: read its samples "
            "in the Samples tab, compare the oracle score if there is one, and raise β.")
    return None


def oracle_disagrees(round_scores: Sequence[float], oracle_scores: Sequence[float]) -> Finding | None:
    """Over the last rounds the reward-model score rose while the oracle (true) score fell."""
    n = min(len(round_scores), len(oracle_scores))
    if n < ORACLE_ROUNDS:
        return None
    score, oracle = list(round_scores)[-ORACLE_ROUNDS:], list(oracle_scores)[-ORACLE_ROUNDS:]
    if score[-1] > score[0] and oracle[-1] < oracle[0]:
        return Finding(
            "oracle_disagrees", "Reward hacking: the oracle disagrees",
            f"Over the last {ORACLE_ROUNDS} rounds the reward-model score rose from {score[0]:.2f} to {score[-1]:.2f} "
            f"while the oracle score fell from {oracle[0]:.2f} to {oracle[-1]:.2f}.",
            "The policy is learning what the reward model gets wrong. Collect more labels on its newest samples "
            "(the disagreement selector helps), raise β, or run fewer PPO iterations per round.")
    return None


def reward_model_near_chance(val_accuracy: Sequence[float]) -> Finding | None:
    """The reward model's latest validation accuracy is hardly better than a coin."""
    if len(val_accuracy) == 0:
        return None
    latest = float(val_accuracy[-1])
    if latest >= CHANCE_ACCURACY:
        return None
    below = latest < 0.45
    return Finding(
        "reward_model_near_chance", "Reward model below chance" if below else "Reward model near chance",
        f"The reward model picks the preferred response of held-out pairs {latest:.0%} of the time; a coin does 50%.",
        ("Check that labels are stored the right way round (first vs second) and that annotators agree. "
         if below else "") + "Collect more labels, check annotator agreement in the Samples tab, or train the "
        "reward model longer before trusting PPO's gains.")


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
             "target KL, or lower the PPO (or GRPO) learning rate (`ppo_lr`)."
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
                         f"deviations above the samples the reward model was trained and normalised on (> {SCORE_RANGE}).",
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
            "lower the PPO (or GRPO) learning rate (`ppo_lr`)."),
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
                        f"The reward model was validated on {val_pairs} held-out pair(s) (< {MIN_VAL_PAIRS}):{accuracy}.",
                        "Collect more labels per round (a fifth of them are held out for validation) before trusting "
                        "the reward model.", round, step)]
    if val_pairs < MIN_CHANCE_PAIRS:
        return []
    found = reward_model_near_chance([] if val_accuracy is None else [val_accuracy])
    return [replace(found, round=round, step=step)] if found else []


def audit_findings(round: int, agreement: float | None, labels: int, threshold: float) -> list[Finding]:
    """People agreeing with the reward model on too few of its confident audit pairs of the round."""
    if agreement is None or labels < MIN_AUDIT_LABELS or agreement >= threshold:
        return []
    return [Finding("audit_agreement_low", "People disagree with the reward model",
                    f"On round {round}'s audit pairs (the policy's samples the reward model ranked most confidently) "
                    f"people agreed with it {agreement:.0%} of the time over {labels} labels (< {threshold:.0%}).",
                    "The reward model rewards what people do not want: the policy may be hacking it. Raise β, collect "
                    "more labels on the policy's newest samples, and read its samples.", round, None)]


def optimiser_prefix(names) -> str:
    """Where the policy optimiser's series are: `grpo/` for a GRPO job's metric names, else `ppo/`."""
    return "grpo/" if any(name.startswith("grpo/") for name in names) else "ppo/"


def diagnose(series: Mapping[str, Sequence[float]]) -> list[Finding]:
    """Every rule that fires on the series given by metric name (`ppo/kl`, `ppo/entropy`, `ppo/score`, or GRPO's
    `grpo/...` of the same names, `reward/val_accuracy`, `round/score`, `round/oracle_score`); missing series are
    skipped."""
    def get(name: str) -> Sequence[float]:
        return series.get(name, [])

    optimiser = optimiser_prefix(series)
    hacking = reward_hacking(get(f"{optimiser}score"), get(f"{optimiser}kl"))
    findings = [
        hacking or kl_runaway(get(f"{optimiser}kl")),  # the hacking warning already tells of the KL
        entropy_collapse(get(f"{optimiser}entropy")),
        oracle_disagrees(get("round/score"), get("round/oracle_score")),
        reward_model_near_chance(get("reward/val_accuracy")),
    ]
    return [f for f in findings if f is not None]


def ema(values: Sequence[float], smoothing: float) -> np.ndarray:
    """Debiased exponential moving average (as TensorBoard): s_t = w s_{t-1} + (1-w) x_t, divided by 1 - w^t."""
    values = np.asarray(values, dtype=float)
    if not 0.0 <= smoothing < 1.0:
        raise ValueError(f"smoothing must be in [0, 1), got {smoothing}")
    if smoothing == 0.0 or len(values) == 0:
        return values.copy()
    out = np.empty_like(values)
    last = 0.0
    for i, x in enumerate(values):
        last = smoothing * last + (1.0 - smoothing) * x
        out[i] = last / (1.0 - smoothing ** (i + 1))
    return out


def downsample(steps: Sequence[float], values: Sequence[float], max_points: int) -> tuple[np.ndarray, np.ndarray]:
    """At most `max_points` points that keep the shape: the first and the last, and the min and max of each of
    (max_points - 2) / 2 equal buckets in between."""
    steps, values = np.asarray(steps), np.asarray(values, dtype=float)
    if len(values) <= max_points:
        return steps, values
    inner = values[1:-1]
    size = math.ceil(len(inner) / ((max_points - 2) // 2))
    buckets = math.ceil(len(inner) / size)
    padded = np.full(buckets * size, np.nan)
    padded[:len(inner)] = inner
    grid = padded.reshape(buckets, size)  # (buckets, size); only the last bucket may hold NaN padding
    offsets = np.arange(buckets) * size + 1
    keep = np.concatenate([[0, len(values) - 1], offsets + np.nanargmin(grid, axis=1), offsets + np.nanargmax(grid, axis=1)])
    index = np.unique(keep)
    return steps[index], values[index]
