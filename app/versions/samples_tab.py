"""Samples tab: the held-out samples of every policy version side by side with their reward-model and oracle
scores, and the annotator view (volume, agreement, Cohen's kappa, and how the reward model agrees with each).

Prompts (a conversation as role-labelled turns) and samples are markdown rendered by `app.render`, which lets
nothing in them run or load; the "Plain text" toggle shows them as they are. Annotator names are escaped.
"""

from __future__ import annotations

import html
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from statistics import mean

import gradio as gr

from app.context import Refresh, Studio, View, bind
from app.render import TEXT_SCOPE, plain_text_toggle, text_html
from labeling.stats.agreement import agreement_summary, annotator_stats
from labeling.transfer.conversations import Message
from labeling.versions.winrate import version_names
from storage.generations import eval_samples
from storage.metrics import read_metrics
from storage.policies import list_policies
from storage.prompts import list_prompts
from storage.reward_models import latest_reward_models
from storage.types import Policy
from storage.votes import current_votes

TITLE = "Samples"
ALL_PROMPTS = ""
MAX_PROMPTS = 20  # rows shown when every prompt is listed
RM_AGREEMENT = "/rm_agreement"  # metric `annotator/<name>/rm_agreement`, written by trainers.loop.annotator_agreement

CSS = """
.samples-wrap { overflow-x: auto; }
table.samples { border-collapse: collapse; width: 100%; font-size: 14px; table-layout: fixed; }
table.samples th, table.samples td { border: 1px solid #e5e7eb; padding: 8px; vertical-align: top; text-align: left; }
table.samples th { background: #f9fafb; font-weight: 600; }
table.samples th .means, table.samples td .scores { display: block; font-weight: normal; font-size: 12px;
                                                    color: #6b7280; }
table.samples td.prompt { background: #f9fafb; font-weight: 500; width: 16%; }
table.samples .sample { margin-bottom: 8px; }
table.samples .sample-text { max-height: 24rem; overflow: auto; }
table.samples .sample:last-child { margin-bottom: 0; }
table.samples .none { color: #9ca3af; font-style: italic; }
.samples-note { color: #6b7280; font-size: 13px; margin-top: 6px; }
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _fmt(value: float | None, pattern: str = "{:+.2f}") -> str:
    return "—" if value is None else pattern.format(value)


def _scores(sample: dict) -> str:
    parts = [f"reward {_fmt(sample.get('reward'))}" if "reward" in sample else None,
             f"oracle {_fmt(sample.get('oracle'), '{:.2f}')}" if "oracle" in sample else None]
    return " · ".join(p for p in parts if p) or "not scored"


def _policy_header(policy: Policy, version: str, samples: list[dict]) -> str:
    """A version's column head: `v3 · store round 3` (the store's round that made it), or `v0 · SFT policy`."""
    name = "SFT policy" if policy.round == 0 and policy.parent_id is None else f"store round {policy.round}"
    means = []
    for key, pattern in (("reward", "{:+.2f}"), ("oracle", "{:.2f}")):
        values = [s[key] for s in samples if key in s]
        if values:
            means.append(f"mean {key} {pattern.format(mean(values))}")
    detail = " · ".join(means) if samples else "no held-out samples yet"
    return (f'<th data-policy="{policy.id}">{_e(version)} · {_e(name)}'
            f'<span class="means">{_e(detail)}</span></th>')


def samples_html(samples: list[dict], policies: list[Policy], prompt: str = ALL_PROMPTS,
                 conversations: Mapping[str, list[Message]] | None = None) -> str:
    """A table: one row per held-out prompt, one column per policy version, each cell that version's samples.
    `conversations` maps a prompt's text to its turns, for prompts that are conversations."""
    if not policies:
        return '<p class="none">No policy version yet.</p>'
    prompts = list(dict.fromkeys(s["prompt"] for s in samples))
    if prompt:
        prompts = [p for p in prompts if p == prompt]
    shown = prompts[:MAX_PROMPTS]
    cells: dict[tuple[str, int], list[dict]] = defaultdict(list)
    by_policy: dict[int, list[dict]] = defaultdict(list)
    for s in samples:
        if s["prompt"] in shown:
            cells[(s["prompt"], s["policy_id"])].append(s)
            by_policy[s["policy_id"]].append(s)
    names = version_names(policies)
    head = "".join(_policy_header(p, names[p.id], by_policy[p.id]) for p in policies)
    rows = []
    for text in shown:
        row = [f'<td class="prompt">{text_html((conversations or {}).get(text, text))}</td>']
        for p in policies:
            found = cells[(text, p.id)]
            row.append("<td>" + ("".join(f'<div class="sample"><div class="sample-text">{text_html(s["text"])}</div>'
                                         f'<span class="scores">{_e(_scores(s))}</span></div>' for s in found)
                                 or '<span class="none">no sample</span>') + "</td>")
        rows.append("<tr>" + "".join(row) + "</tr>")
    if not shown:
        rows.append(f'<tr><td colspan="{len(policies) + 1}" class="none">No held-out samples yet: each round of the '
                    'loop samples the held-out prompts with its new policy.</td></tr>')
    note = (f'<p class="samples-note">Showing {len(shown)} of {len(prompts)} prompts; choose one above to see it.</p>'
            if len(prompts) > len(shown) else "")
    return (f'<div class="samples-wrap"><table class="samples"><thead><tr><th>Held-out prompt</th>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div>{note}')


