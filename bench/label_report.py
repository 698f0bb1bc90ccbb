"""The tables of bench/label_efficiency.py: per arm and budget the mean gain with its 95% t-interval, its share of
the oracle's gain and its paired differences to the arms every other is compared with; the labels an arm needs to
reach a share of the oracle's gain, which arm wins at each budget, and the plot of gain against labels and against
annotator minutes."""

from __future__ import annotations

import statistics
from pathlib import Path

from bench.common import interval
from bench.label_arms import ARM_NAMES, ARMS, NO_LABELS


def paired(rows: list[dict], arm: str, labels: int, versus: str, versus_labels: int) -> tuple[float, float, int] | None:
    """Mean and 95% half-width of `arm`'s gain minus `versus`'s on the seeds both ran, and how many (None: none)."""
    mine = {r["seed"]: r["gain"] for r in rows if (r["arm"], r["labels"]) == (arm, labels)}
    theirs = {r["seed"]: r["gain"] for r in rows if (r["arm"], r["labels"]) == (versus, versus_labels)}
    seeds = sorted(set(mine) & set(theirs))
    return (*interval([mine[s] - theirs[s] for s in seeds]), len(seeds)) if seeds else None


VERSUS = ("random", "grpo", "dpo")  # the arms every other is compared with, seed by seed, at the same budget


def summarise(rows: list[dict]) -> list[dict]:
    """Per (arm, budget): mean gain with its 95% interval, share of the oracle's mean gain, paired differences."""
    oracle_gains = [r["gain"] for r in rows if r["arm"] == "oracle"]
    ceiling = statistics.fmean(oracle_gains) if oracle_gains else None
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["arm"], r["labels"]), []).append(r)
    table = []
    for (arm, labels), group in sorted(groups.items(), key=lambda kv: (ARMS.index(kv[0][0]), kv[0][1])):
        gain, half = interval([r["gain"] for r in group])
        rate, rate_half = interval([r["win_rate"] for r in group])
        judged = [r["loop_win_rate"] for r in group if r.get("loop_win_rate") is not None]
        table.append({"arm": arm, "labels": labels, "seeds": len(group), "gain": gain, "gain_ci95": half,
                      "win_rate": rate, "win_rate_ci95": rate_half,
                      "loop_win_rate": interval(judged) if judged else None,
                      "of_oracle": gain / ceiling if ceiling else float("nan"),
                      "vs_oracle": paired(rows, arm, labels, "oracle", 0) if arm != "oracle" else None,
                      **{f"vs_{other}": paired(rows, arm, labels, other, labels) if arm not in ("oracle", other)
                         else None for other in VERSUS},
                      "labels_used": statistics.fmean(r["labels_used"] for r in group),
                      "demonstrations": statistics.fmean(r.get("demonstrations", 0) for r in group),
                      "preferences": statistics.fmean(r.get("preferences", 0) for r in group),
                      "answers_read": statistics.fmean(r.get("answers_read", 2 * r["labels_used"]) for r in group),
                      **{name: statistics.fmean(r.get(name, float("nan")) for r in group)
                         for name in ("seconds", "reward_seconds", "policy_seconds", "select_seconds")}})
    return table


def labels_to_reach(table: list[dict], arm: str, share: float) -> str:
    """The labels at which `arm`'s mean gain reaches `share` of the oracle's, interpolated linearly between the two
    budgets around the first crossing ("≤ B" when the smallest budget B already reaches it; "not reached" with the
    best share otherwise)."""
    points = sorted((t["labels"], t["of_oracle"]) for t in table if t["arm"] == arm)
    if not points:
        return "—"
    if points[0][1] >= share:
        return f"≤ {points[0][0]}"
    for (low, low_share), (high, high_share) in zip(points, points[1:], strict=False):
        if high_share >= share:
            return f"{low + (high - low) * (share - low_share) / (high_share - low_share):.0f}"
    return f"not reached (best {max(s for _, s in points):.0%})"


