"""Leaderboard tab: do people prefer the new policy? Each version's blind win rate against the SFT policy (win / tie /
loss, the Wilson 95% interval, the length-controlled win rate) and a leaderboard of Bradley-Terry strengths of
every version from all win-rate judgements, with bootstrap intervals; API `/leaderboard`.

The figures come from `labeling.versions.winrate.winrate_report`, read from the store's labels whenever the tab opens,
so they follow the labels as they arrive. Version names and numbers are the only things shown: nothing user-written.
"""

from __future__ import annotations

import html
from dataclasses import asdict, dataclass

import gradio as gr

from app.context import Refresh, Studio, View, bind
from app.versions import export_panel
from app.versions.function_scores import function_scores_html
from labeling.judges.judge_winrate import JudgeWinRate, judges_against_sft
from labeling.versions.winrate import Standing, WinrateReport, winrate_report
from storage.generations import function_scores
from storage.winrate import winrate_judgements
from trainers.loop.job_summary import who_judged

TITLE = "Leaderboard"

CSS = """
table.board { border-collapse: collapse; width: 100%; font-size: 14px; }
table.board th, table.board td { border: 1px solid #e5e7eb; padding: 6px 8px; text-align: left;
                                 vertical-align: middle; }
table.board th { background: #f9fafb; font-weight: 600; }
table.board td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.board .none { color: #9ca3af; font-style: italic; }
.ci { position: relative; height: 14px; min-width: 160px; background: #f3f4f6; border-radius: 3px; }
.ci .span { position: absolute; top: 3px; height: 8px; background: #93c5fd; border-radius: 2px; }
.ci .point { position: absolute; top: 0; width: 3px; height: 14px; margin-left: -1px; background: #1d4ed8; }
.ci .half { position: absolute; top: 0; left: 50%; width: 1px; height: 14px; background: #6b7280; }
.board-note { color: #6b7280; font-size: 13px; margin-top: 6px; }
"""


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.0%}"


def _interval(low: float | None, high: float | None) -> str:
    return "" if low is None else f"[{low:.0%}, {high:.0%}]"


def interval_bar(rate: float | None, low: float | None, high: float | None) -> str:
    """A 0-100% bar: the 95% interval shaded, the estimate marked, 50% (as good as the SFT policy) as a line."""
    if rate is None:
        return '<span class="none">no judgements yet</span>'
    return (f'<div class="ci" title="{rate:.1%} [{low:.1%}, {high:.1%}]"><div class="span" style="left:{low:.2%};'
            f'width:{high - low:.2%}"></div><div class="half"></div><div class="point" style="left:{rate:.2%}"></div>'
            "</div>")


def _row(cells: list[str]) -> str:
    return "<tr>" + "".join(cells) + "</tr>"


def _judge_cell(figures: list[JudgeWinRate]) -> str:
    return ('<td class="num judge">' + ("<br>".join(html.escape(f.label()) for f in figures) or "—") + "</td>")


def versions_html(report: WinrateReport, judges: dict[int, list[JudgeWinRate]] | None = None) -> str:
    """One row per version after the SFT policy: its judgements against it and the win rates with their intervals;
    with `judges` (policy id -> judge models' win rates against the SFT policy), a last column of those, apart."""
    judges = judges or {}
    if not report.versions:
        return ('<p class="none">No policy version after the SFT policy yet: each round of the loop registers one, '
                "and its blind win-rate pairs join the label queue.</p>")
    head = "".join(f"<th>{h}</th>" for h in ("Version", "Round", "Judgements", "Wins / ties / losses",
                                             "Win rate vs SFT [95% CI]", "0 – 50% – 100%",
                                             "Length-controlled [95% CI]")
                   + (("Judge models vs SFT [95% CI] (never pooled)",) if judges else ()))
    rows = [_row([f"<td>{html.escape(v.name)}</td>", f'<td class="num">{v.round}</td>',
                  f'<td class="num">{v.judgements}</td>', f'<td class="num">{v.wins} / {v.ties} / {v.losses}</td>',
                  f'<td class="num">{_pct(v.rate)} {_interval(v.low, v.high)}</td>',
                  f"<td>{interval_bar(v.rate, v.low, v.high)}</td>",
                  f'<td class="num">{_pct(v.lc_rate)} {_interval(v.lc_low, v.lc_high)}</td>']
                 + ([_judge_cell(judges.get(v.policy_id, []))] if judges else []))
            for v in report.versions]
    judged = ("<i>Judge models</i>: a judge model's own verdicts on the same pairs (both orders, "
              "<code>label --annotator judge</code>), shown beside the judgements above and never counted in them. "
              if judges else "")
    return (f'<table class="board" id="winrate-versions"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody>'
            '</table><p class="board-note">Each version\'s evaluation samples on held-out prompts against the SFT '
            "policy's, judged blind in the label queue (a tie or <i>both bad</i> counts half). Wilson 95% intervals. "
            "<i>Length-controlled</i>: the win rate at equal answer lengths (a Bradley-Terry fit with the length "
            "difference as a covariate, as Chatbot Arena's style control); far below the win rate, the version wins "
            f"by writing longer. {judged}</p>")


