"""PPO throughput and memory: our trainer vs TRL 1.12.0's `trl.experimental.ppo.PPOTrainer` (the last TRL with PPO).

Same settings for both (the PPO issue's): batch 64, response length 24, 4 PPO epochs, 1 mini-batch, full
fine-tuning, temperature 1, top-p 1, KL coefficient 0.05 (fixed), missing-EOS penalty 1, the same CPU threads,
float32 and no gradient checkpointing (TRL's defaults turn on bf16 and gradient checkpointing; both are turned off).
Same models: the demo SFT policy, and a reward model made from it (one seeded output head). TRL trains a separate
value model initialised from the reward model (its design); ours has the value head on the policy. Our LoRA
mode (rank 8) is measured too, and both trainers once more with gradient checkpointing (TRL's default).

Each run is its own process, so peak memory is clean: ours in this venv, TRL in `bench/out/trl-1.12.0-venv`, which
this script creates on first use (`pip install trl==1.12.0` with this venv's torch, transformers, accelerate and
datasets versions, so only the trainer differs). Episodes/s counts the iterations after the first (warm-up).
"peak RSS" is the process's high-water mark; "added by training" is the high-water mark during training (VmHWM reset
through /proc/self/clear_refs once the models are loaded) minus the RSS at that moment: what the trainer adds.

    python bench/ppo_throughput.py                   # 6 iterations per run, 1 thread
    python bench/ppo_throughput.py --iterations 10 --threads 2
    python bench/ppo_throughput.py --width 512 --layers 8 --iterations 3 --runs ours ours-lora   # a bigger model
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
TRL_VERSION = "1.12.0"
BATCH, RESPONSE_LENGTH, EPOCHS, MINI_BATCHES, KL_COEF, LEARNING_RATE = 64, 24, 4, 1, 0.05, 1e-5


def memory_mb() -> dict[str, float]:
    """Current and peak resident set of this process, in MiB (Linux /proc)."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return {"rss": int(fields["VmRSS"].split()[0]) / 1024, "peak": int(fields["VmHWM"].split()[0]) / 1024}


def reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS


def timed_steps(trainer, n: int) -> list[float]:
    """Seconds of each of `n` optimiser iterations (rollout + update) of one of our trainers."""
    times = []
    for _ in range(n):
        started = time.perf_counter()
        trainer.step()
        trainer.iteration += 1
        times.append(time.perf_counter() - started)
    return times


def report(name: str, step_times: list[float], loaded: dict, before_reset_peak: float) -> None:
    after = memory_mb()
    measured = step_times[1:] or step_times
    print(json.dumps({"name": name, "episodes_per_s": BATCH * len(measured) / sum(measured),
                      "peak_rss_mb": max(before_reset_peak, after["peak"]), "loaded_rss_mb": loaded["rss"],
                      "train_peak_mb": after["peak"]}), flush=True)


# ----- workers (each in its own process) --------------------------------------------------------------------------

def run_ours(args: argparse.Namespace, lora: bool, checkpointing: bool) -> None:
    sys.path.insert(0, str(ROOT))
    import torch

    from trainers.models.loading import load_policy, load_tokenizer
    from trainers.policy.config import PolicyConfig
    from trainers.policy.ppo import PPOTrainer
    from trainers.reward.scorer import RewardScorer

    torch.set_num_threads(args.threads)
    prompts = json.loads(Path(args.prompts).read_text())
    config = PolicyConfig(batch_size=BATCH, num_mini_batches=MINI_BATCHES, epochs=EPOCHS,
                          response_length=RESPONSE_LENGTH, learning_rate=LEARNING_RATE, init_kl_coef=KL_COEF,
                          temperature=1.0, missing_eos_penalty=1.0, lora=lora, gradient_checkpointing=checkpointing,
                          seed=0)
    reward = RewardScorer.from_dirs([args.reward_model], norms=[(0.0, 1.0)])
    trainer = PPOTrainer(config, load_policy(args.policy), load_tokenizer(args.policy), prompts, reward)
    loaded = memory_mb()
    reset_peak()
    report(args.worker, timed_steps(trainer, args.iterations), loaded, loaded["peak"])


