"""How fast the Curves tab answers on a large store: inserts 100 000 metric rows into one loop job (5 rounds of
reward training and PPO) and times the store read, the warning rules, building each chart (the Plotly figure the
browser draws; its size is what goes over the wire), a whole refresh of the tab, and the /metrics API over HTTP.

    python bench/curves_render.py [--rows 100000] [--repeat 3]

Prints a table of median and worst times in milliseconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import numpy as np  # noqa: E402

from app.context import Studio  # noqa: E402
from app.curves.charts import PPO_PANELS, optimiser_figure, reward_figure, rounds_figure  # noqa: E402
from app.curves.curves_tab import ALL, findings, load_curves  # noqa: E402
from storage import Store  # noqa: E402
from storage import jobs as job_rows  # noqa: E402
from storage.metrics import log_metrics  # noqa: E402
from storage.policies import add_policy  # noqa: E402
from storage.reward_models import add_reward_model  # noqa: E402
from storage.rounds import add_round  # noqa: E402
from storage.types import JobStatus  # noqa: E402

ROUNDS = 5
REWARD_NAMES = ("reward/loss", "reward/accuracy", "reward/val_loss", "reward/val_accuracy")


def fill(store: Store, rows: int, seed: int = 0) -> int:
    """One finished loop job with `rows` metric rows: 90% PPO (12 metrics per iteration), 10% reward training."""
    rng = np.random.default_rng(seed)
    ppo_per_round = int(rows * 0.9) // len(PPO_PANELS) // ROUNDS
    reward_per_round = (rows - ppo_per_round * len(PPO_PANELS) * ROUNDS) // len(REWARD_NAMES) // ROUNDS
    job_id = job_rows.create_job(store, "loop", {"rounds": ROUNDS})
    job_rows.claim_job(store, job_id, os.getpid())
    policy = add_policy(store, "/bench/sft", round=0)
    reward_step = ppo_step = 0
    with store.write():
        for g in range(1, ROUNDS + 1):
            for _ in range(reward_per_round):
                reward_step += 1
                log_metrics(store, job_id, reward_step,
                            dict(zip(REWARD_NAMES, rng.random(len(REWARD_NAMES)), strict=True)))
            rm = add_reward_model(store, f"/bench/rm-{g}", 100 * g, {}, 0.0, 1.0, policy_id=policy, round=g,
                                  job_id=job_id)
            for _ in range(ppo_per_round):
                ppo_step += 1
                log_metrics(store, job_id, ppo_step, dict(zip(PPO_PANELS, rng.random(len(PPO_PANELS)), strict=True)))
            policy = add_policy(store, f"/bench/policy-{g}", parent_id=policy, round=g)
            summary = {"labels": 100 * g, "reward_val_accuracy": 0.7, "score": 0.1 * g, "kl": 0.2 * g,
                       "oracle_score": 0.1 * g}
            add_round(store, job_id, g, {}, summary, policy, rm)
    job_rows.finish_job(store, job_id, JobStatus.COMPLETED)
    return job_id


def size_all(plots) -> str:
    return f"{sum(len(p.plot) for p in plots) / 1024:,.0f} KiB"


def timed(fn, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000, help="metric rows to insert")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each operation")
    args = parser.parse_args(argv)

    from gradio_client import Client

    from app.door.ui import build_app

    with tempfile.TemporaryDirectory() as folder:
        store = Store(Path(folder) / "studio.db")
        started = time.perf_counter()
        job_id = fill(store, args.rows)
        total = store.db().execute("SELECT count(*) FROM metrics").fetchone()[0]
        print(f"inserted {total:,} metric rows in {time.perf_counter() - started:.1f} s")
        studio = Studio(store)
        curves = load_curves(studio, job_id)
        def refresh():  # what one live tick of the tab computes
            shown = load_curves(studio, job_id)
            findings(shown, ALL)
            return (rounds_figure(shown.rounds, shown.sft_oracle, "rounds"), reward_figure(shown.reward, 0.6, "reward"),
                    optimiser_figure(shown.optimiser, 0.6, "ppo"))

        def size(plot) -> str:
            return f"{len(plot.plot) / 1024:,.0f} KiB"

        def points(group) -> int:
            return sum(len(s.steps) for segs in group.values() for s in segs)

        one_round = curves.select(curves.optimiser, "3")
        results = [
            ("read the job's series (store)", curves.points, "",
             timed(lambda: load_curves(studio, job_id), args.repeat)),
            ("warning rules", curves.points, "", timed(lambda: findings(curves, ALL), args.repeat)),
            ("rounds chart", len(curves.rounds), size(rounds_figure(curves.rounds, None, "r")),
             timed(lambda: rounds_figure(curves.rounds, None, "r"), args.repeat)),
            ("reward chart (EMA 0.6)", points(curves.reward), size(reward_figure(curves.reward, 0.6, "r")),
             timed(lambda: reward_figure(curves.reward, 0.6, "r"), args.repeat)),
            ("PPO chart (EMA 0.6)", points(curves.optimiser), size(optimiser_figure(curves.optimiser, 0.6, "p")),
             timed(lambda: optimiser_figure(curves.optimiser, 0.6, "p"), args.repeat)),
            ("PPO chart, one round", points(one_round), size(optimiser_figure(one_round, 0.6, "p")),
             timed(lambda: optimiser_figure(one_round, 0.6, "p"), args.repeat)),
            ("whole tab refresh", curves.points, size_all(refresh()), timed(refresh, args.repeat)),
        ]
        blocks = build_app(store)
        blocks.launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True)
        try:
            client = Client(blocks.local_url, verbose=False)
            one = client.predict(job_id=job_id, names="ppo/kl", api_name="/metrics")
            results.append(("/metrics one name (HTTP)", len(one), "",
                            timed(lambda: client.predict(job_id=job_id, names="ppo/kl", api_name="/metrics"),
                                  args.repeat)))
            every = client.predict(job_id=job_id, names="", api_name="/metrics")
            results.append(("/metrics every name (HTTP)", len(every), "",
                            timed(lambda: client.predict(job_id=job_id, names="", api_name="/metrics"), args.repeat)))
        finally:
            blocks.close()
        store.close()

    print(f"\n{'operation':<32} {'rows':>8} {'sent':>9} {'median ms':>10} {'max ms':>8}")
    for name, rows, sent, times in results:
        print(f"{name:<32} {rows:>8,} {sent:>9} {statistics.median(times):>10.0f} {max(times):>8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