def _strength(standing: Standing) -> str:
    if standing.strength is None:
        return '<td class="num none">no judgements</td>'
    if standing.anchor:
        return '<td class="num">0 (the SFT policy)</td>'
    bounds = "" if standing.low is None else f" [{standing.low:+.2f}, {standing.high:+.2f}]"
    return f'<td class="num">{standing.strength:+.2f}{bounds}</td>'


def leaderboard_html(report: WinrateReport) -> str:
    """The versions ranked by Bradley-Terry strength (the SFT policy at 0), with bootstrap intervals."""
    if not report.leaderboard:
        return '<p class="none">No policy version yet.</p>'
    head = "".join(f"<th>{h}</th>" for h in ("Rank", "Version", "Round", "Strength (logits) [95% CI]",
                                             "P(preferred to SFT)", "Judgements"))
    rows = [_row([f'<td class="num">{s.rank or "—"}</td>', f"<td>{html.escape(s.name)}</td>",
                  f'<td class="num">{s.round}</td>', _strength(s), f'<td class="num">{_pct(s.beats_sft)}</td>',
                  f'<td class="num">{s.judgements}</td>']) for s in report.leaderboard]
    return (f'<table class="board" id="winrate-leaderboard"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}'
            f'</tbody></table><p class="board-note">Bradley-Terry strengths from all {report.judgements} win-rate '
            "judgements (P(a preferred to b) = σ(strength a − strength b)), the SFT policy fixed at 0; 95% intervals "
            "from bootstrap resamples of the judgements.</p>")


# ---- the public API -----------------------------------------------------------------------------------------------

def api_leaderboard(studio: Studio, request: gr.Request = None) -> dict:
    """Every version's win rate against the SFT policy and the leaderboard: {versions: [{policy_id, name, round,
    judgements, wins, ties, losses, rate, low, high, lc_rate, lc_low, lc_high, length_coef}], leaderboard: [{rank,
    policy_id, name, round, strength, low, high, beats_sft, judgements}], judgements, functions: [{policy_id, <reward
    function label>: its mean on the version's held-out samples}], judges: [{judge, policy_id, wins, ties, losses, n,
    rate, low, high}] (a judge model's win rate of a version against the SFT policy: never pooled with `versions`)}."""
    studio.annotator(request, None)
    report = winrate_report(studio.store)
    functions = [{"policy_id": policy_id, **{label: mean for label, (mean, _) in by_label.items()}}
                 for policy_id, by_label in function_scores(studio.store).items()]
    judges = [{"judge": f.judge, "policy_id": f.policy_id, **asdict(f.rate)}
              for figures in judges_against_sft(studio.store).values() for f in figures]
    return {"versions": [asdict(v) for v in report.versions], "leaderboard": [asdict(s) for s in report.leaderboard],
            "judgements": report.judgements, "functions": functions, "judges": judges}


# ---- the screen ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LeaderboardLayout:
    """The Leaderboard tab's components."""

    refresh: gr.Button
    versions: gr.HTML
    board: gr.HTML
    functions: gr.HTML
    export: export_panel.ExportLayout


def layout() -> LeaderboardLayout:
    with gr.Column(elem_id="leaderboard-tab"):
        gr.Markdown("Is the new policy preferred? Blind **win-rate pairs** (a version's answer to a held-out "
                    "prompt against the SFT policy's) are spread through the label queue; their labels never train "
                    "the reward model. Reward curves say what the reward model thinks; this is what the judges "
                    "(people, the oracle annotator or a judge model: the note under the win rates names them) think.")
        refresh = gr.Button("↻ Refresh", size="sm")
        gr.Markdown("### Win rate against the SFT policy")
        versions = gr.HTML(css_template=CSS, elem_id="leaderboard-versions")
        gr.Markdown("### Leaderboard of versions")
        board = gr.HTML(css_template=CSS, elem_id="leaderboard-board")
        gr.Markdown("### Reward functions on held-out prompts")
        functions = gr.HTML(css_template=CSS, elem_id="leaderboard-functions")
        export = export_panel.layout()
    return LeaderboardLayout(refresh, versions, board, functions, export)


@dataclass(frozen=True)
class Board(View):
    versions: str
    board: str
    functions: str


def show_leaderboard(studio: Studio) -> Board:
    report = winrate_report(studio.store)
    versions = versions_html(report, judges_against_sft(studio.store))
    return Board(judges_html(studio) + versions, leaderboard_html(report), function_scores_html(studio.store))


def judges_html(studio: Studio) -> str:
    """Who gave the win-rate judgements: people, the oracle annotator or both (the figures are theirs)."""
    judges = [j.annotator for j in winrate_judgements(studio.store)]
    if not judges:
        return ""
    return (f'<p class="board-note" id="winrate-judges">Judged by {html.escape(who_judged(judges))}: '
            f"{len(judges)} judgements.</p>")


def build(studio: Studio) -> list[Refresh]:
    gr.api(bind(api_leaderboard, studio), api_name="leaderboard")
    ui = layout()
    ui.refresh.click(bind(show_leaderboard, studio), None, Board.components(ui), api_visibility="private")
    ui.refresh.click(bind(export_panel.show_exports, studio), None, [ui.export.version, ui.export.state],
                     api_visibility="private")
    return [Refresh(bind(show_leaderboard, studio), [], Board.components(ui)), *export_panel.build(studio, ui.export)]