def run_trl(args: argparse.Namespace, checkpointing: bool) -> None:
    import tempfile

    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer, TrainerCallback
    from trl.experimental.ppo import PPOConfig, PPOTrainer

    torch.set_num_threads(args.threads)
    prompts = json.loads(Path(args.prompts).read_text())
    tokenizer = AutoTokenizer.from_pretrained(args.policy, padding_side="left")
    dataset = Dataset.from_dict({"input_ids": tokenizer(prompts)["input_ids"]})
    times: list[float] = []

    class StepTimer(TrainerCallback):
        def on_train_begin(self, *_, **__):
            self.last = time.perf_counter()

        def on_step_end(self, *_, **__):
            now = time.perf_counter()
            times.append(now - self.last)
            self.last = now

    torch.manual_seed(0)
    config = PPOConfig(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=BATCH, gradient_accumulation_steps=1,
                       num_mini_batches=MINI_BATCHES, num_ppo_epochs=EPOCHS, response_length=RESPONSE_LENGTH,
                       total_episodes=BATCH * args.iterations, learning_rate=LEARNING_RATE, kl_coef=KL_COEF,
                       temperature=1.0, stop_token="eos", missing_eos_penalty=1.0, num_sample_generations=0,
                       local_rollout_forward_batch_size=BATCH, report_to=[], save_strategy="no", logging_steps=1,
                       use_cpu=True, seed=0, disable_tqdm=True, bf16=False, gradient_checkpointing=checkpointing)
    trainer = PPOTrainer(
        args=config, processing_class=tokenizer, model=AutoModelForCausalLM.from_pretrained(args.policy),
        ref_model=AutoModelForCausalLM.from_pretrained(args.policy),
        reward_model=AutoModelForSequenceClassification.from_pretrained(args.reward_model, num_labels=1),
        value_model=AutoModelForSequenceClassification.from_pretrained(args.reward_model, num_labels=1),
        train_dataset=dataset, callbacks=[StepTimer()],
    )
    loaded = memory_mb()
    reset_peak()
    trainer.train()
    report(args.worker, times, loaded, loaded["peak"])


# ----- the orchestrator -------------------------------------------------------------------------------------------

