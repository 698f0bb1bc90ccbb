"""PPO learning curves on the demo: held-out oracle score and KL to the reference against iterations.

Trains the demo SFT policy with PPO against the demo's oracle (the sentiment lexicon, an unbounded count of positive
words, so a small β lets KL grow) in several modes (full fine-tuning with a fixed β, full with the adaptive β
controller, LoRA), and every `--eval-every` iterations samples
the 20 held-out prompts 4 times each (fixed seed) to measure the mean oracle score and the mean sequence KL
(sum over tokens of log π/π_ref) to the SFT policy. Prints a table and writes bench/out/ppo_learning.png and .json.

    python bench/ppo_learning.py                       # 30 iterations per mode, about 5 minutes on 2 cores
    python bench/ppo_learning.py --iterations 60 --modes full lora
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from assets.build_demo import ensure_demo_policy  # noqa: E402
from assets.corpus import demo_prompts  # noqa: E402
from trainers.models import load_policy, load_tokenizer  # noqa: E402
from trainers.ppo import PPOTrainer  # noqa: E402
from trainers.ppo_config import PPOConfig  # noqa: E402
from trainers.ppo_job import oracle_reward  # noqa: E402

OUT = ROOT / "bench" / "out"
MODES = {  # settings on top of the command line's
    "full": dict(),
    "adaptive": dict(target_kl=4.0, kl_horizon=100),
    "lora": dict(lora=True, lora_r=8, lora_target_modules=["c_attn", "c_proj", "c_fc"], learning_rate=3e-3),
}


def curve(mode: str, args: argparse.Namespace) -> list[dict]:
    """Rows {iteration, heldout_score, heldout_kl, train_score, train_kl, kl_coef, seconds} for one mode."""
    path = ensure_demo_policy()
    train, heldout = demo_prompts()
    settings = {**dict(batch_size=args.batch_size, num_mini_batches=2, ppo_epochs=4, learning_rate=args.learning_rate,
                       init_kl_coef=args.kl_coef, response_length=args.response_length, seed=args.seed), **MODES[mode]}
    trainer = PPOTrainer(PPOConfig(**settings), load_policy(path), load_tokenizer(path), train, oracle_reward)
    evaluation_prompts = heldout * 4
    rows, last, started = [], {}, time.perf_counter()

    def evaluate(iteration: int) -> None:
        result = trainer.evaluate(evaluation_prompts, oracle_reward, seed=args.seed + 1)
        rows.append({"iteration": iteration, "heldout_score": result["score"], "heldout_kl": result["kl"],
                     "train_score": last.get("ppo/score"), "train_kl": last.get("ppo/kl"),
                     "kl_coef": last.get("ppo/kl_coef", trainer.kl_controller.value),
                     "seconds": time.perf_counter() - started})
        print(f"{mode:>8} it {iteration:3d}: held-out score {result['score']:+.3f}, KL {result['kl']:.2f}", flush=True)

    evaluate(0)
    for iteration in range(1, args.iterations + 1):
        last = trainer.step()
        trainer.iteration += 1
        if iteration % args.eval_every == 0 or iteration == args.iterations:
            evaluate(iteration)
    return rows


def plot(curves: dict[str, list[dict]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for mode, rows in curves.items():
        iterations = [r["iteration"] for r in rows]
        left.plot(iterations, [r["heldout_score"] for r in rows], marker="o", label=mode)
        right.plot(iterations, [r["heldout_kl"] for r in rows], marker="o", label=mode)
    left.set(xlabel="PPO iteration", ylabel="mean oracle score (held-out prompts)", title="Oracle score")
    right.set(xlabel="PPO iteration", ylabel="KL(policy || SFT), nats per response", title="KL to the reference")
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
    parser.add_argument("--batch-size", type=int, default=32, help="episodes per iteration")
    parser.add_argument("--response-length", type=int, default=16, help="most tokens per response")
    parser.add_argument("--learning-rate", type=float, default=2e-4, help="learning rate (LoRA mode: 3e-3)")
    parser.add_argument("--kl-coef", type=float, default=0.1, help="β (initial β of the adaptive mode, target KL 4)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    curves = {mode: curve(mode, args) for mode in args.modes}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "ppo_learning.json").write_text(json.dumps({"args": vars(args), "curves": curves}, indent=2))
    plot(curves, OUT / "ppo_learning.png")
    print(f"\nPPO on the demo against the oracle: batch {args.batch_size}, response {args.response_length}, "
          f"4 epochs x 2 mini-batches, seed {args.seed}; held-out = 20 prompts x 4 samples\n")
    print("| mode | iteration | held-out oracle score | held-out KL (nats) | β | seconds |")
    print("|---|---|---|---|---|---|")
    for mode, rows in curves.items():
        for r in rows:
            print(f"| {mode} | {r['iteration']} | {r['heldout_score']:+.3f} | {r['heldout_kl']:.2f} | "
                  f"{r['kl_coef']:.4f} | {r['seconds']:.0f} |")
    print(f"\nwrote {OUT / 'ppo_learning.png'} and {OUT / 'ppo_learning.json'}")


if __name__ == "__main__":
    main()
