"""How a round's cost grows with the store: the headless loop on the demo, rounds of the same number of oracle labels
(`label_decay` 1), each phase's seconds per round, with the reward model trained incrementally (the previous round's
model continued on the round's new labels plus `reward_replay` older ones) and in full (every label, every round: the
loop's default). The figure is the reward phase's growth: its seconds in the last round over the first round's
(target: 10 rounds, at most 1.2x).

Quality beside it, paired by seed: each round's reward validation accuracy as the loop reports it (incremental: on
the lineage's held-out set), the final reward model's accuracy on every decided label of its store whose pair its
lineage never trained on (full: the final model alone, retrained from the base; incremental: every model of the
run), and the loop's oracle gain (held-out oracle score of the final policy minus the SFT policy's, from
`round/oracle_score`). Each run works on its own copy of a demo-seeded store under bench/out/label_efficiency/; one
process, one torch thread by default. Prints the tables and writes bench/out/<name>.json.

    python bench/round_cost.py                                        # 10 rounds x 100 labels, both modes, seed 0
    python bench/round_cost.py --rounds 5 --seeds 0 1                 # shorter, two seeds for the paired quality
    python bench/round_cost.py --modes incremental_patience --name round_cost_patience \
        --results bench/out/round_cost.json                           # a variant beside an earlier run's tables
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import interval  # noqa: E402
from bench.demo_runs import WORK, fresh_store  # noqa: E402

OUT = ROOT / "bench" / "out"
MODES = {"incremental": {"reward_training": "incremental"},
         "full": {"reward_training": "full", "reward_patience": 0, "reward_warm_start": False},  # today's retrain
         # variants of incremental training: early stopping on the share's validation pairs, a smaller replay
         "incremental_patience": {"reward_training": "incremental", "reward_patience": 3},
         "incremental_replay25": {"reward_training": "incremental", "reward_replay": 25}}
PHASES = ("sample+select", "win-rate pairs", "label", "reward", "policy", "evaluate")
PHASE_OF = [("sampling responses", "sample+select"), ("queueing win-rate pairs", "win-rate pairs"),
            ("collecting labels", "label"), ("judging", "label"), ("training the reward model", "reward"),
            ("PPO", "policy"), ("GRPO", "policy"), ("DPO", "policy"), ("evaluating", "evaluate"),
            ("summarising", "evaluate")]


def phase_name(phase: str) -> str:
    """The bench's phase for one of the loop's progress phases ("round 3: evaluating policy v3" -> "evaluate")."""
    for start, name in PHASE_OF:
        if phase.startswith(start):
            return name
    raise ValueError(f"unknown loop phase {phase!r}")


def clocks() -> tuple[float, float]:
    """(wall seconds, this process's CPU seconds): on a shared machine the CPU seconds are the cost, the wall clock
    also counts the other processes' turns."""
    return time.perf_counter(), time.process_time()


def timed_loop(store, config) -> dict[int, dict[str, list[float]]]:
    """Run the loop in this process; {round index: {phase: [wall seconds, CPU seconds]}}, the time between two
    progress steps going to the earlier step's phase (the baseline evaluation before round 1 is left out)."""
    import os

    from storage import JobStatus
    from storage import jobs as job_rows
    from trainers.loop.rounds import Loop

    seconds: dict[int, dict[str, list[float]]] = {}
    current: list = []  # [round index, phase, started (wall, CPU)]

    def close(now: tuple[float, float]) -> None:
        if current and current[0] is not None:
            index, phase, started = current
            spent = seconds.setdefault(index, {p: [0.0, 0.0] for p in PHASES})[phase]
            spent[0] += now[0] - started[0]
            spent[1] += now[1] - started[1]

    class TimedLoop(Loop):
        def step(self, round_index, phase, fraction_of_round):
            now = clocks()
            close(now)
            if current and current[0] is not None and round_index != current[0]:  # a round done: say what it cost
                print(f"  round {current[0] + 1}: " + ", ".join(f"{p} {cpu:.0f}" for p, (_, cpu) in
                                                             seconds[current[0]].items()) + " CPU s", flush=True)
            baseline = round_index == 0 and fraction_of_round == 0.0 and phase.startswith("evaluating")
            current[:] = [None if baseline else round_index, phase_name(phase), now]
            super().step(round_index, phase, fraction_of_round)

    job_id = job_rows.create_job(store, "loop", config.to_dict())
    job_rows.claim_job(store, job_id, os.getpid())
    TimedLoop(store, job_rows.get_job(store, job_id), log=lambda line: None).run()
    close(clocks())
    job_rows.finish_job(store, job_id, JobStatus.COMPLETED)
    return seconds


def heldout_accuracy(store, config, job_id: int) -> tuple[float, int]:
    """(accuracy, pairs): the newest reward model on every decided label of the store whose pair its lineage never
    trained on (full retrain: the newest model alone; incremental or warm-started: every model of the job)."""
    import json as json_lib

    import torch

    from storage.labels import training_labels
    from storage.reward_models import list_reward_models
    from trainers.reward.scorer import INFO_FILE, RewardScorer

    models = [m for m in list_reward_models(store) if m.job_id == job_id]
    lineage = models if config.reward_model.training == "incremental" or config.reward_model.warm_start else models[-1:]
    trained = {label_id for m in lineage for label_id in
               json_lib.loads((Path(m.path) / INFO_FILE).read_text())["member_label_ids"]}
    labels = [lp for lp in training_labels(store) if lp.outcome.target(True) in (0.0, 1.0)]
    trained_pairs = {lp.pair_id for lp in labels if lp.label_id in trained}
    held = [lp for lp in labels if lp.pair_id not in trained_pairs]
    scorer = RewardScorer.from_store(store)
    with torch.no_grad():
        first = scorer.raw_scores([lp.prompt_content for lp in held], [lp.first for lp in held])[0]
        second = scorer.raw_scores([lp.prompt_content for lp in held], [lp.second for lp in held])[0]
    right = [(a > b) == (lp.outcome.target(True) > 0.5) for a, b, lp in zip(first.tolist(), second.tolist(), held,
                                                                             strict=True)]
    return sum(right) / len(right), len({lp.pair_id for lp in held})


def one_run(mode: str, seed: int, rounds: int, labels: int, settings: dict, name: str) -> dict:
    """One loop: its per-round phase seconds, the reward model's reported and held-out accuracy, the oracle gain."""
    import shutil

    from storage.metrics import read_metrics
    from storage.rounds import list_rounds
    from trainers.loop.config import LoopConfig

    config = LoopConfig.from_dict({**settings, "rounds": rounds, "labels_per_round": labels, "label_decay": 1.0,
                                   **MODES[mode], "seed": seed})
    folder = f"{name}-{mode}-s{seed}"
    store = fresh_store(folder)
    try:
        seconds = timed_loop(store, config)
        [job_id] = {r["job_id"] for r in list_rounds(store)}
        scores = {row["step"]: row["value"] for row in read_metrics(store, job_id, names=["round/oracle_score"])}
        val = [r["summary"].get("reward_val_accuracy") for r in list_rounds(store, job_id)]
        accuracy, val_pairs = heldout_accuracy(store, config, job_id)
    finally:
        store.close()
        shutil.rmtree(WORK / folder, ignore_errors=True)
    row = {"mode": mode, "seed": seed, "rounds": [seconds[i] for i in sorted(seconds)], "val_accuracy": val,
           "heldout_accuracy": accuracy, "heldout_pairs": val_pairs,
           "gain": scores[max(scores)] - scores[min(scores)]}
    reward = [r["reward"][1] for r in row["rounds"]]
    print(f"{mode:>20} seed {seed}: reward {reward[0]:.0f} CPU s -> {reward[-1]:.0f} CPU s, held-out accuracy "
          f"{accuracy:.3f} on {val_pairs} pairs, oracle gain {row['gain']:+.3f}", flush=True)
    return row


def print_tables(rows: list[dict]) -> None:
    """Each mode's mean phase seconds per round, the reward phase's growth, and the paired quality."""
    for mode in MODES:
        group = [r for r in rows if r["mode"] == mode]
        if not group:
            continue
        n = min(len(r["rounds"]) for r in group)
        print(f"\n{mode} (mean of {len(group)} seed{'s' if len(group) > 1 else ''}; CPU seconds per round; wall "
              "seconds in the JSON)\n")
        print("| round | " + " | ".join(PHASES) + " | total | reward val acc |")
        print("|---:|" + "---:|" * (len(PHASES) + 2))
        for i in range(n):
            phases = [statistics.fmean(r["rounds"][i][p][1] for r in group) for p in PHASES]
            accs = [r["val_accuracy"][i] for r in group if r["val_accuracy"][i] is not None]
            acc = f"{statistics.fmean(accs):.3f}" if accs else "-"
            print(f"| {i + 1} | " + " | ".join(f"{s:.1f}" for s in phases) + f" | {sum(phases):.1f} | {acc} |")
        reward = [statistics.fmean(r["rounds"][i]["reward"][1] for r in group) for i in range(n)]
        later = f", round {n} / round 2: {reward[-1] / reward[1]:.2f}x" if n > 2 else ""
        print(f"\nreward phase growth, round {n} / round 1: {reward[-1] / reward[0]:.2f}x{later}; "
              f"reward seconds over all rounds: {sum(reward):.0f}")
    by = {(r["mode"], r["seed"]): r for r in rows}
    for mode in [m for m in MODES if m != "full"]:
        seeds = sorted({s for m, s in by if m == mode} & {s for m, s in by if m == "full"})
        if not seeds:
            continue
        print(f"\n{mode} against full, paired by seed ({len(seeds)} seed{'s' if len(seeds) > 1 else ''}; 95% "
              "t-interval of the difference)\n")
        print(f"| figure | {mode} | full | difference |")
        print("|---|---:|---:|---:|")
        for figure in ("heldout_accuracy", "gain"):
            mine = [by[mode, s][figure] for s in seeds]
            theirs = [by["full", s][figure] for s in seeds]
            diff, half = interval([a - b for a, b in zip(mine, theirs, strict=True)])
            print(f"| {figure} | {statistics.fmean(mine):.3f} | {statistics.fmean(theirs):.3f} | {diff:+.3f} "
                  f"± {half:.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--labels", type=int, default=100, help="oracle labels per round")
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=["incremental", "full"])
    parser.add_argument("--results", nargs="*", default=[], help="earlier runs' JSON files to tabulate with these")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--config", default="{}", help="other loop settings as JSON")
    parser.add_argument("--name", default="round_cost")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    settings = json.loads(args.config)
    rows = [row for path in args.results for row in json.loads(Path(path).read_text())["runs"]]
    for seed in args.seeds:  # seed by seed, so a shortened run still pairs its modes
        for mode in args.modes:
            rows.append(one_run(mode, seed, args.rounds, args.labels, settings, args.name))
            OUT.mkdir(parents=True, exist_ok=True)
            (OUT / f"{args.name}.json").write_text(json.dumps({"args": vars(args), "runs": rows}, indent=1) + "\n")
    print_tables(rows)


if __name__ == "__main__":
    main()