def trl_python() -> Path:
    """The TRL venv's interpreter, creating the venv on first use."""
    import datasets
    import torch
    import transformers

    import accelerate

    venv = OUT / f"trl-{TRL_VERSION}-venv"
    python = venv / "bin" / "python"
    if not python.exists() or subprocess.run([python, "-c", "import trl.experimental.ppo"],
                                             capture_output=True).returncode:
        print(f"creating {venv} (pip install trl=={TRL_VERSION}; a few minutes)", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", "--clear", venv], check=True)
        packages = [f"trl=={TRL_VERSION}", f"torch=={torch.__version__.split('+')[0]}",
                    f"transformers=={transformers.__version__}", f"accelerate=={accelerate.__version__}",
                    f"datasets=={datasets.__version__}"]
        subprocess.run([python, "-m", "pip", "install", "-q", *packages], check=True)
    return python


def prepare(work: Path, width: int | None, layers: int) -> tuple[Path, Path, Path]:
    """(policy dir, reward-model dir, prompts file): the demo policy (or, with `width`, a GPT-2 of that width and
    `layers` blocks on the demo tokenizer, freshly initialised), a seeded one-output head on it, the demo prompts."""
    sys.path.insert(0, str(ROOT))
    import torch
    from transformers import AutoModelForSequenceClassification, GPT2Config, GPT2LMHeadModel

    from assets.build_demo import ensure_demo_policy
    from assets.corpus import demo_prompts
    from trainers.models.loading import load_tokenizer

    policy = ensure_demo_policy()
    tokenizer = load_tokenizer(policy)
    if width is not None:
        policy = work / f"policy-{width}x{layers}"
        if not (policy / "config.json").is_file():
            torch.manual_seed(0)
            config = GPT2Config(vocab_size=len(tokenizer), n_positions=64, n_embd=width, n_layer=layers,
                                n_head=max(1, width // 64), pad_token_id=tokenizer.pad_token_id,
                                eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.eos_token_id)
            GPT2LMHeadModel(config).save_pretrained(policy)
            tokenizer.save_pretrained(policy)
    reward_model = work / f"reward_model-{policy.name}"
    if not (reward_model / "config.json").is_file():
        torch.manual_seed(0)
        model = AutoModelForSequenceClassification.from_pretrained(policy, num_labels=1)
        model.config.pad_token_id = tokenizer.pad_token_id
        model.save_pretrained(reward_model)
        tokenizer.save_pretrained(reward_model)
    prompts = work / "prompts.json"
    prompts.write_text(json.dumps(demo_prompts()[0]))
    return policy, reward_model, prompts


def run_worker(python: Path, worker: str, policy: Path, reward_model: Path, prompts: Path, args) -> dict:
    command = [str(python), __file__, "--worker", worker, "--policy", str(policy), "--reward-model", str(reward_model),
               "--prompts", str(prompts), "--iterations", str(args.iterations), "--threads", str(args.threads)]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        raise SystemExit(f"{worker} failed:\n{done.stderr[-3000:]}")
    return json.loads(lines[-1])


RUNS = {  # worker -> (label, the TRL run it is compared with)
    "trl": (f"TRL {TRL_VERSION} PPOTrainer, full", "trl"),
    "ours": ("ours, full", "trl"),
    "ours-lora": ("ours, LoRA r=8", "trl"),
    "trl-checkpointing": (f"TRL {TRL_VERSION} PPOTrainer, full + gradient checkpointing", "trl-checkpointing"),
    "ours-checkpointing": ("ours, full + gradient checkpointing", "trl-checkpointing"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=6, help="PPO iterations per run (the first is warm-up)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads of every run")
    parser.add_argument("--width", type=int, default=None,
                        help="instead of the demo policy, a fresh GPT-2 of this width (n_embd) on the demo tokenizer")
    parser.add_argument("--layers", type=int, default=8, help="blocks of the --width model")
    parser.add_argument("--runs", nargs="+", choices=sorted(RUNS), default=list(RUNS), help="runs to make")
    parser.add_argument("--worker", choices=sorted(RUNS), help=argparse.SUPPRESS)
    parser.add_argument("--policy", help=argparse.SUPPRESS)
    parser.add_argument("--reward-model", help=argparse.SUPPRESS)
    parser.add_argument("--prompts", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        checkpointing = args.worker.endswith("checkpointing")
        if args.worker.startswith("trl"):
            return run_trl(args, checkpointing)
        return run_ours(args, lora=args.worker == "ours-lora", checkpointing=checkpointing)

    work = OUT / "ppo_throughput"
    work.mkdir(parents=True, exist_ok=True)
    policy, reward_model, prompts = prepare(work, args.width, args.layers)
    trl = trl_python()
    runs = {worker: RUNS[worker] for worker in RUNS if worker in args.runs or worker in [RUNS[r][1] for r in args.runs]}
    results = {worker: run_worker(trl if worker.startswith("trl") else Path(sys.executable), worker, policy,
                                  reward_model, prompts, args) for worker in runs}
    model = "the demo policy" if args.width is None else f"a GPT-2 {args.width} wide, {args.layers} blocks"
    print(f"\nPPO on {model} ({policy.name}), batch {BATCH}, response {RESPONSE_LENGTH}, {EPOCHS} epochs, "
          f"{MINI_BATCHES} mini-batch, float32, {args.iterations} iterations (first = warm-up), "
          f"{args.threads} CPU thread(s); "
          "× TRL: against the TRL run with the same gradient checkpointing\n")
    print("| trainer | episodes/s | × TRL | peak RSS (MiB) | × TRL | added by training (MiB) | × TRL |")
    print("|---|---|---|---|---|---|---|")
    for worker, (label, baseline) in runs.items():
        r, t = results[worker], results[baseline]
        added, trl_added = r["train_peak_mb"] - r["loaded_rss_mb"], t["train_peak_mb"] - t["loaded_rss_mb"]
        print(f"| {label} | {r['episodes_per_s']:.1f} | {r['episodes_per_s'] / t['episodes_per_s']:.2f} | "
              f"{r['peak_rss_mb']:.0f} | {r['peak_rss_mb'] / t['peak_rss_mb']:.2f} | {added:.0f} | "
              f"{added / trl_added:.2f} |")
    (work / f"results-{policy.name}.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
