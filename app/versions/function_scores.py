"""Each policy version's reward functions on its held-out evaluation samples (for `math_answer`: its accuracy), as
`status` and `leaderboard` print them and the Leaderboard tab shows them beside the win rates
(`trainers.loop.function_evaluation` scores the samples)."""

from __future__ import annotations

import html

from labeling.versions.winrate import version_names
from storage import Store
from storage.generations import function_scores
from storage.policies import list_policies


def function_score_lines(store: Store) -> list[str]:
    """One line per version with scores: `v2: math_answer 41.0% (32 samples), length 0.92`; none when no version
    was evaluated with reward functions."""
    scores = function_scores(store)
    if not scores:
        return []
    names = version_names(list_policies(store))
    lines = ["reward functions on the held-out evaluation samples (mean; math_answer: accuracy):"]
    for policy_id, by_label in scores.items():
        figures = ", ".join(f"{label} {_figure(label, mean)} ({count} samples)"
                            for label, (mean, count) in by_label.items())
        lines.append(f"  {names.get(policy_id, policy_id)}: {figures}")
    return lines


def function_scores_html(store: Store) -> str:
    """The same figures as a table (versions as rows, functions as columns); an explanation when there are none."""
    scores = function_scores(store)
    if not scores:
        return ("<p>No version was evaluated with reward functions: a loop whose reward holds them scores each "
                "version's held-out samples (docs/rewards.md).</p>")
    labels = list(dict.fromkeys(label for by_label in scores.values() for label in by_label))
    names = version_names(list_policies(store))
    head = "".join(f"<th>{html.escape(label)}</th>" for label in labels)
    rows = []
    for policy_id, by_label in scores.items():
        cells = "".join(f"<td>{_figure(label, by_label[label][0])}</td>" if label in by_label else "<td>—</td>"
                        for label in labels)
        rows.append(f"<tr><td>{html.escape(str(names.get(policy_id, policy_id)))}</td>{cells}</tr>")
    return f"<table><tr><th>version</th>{head}</tr>{''.join(rows)}</table>"


def _figure(label: str, mean: float) -> str:
    return f"{mean:.1%}" if label == "math_answer" else f"{mean:.3g}"