def rm_agreement_by_annotator(studio: Studio) -> dict[str, float]:
    """The newest reward model's agreement with each annotator, as the worker stored it (empty when not computed)."""
    members = latest_reward_models(studio.store)
    if not members or members[0].job_id is None:
        return {}
    latest: dict[str, float] = {}
    for row in read_metrics(studio.store, members[0].job_id, prefix="annotator/"):
        if row["name"].endswith(RM_AGREEMENT):
            latest[row["name"][len("annotator/"):-len(RM_AGREEMENT)]] = row["value"]  # rows come in step order
    return latest


def annotators_html(studio: Studio) -> str:
    votes = current_votes(studio.store)
    stats = annotator_stats(votes)
    if not stats:
        return '<p class="none">No labels yet.</p>'
    rm = rm_agreement_by_annotator(studio)
    overall = agreement_summary(votes)
    labels = sum(s.labels for s in stats)
    people = f"{len(stats)} annotator{'s' * (len(stats) != 1)} · {labels:,} label{'s' * (labels != 1)}"
    if overall.comparisons:
        summary = (f"{people} · agreement {_fmt(overall.percent, '{:.0%}')} over {overall.comparisons:,} rating pairs "
                   f"on {overall.pairs:,} shared pairs · Light's κ {_fmt(overall.kappa, '{:.2f}')}")
    else:
        summary = f"{people} · no pair labeled by two annotators yet, so no agreement to measure"
    rows = []
    for s in stats:
        seconds = None if s.median_decision_ms is None else s.median_decision_ms / 1000
        cells = [s.annotator, f"{s.labels:,}", f"{s.skips:,}", _fmt(s.tie_rate, "{:.0%}"),
                 _fmt(s.both_bad_rate, "{:.0%}"), _fmt(s.left_rate, "{:.0%}"), _fmt(seconds, "{:.1f} s"),
                 f"{_fmt(s.agreement.percent, '{:.0%}')} on {s.agreement.pairs:,}", _fmt(s.agreement.kappa, "{:.2f}"),
                 _fmt(rm.get(s.annotator), "{:.0%}")]
        rows.append("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in cells) + "</tr>")
    head = "".join(f"<th>{h}</th>" for h in ("Annotator", "Labels", "Skips", "Ties", "Both bad", "Left side wins",
                                             "Median time", "Agreement with others (pairs)", "Cohen's κ",
                                             "Reward model agrees"))
    return (f'<p>{_e(summary)}</p><div class="samples-wrap"><table class="samples"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div><p class="samples-note">Agreement and κ compare each '
            "annotator with everyone else on the pairs they share (ties and both-bad are classes of their own; skips "
            "are left out). <i>Left side wins</i> far from 50% hints at position bias. <i>Reward model agrees</i>: how "
            "often the newest reward model prefers the response the annotator chose (most of these labels trained "
            "it).</p>")


def prompt_choices(samples: list[dict]) -> list[tuple[str, str]]:
    prompts = dict.fromkeys(s["prompt"] for s in samples)
    return [("All held-out prompts", ALL_PROMPTS)] + [(p if len(p) <= 80 else p[:77] + "…", p) for p in prompts]


@dataclass(frozen=True)
class SamplesLayout:
    """The Samples tab's components."""

    prompt: gr.Dropdown
    refresh: gr.Button
    table: gr.HTML
    annotators: gr.HTML


def layout() -> SamplesLayout:
    with gr.Column(elem_id="samples-tab", elem_classes=[TEXT_SCOPE]):
        gr.Markdown("The same held-out prompts answered by every policy version, so you can see how the behaviour "
                    "changed round by round. Scores: the reward model's (normalised; each version scored by the "
                    "reward model of its round) and the oracle's, where one exists.")
        with gr.Row():
            prompt = gr.Dropdown(label="Held-out prompt", choices=[("All held-out prompts", ALL_PROMPTS)],
                                 value=ALL_PROMPTS, scale=4)
            with gr.Column(scale=1, min_width=160):
                refresh = gr.Button("↻ Refresh", size="sm")
                plain_text_toggle("samples-plain")
        table = gr.HTML(css_template=CSS, elem_id="samples-table")
        gr.Markdown("### Annotators")
        annotators = gr.HTML(css_template=CSS, elem_id="samples-annotators")
    return SamplesLayout(prompt, refresh, table, annotators)


@dataclass(frozen=True)
class Samples(View):
    """The held-out prompts to choose from, the samples table and the annotators table."""

    prompt: gr.Dropdown
    table: str
    annotators: str


def show_samples(studio: Studio, chosen: str) -> Samples:
    """Every policy version's samples of the chosen held-out prompt (all prompts when it is gone or empty)."""
    samples = eval_samples(studio.store)
    choices = prompt_choices(samples)
    chosen = chosen if chosen in {value for _, value in choices} else ALL_PROMPTS
    conversations = {p.text: p.messages for p in list_prompts(studio.store, heldout=True) if p.messages is not None}
    return Samples(gr.Dropdown(choices=choices, value=chosen),
                   samples_html(samples, list_policies(studio.store), chosen, conversations), annotators_html(studio))


def build(studio: Studio) -> list[Refresh]:
    ui = layout()
    shown = Samples.components(ui)
    ui.prompt.input(bind(show_samples, studio), ui.prompt, shown, api_visibility="private")
    ui.refresh.click(bind(show_samples, studio), ui.prompt, shown, api_visibility="private")
    return [Refresh(bind(show_samples, studio), [ui.prompt], shown)]