def plot(table: list[dict], path: Path, seconds_per_label: float) -> None:
    """Gain against labels (left) and against annotator minutes (right), the oracle's gain and 90% of it as lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    budgets = sorted({t["labels"] for t in table if t["arm"] not in NO_LABELS})
    minutes = f"annotator minutes ({seconds_per_label:g} s a label)"
    for axis, scale, unit in ((axes[0], 1.0, "labels used (all rounds)"), (axes[1], seconds_per_label / 60, minutes)):
        for oracle in (t for t in table if t["arm"] == "oracle"):
            axis.axhline(oracle["gain"], color="black", label="oracle PPO (no labels)")
            axis.axhspan(oracle["gain"] - oracle["gain_ci95"], oracle["gain"] + oracle["gain_ci95"], color="black",
                         alpha=0.08)
            axis.axhline(0.9 * oracle["gain"], color="black", linestyle=":", label="90% of oracle PPO")
        for arm in (a for a in ARMS[1:] if a not in NO_LABELS):
            points = [t for t in table if t["arm"] == arm]
            if points:
                axis.errorbar([t["labels"] * scale for t in points], [t["gain"] for t in points],
                              [t["gain_ci95"] for t in points], marker="o", capsize=3, label=ARM_NAMES[arm])
        if budgets:
            axis.set_xscale("log")
            axis.set_xticks([b * scale for b in budgets], [f"{round(b * scale, 1):g}" for b in budgets])
            axis.minorticks_off()
        axis.set(xlabel=unit)
        axis.grid(alpha=0.3)
    axes[0].set(ylabel="held-out oracle score gain over SFT (95% CI)")
    axes[0].legend()
    fig.suptitle("Label efficiency of the preference loop (demo): reward model + PPO or GRPO, or DPO")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def difference(value: tuple[float, float, int] | None) -> str:
    return "—" if value is None else f"{value[0]:+.3f} ± {value[1]:.3f}"


def winners(table: list[dict]) -> list[str]:
    """Per budget: the arms of VERSUS (and dpo_ties) by mean gain, the best one's paired lead over each other and
    whether its 95% interval excludes 0."""
    lines = []
    for labels in sorted({t["labels"] for t in table if t["arm"] not in NO_LABELS}):
        contenders = sorted((t for t in table if t["labels"] == labels and t["arm"] in (*VERSUS, "dpo_ties")),
                            key=lambda t: -t["gain"])
        if len(contenders) < 2:
            continue
        best, leads = contenders[0], []
        for other in contenders[1:]:
            lead = paired_lead(table, best, other["arm"])
            if lead is not None:
                sure = "clear" if lead[0] - lead[1] > 0 else "within noise"
                leads.append(f"{ARM_NAMES[other['arm']]} by {lead[0]:+.3f} ± {lead[1]:.3f} ({sure})")
        lines.append(f"at {labels} labels: {ARM_NAMES[best['arm']]} wins (gain {best['gain']:+.3f}), ahead of "
                     + "; ".join(leads))
    return lines


def sft_variant_lines(rows: list[dict], table: list[dict]) -> list[str]:
    """A table of the sft_prefs and sft_each_round arms' paired gain over the sft arm at the same budget (none when
    neither ran beside it)."""
    lines = []
    for t in (t for t in table if t["arm"] in ("sft_prefs", "sft_each_round")):
        versus = paired(rows, t["arm"], t["labels"], "sft", t["labels"])
        if versus is not None:
            lines.append(f"| {ARM_NAMES[t['arm']]} | {t['labels']} | {t['demonstrations']:.0f} | "
                         f"{t['preferences']:.0f} | "
                         f"{t['gain']:+.3f} ± {t['gain_ci95']:.3f} | {difference(versus)} | {versus[2]} |")
    header = ["", "| arm | label budget | demonstrations | their preferences | gain | minus sft (paired) | seeds |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    return header + lines if lines else []


def paired_lead(table: list[dict], best: dict, other: str) -> tuple[float, float, int] | None:
    """`best`'s paired gain minus `other`'s at the same budget (from either side of the stored comparison)."""
    if best.get(f"vs_{other}") is not None:
        return best[f"vs_{other}"]
    mirrored = next((t.get(f"vs_{best['arm']}") for t in table if (t["arm"], t["labels"]) == (other, best["labels"])),
                    None)
    return None if mirrored is None else (-mirrored[0], mirrored[1], mirrored[2])

