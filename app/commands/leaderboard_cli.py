"""`python app.py leaderboard`: each policy version's blind win rate against the SFT policy and the leaderboard of
versions (Bradley-Terry strengths with bootstrap intervals), then each judge model's own win rates on the same pairs
(never pooled with people's), printed, and with `--csv FILE` written as a CSV file
(one row per version, leaderboard order; text cells made safe for spreadsheets as the audit export's are).

    python app.py leaderboard --db studio.db
    python app.py leaderboard --db studio.db --csv leaderboard.csv
"""

from __future__ import annotations

import argparse
from pathlib import Path

from app.audit import check_csv_path, write_csv
from app.versions.function_scores import function_score_lines
from labeling.judges.judge_winrate import judge_winrate_lines
from labeling.versions.winrate import WinrateReport, winrate_report
from storage import Store
from storage.errors import InvalidInput

CSV_HEADERS = ["rank", "version", "policy_id", "round", "strength", "strength_low", "strength_high", "beats_sft",
               "judgements", "vs_sft_judgements", "wins", "ties", "losses", "win_rate", "win_rate_low",
               "win_rate_high", "lc_win_rate", "lc_win_rate_low", "lc_win_rate_high"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", default="studio.db", help="store file to read the judgements from")
    parser.add_argument("--csv", default=None, metavar="FILE", help="also write the leaderboard to this .csv file")


def report_lines(report: WinrateReport) -> list[str]:
    """The win rates against the SFT policy, one line per version, then the leaderboard, one line per version."""
    if not report.leaderboard:
        return ["no policy version yet"]
    lines = ["win rate against the SFT policy (blind pairs; ties count half; 95% Wilson interval):"]
    lines += [f"  {v.line()}" for v in report.versions] or ["  no version after the SFT policy yet"]
    lines.append(f"leaderboard (Bradley-Terry strength in logits, SFT = 0, 95% bootstrap interval; "
                 f"{report.judgements} judgements):")
    for s in report.leaderboard:
        if s.strength is None:
            lines.append(f"  -  {s.name}: no judgements yet")
            continue
        bounds = "" if s.low is None or s.anchor else f" [{s.low:+.2f}, {s.high:+.2f}]"
        what = "the SFT policy" if s.anchor else f"P(preferred to SFT) {s.beats_sft:.0%}"
        lines.append(f"  {s.rank}. {s.name}: strength {s.strength:+.2f}{bounds}, {what}, "
                     f"{s.judgements} judgements")
    return lines


def judge_lines(store: Store) -> list[str]:
    """Each judge model's win rates on the win-rate pairs, under a heading; nothing when no judge answered one."""
    lines = judge_winrate_lines(store)
    return ["judge models on the same pairs (their own verdicts, never pooled with the judgements above):", *lines] \
        if lines else []


def csv_rows(report: WinrateReport) -> list[list]:
    """One row per version in leaderboard order: its standing, then its figures against the SFT policy."""
    figures = {v.policy_id: v for v in report.versions}
    rows = []
    for s in report.leaderboard:
        v = figures.get(s.policy_id)
        against = [None] * 10 if v is None else [v.judgements, v.wins, v.ties, v.losses, v.rate, v.low, v.high,
                                                 v.lc_rate, v.lc_low, v.lc_high]
        rows.append([s.rank, s.name, s.policy_id, s.round, s.strength, s.low, s.high, s.beats_sft, s.judgements,
                     *against])
    return rows


def run(args: argparse.Namespace) -> int:
    if args.csv is not None:
        check_csv_path(args.csv, "leaderboard file", "--csv")
    if not Path(args.db).is_file():
        raise InvalidInput(f"store {args.db} does not exist; pass the --db of a studio")
    store = Store(args.db)
    report = winrate_report(store)
    print("\n".join(report_lines(report) + judge_lines(store) + function_score_lines(store)))
    if args.csv is not None:
        write_csv(Path(args.csv), CSV_HEADERS, csv_rows(report))
        print(f"wrote {len(report.leaderboard)} versions to {args.csv}")
    return 0
