"""PPO (and GRPO) learning curves on the demo: held-out oracle score and KL to the reference against iterations.

Trains the demo SFT policy with PPO against the demo's oracle (the sentiment lexicon, an unbounded count of positive
words, so a small β lets KL grow) in several modes (full fine-tuning with a fixed β, full with the adaptive β
controller, LoRA; `grpo`: full fine-tuning with GRPO, G = 4 responses to each of batch / 4 prompts, so every
iteration spends the same episodes as PPO's), and every `--eval-every` iterations samples the 20 held-out prompts 4
times each (fixed seed) to measure the mean oracle score and the mean sequence KL (sum over tokens of log π/π_ref) to
the SFT policy. With several `--seeds` the plot shows each mode's mean and its range over the seeds. Prints a table
and writes bench/out/NAME.png and .json (NAME: `--name`, default ppo_learning).

    python bench/ppo_learning.py                       # 30 iterations per mode, about 5 minutes on 2 cores
    python bench/ppo_learning.py --iterations 60 --modes full lora
    python bench/ppo_learning.py --modes full grpo --seeds 0 1 2 --name grpo_vs_ppo   # GRPO against PPO
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from assets.build_demo import ensure_demo_policy  # noqa: E402
from assets.corpus import demo_prompts  # noqa: E402
from trainers.jobs.policy_job import make_trainer, oracle_reward  # noqa: E402
from trainers.models.loading import load_policy, load_tokenizer  # noqa: E402
from trainers.policy.config import PolicyConfig  # noqa: E402

OUT = ROOT / "bench" / "out"
GROUP = 4  # GRPO's responses per prompt
MODES = {  # settings on top of the command line's
    "full": dict(),
    "adaptive": dict(target_kl=4.0, kl_horizon=100),
    "lora": dict(lora=True, lora_r=8, lora_target_modules=["c_attn", "c_proj", "c_fc"], learning_rate=3e-3),
    "grpo": dict(algorithm="grpo", group_size=GROUP),
}


def curve(mode: str, args: argparse.Namespace, seed: int) -> list[dict]:
    """Rows {iteration, episodes, heldout_score, heldout_kl, train_score, train_kl, kl_coef, seconds} for one mode."""
    path = ensure_demo_policy()
    train, heldout = demo_prompts()
    settings = {**dict(batch_size=args.batch_size, num_mini_batches=2, epochs=4, learning_rate=args.learning_rate,
                       init_kl_coef=args.kl_coef, response_length=args.response_length, seed=seed), **MODES[mode]}
    config = PolicyConfig(**settings)
    config.batch_size //= config.episodes_per_prompt  # prompts: the same episodes per iteration in every mode
    trainer = make_trainer(config, load_policy(path), load_tokenizer(path), train, oracle_reward)
    evaluation_prompts, prefix = heldout * 4, config.algorithm
    rows, last, started = [], {}, time.perf_counter()

    def evaluate(iteration: int) -> None:
        result = trainer.evaluate(evaluation_prompts, oracle_reward, seed=seed + 1)
        rows.append({"iteration": iteration, "episodes": iteration * config.batch_size * config.episodes_per_prompt,
                     "heldout_score": result["score"], "heldout_kl": result["kl"],
                     "train_score": last.get(f"{prefix}/score"), "train_kl": last.get(f"{prefix}/kl"),
                     "kl_coef": last.get(f"{prefix}/kl_coef", trainer.kl_controller.value),
                     "seconds": time.perf_counter() - started})
        print(f"{mode:>8} seed {seed} it {iteration:3d}: held-out score {result['score']:+.3f}, KL {result['kl']:.2f}",
              flush=True)

    evaluate(0)
    for iteration in range(1, args.iterations + 1):
        last = trainer.step()
        trainer.iteration += 1
        if iteration % args.eval_every == 0 or iteration == args.iterations:
            evaluate(iteration)
    return rows


def over_seeds(runs: list[list[dict]], key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(iterations, mean, min, max) of `key` over the seeds' rows."""
    values = np.array([[r[key] for r in rows] for rows in runs], dtype=float)  # (seeds, evaluations)
    return np.array([r["iteration"] for r in runs[0]]), values.mean(0), values.min(0), values.max(0)


def plot(curves: dict[str, list[list[dict]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for mode, runs in curves.items():
        for axis, key in ((left, "heldout_score"), (right, "heldout_kl")):
            iterations, mean, low, high = over_seeds(runs, key)
            label = mode if len(runs) == 1 else f"{mode} ({len(runs)} seeds)"
            line = axis.plot(iterations, mean, marker="o", label=label)
            if len(runs) > 1:
                axis.fill_between(iterations, low, high, color=line[0].get_color(), alpha=0.2)
    left.set(xlabel="iteration (same episodes per iteration in every mode)",
             ylabel="mean oracle score (held-out prompts)", title="Oracle score")
    right.set(xlabel="iteration (same episodes per iteration in every mode)",
              ylabel="KL(policy || SFT), nats per response", title="KL to the reference")
    for axis in (left, right):
        axis.grid(alpha=0.3)
        axis.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=30, help="PPO iterations per mode")
    parser.add_argument("--eval-every", type=int, default=5, help="iterations between held-out evaluations")
    parser.add_argument("--modes", nargs="+", choices=sorted(MODES), default=["full", "adaptive", "lora"])
    parser.add_argument("--batch-size", type=int, default=32, help="episodes per iteration (grpo: batch / 4 prompts)")
    parser.add_argument("--response-length", type=int, default=16, help="most tokens per response")
    parser.add_argument("--learning-rate", type=float, default=2e-4, help="learning rate (LoRA mode: 3e-3)")
    parser.add_argument("--kl-coef", type=float, default=0.1, help="β (initial β of the adaptive mode, target KL 4)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="one run per seed and mode")
    parser.add_argument("--name", default="ppo_learning", help="file name of the plot and the raw numbers")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    curves = {mode: [curve(mode, args, seed) for seed in args.seeds] for mode in args.modes}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{args.name}.json").write_text(json.dumps({"args": vars(args), "curves": curves}, indent=2))
    plot(curves, OUT / f"{args.name}.png")
    print(f"\nOn the demo against the oracle: {args.batch_size} episodes per iteration "
          f"(grpo: {args.batch_size // GROUP} prompts x G {GROUP}), response {args.response_length}, "
          f"4 epochs x 2 mini-batches, seeds {args.seeds}; "
          "held-out = 20 prompts x 4 samples; mean (min to max) over the seeds\n")
    print("| mode | iteration | episodes | held-out oracle score | held-out KL (nats) | β | seconds |")
    print("|---|---|---|---|---|---|---|")
    for mode, runs in curves.items():
        for i, r in enumerate(runs[0]):
            cells = []
            for key, digits in (("heldout_score", "+.3f"), ("heldout_kl", ".2f")):
                values = [rows[i][key] for rows in runs]
                spread = f" ({min(values):{digits}} to {max(values):{digits}})" if len(runs) > 1 else ""
                cells.append(f"{np.mean(values):{digits}}{spread}")
            seconds = np.mean([rows[i]["seconds"] for rows in runs])
            print(f"| {mode} | {r['iteration']} | {r['episodes']} | {' | '.join(cells)} | {r['kl_coef']:.4f} | "
                  f"{seconds:.0f} |")
    print(f"\nwrote {OUT / (args.name + '.png')} and {OUT / (args.name + '.json')}")


if __name__ == "__main__":
    main()
