"""GRPO throughput and memory: our trainer (`trainers.policy.grpo.GRPOTrainer`) vs this venv's TRL `GRPOTrainer`.

Same algorithm and settings for both: the demo SFT policy, the same reward model (a seeded one-output head on the
policy, as in bench/ppo_throughput.py) as the only reward, 8 prompts x G = 4 responses per generation (32
episodes), response length 24, β 0.05 (so both load and run a frozen reference copy), clip 0.2, 2 optimisation
passes over each generation (TRL: `num_iterations=2`, ours: `epochs=2`, one mini-batch each), learning rate 1e-5,
temperature 1, top-p 1, float32, no gradient checkpointing, no vLLM, the same CPU threads. TRL is configured to the
DeepSeekMath loss (`loss_type="grpo"`: per-response token mean, then mean over responses; group std scaling), as
ours (`loss_norm="sequence"`). Rewards: TRL decodes and re-tokenizes prompt + completion for the reward model; ours
scores the rollout's own ids (prompt + response + EOS).

With `--model` (a model folder or GGUF file, made a project's policy through `python app.py init` as in
bench/real_model.py, e.g. SmolLM2-135M-Instruct) the same comparison runs on a real chat model with LoRA on both
sides (rank 8, α 16, no dropout, peft's default target modules; both references the base with the adapter
disabled): 2 prompts x G 4 = 8 episodes per generation and response length 48 by default (`--prompts-per-step`,
`--group`, `--response-length`), bench/real_model.py's chat instructions as prompts (TRL gets them as conversations
and applies the same chat template), the reward model a seeded one-output head on that model.

Episodes/s counts each sampled response once: one of our iterations, or one TRL generation (its 2 optimizer steps),
is one block of 32 episodes; the first block is warm-up. Each trainer runs in its own process, so peak memory is
clean: "peak RSS" is the process's high-water mark, "added by training" the high-water mark during training (reset
once the models are loaded) minus the RSS at that moment. `--profile` adds where our time goes (torch profiler).

    python bench/grpo_throughput.py                       # 6 blocks of 32 episodes per trainer, 1 thread
    python bench/grpo_throughput.py --blocks 10 --threads 2 --profile
    python bench/grpo_throughput.py --model /work/models/smollm2-135m-instruct --blocks 4 --threads 2 --profile
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import OUT  # noqa: E402
from bench.ppo_throughput import LORA, memory_mb, prepare, reset_peak, timed_steps  # noqa: E402

PROMPTS_PER_STEP, GROUP, RESPONSE_LENGTH, EPOCHS, BETA, LEARNING_RATE = 8, 4, 24, 2, 0.05, 1e-5
REAL_MODEL = dict(prompts_per_step=2, group=4, response_length=48)  # --model's defaults: a real model on this CPU


def report(name: str, block_times: list[float], loaded: dict, episodes: int, **extra) -> None:
    """One JSON line: episodes/s over the blocks after the first, and the memory figures."""
    measured = block_times[1:] or block_times
    after = memory_mb()
    print(json.dumps({"name": name, "episodes_per_s": episodes * len(measured) / sum(measured),
                      "peak_rss_mb": max(loaded["peak"], after["peak"]), "loaded_rss_mb": loaded["rss"],
                      "train_peak_mb": after["peak"], **extra}), flush=True)


# ----- workers (each in its own process) --------------------------------------------------------------------------

def run_ours(args: argparse.Namespace) -> None:
    import torch

    from trainers.models.loading import load_policy, load_tokenizer
    from trainers.policy.config import PolicyConfig
    from trainers.policy.grpo import GRPOTrainer
    from trainers.reward.scorer import RewardScorer

    torch.set_num_threads(args.threads)
    prompts = json.loads(Path(args.prompts).read_text())
    config = PolicyConfig(algorithm="grpo", group_size=args.group, loss_norm="sequence",
                          batch_size=args.prompts_per_step, num_mini_batches=1, epochs=EPOCHS,
                          response_length=args.response_length, learning_rate=LEARNING_RATE, init_kl_coef=BETA,
                          clip_range=0.2, temperature=1.0, top_p=1.0, seed=0, lora=args.lora, lora_r=LORA["r"],
                          lora_alpha=LORA["lora_alpha"], lora_dropout=LORA["lora_dropout"])
    reward = RewardScorer.from_dirs([args.reward_model], norms=[(0.0, 1.0)])
    trainer = GRPOTrainer(config, load_policy(args.policy), load_tokenizer(args.policy), prompts, reward)
    loaded = memory_mb()
    reset_peak()
    times = timed_steps(trainer, args.blocks)
    profile = profile_ours(trainer) if args.profile else {}
    report(args.worker, times, loaded, args.prompts_per_step * args.group, profile=profile)


def profile_ours(trainer, iterations: int = 3) -> dict[str, float]:
    """Seconds per iteration in each phase of our GRPO step, over `iterations` more iterations."""
    phases = {"generate (the sampler keeps the old log-probs)": (trainer.backend, "sample"),
              "reference forward": (trainer, "_reference_logprobs"),
              "reward model": (trainer, "_score"), "update (forward + backward + step, 2 passes)": (trainer, "_update")}
    seconds = dict.fromkeys(phases, 0.0)

    def timed(name, original):
        """`original`, adding the seconds each call takes to `seconds[name]`."""
        def call(*a, **k):
            started = time.perf_counter()
            try:
                return original(*a, **k)
            finally:
                seconds[name] += time.perf_counter() - started
        return call

    for name, (owner, attribute) in phases.items():
        setattr(owner, attribute, timed(name, getattr(owner, attribute)))
    started = time.perf_counter()
    for _ in range(iterations):
        trainer.step()
        trainer.iteration += 1
    total = time.perf_counter() - started
    seconds["rest: advantages, KL, metrics"] = total - sum(seconds.values())
    return {name: value / iterations for name, value in {**seconds, "iteration": total}.items()}


def run_trl(args: argparse.Namespace) -> None:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(args.threads)
    tokenizer = AutoTokenizer.from_pretrained(args.policy, padding_side="left")
    prompts = json.loads(Path(args.prompts).read_text())
    if tokenizer.chat_template:  # conversations: TRL applies the chat template, as ours does
        prompts = [[{"role": "user", "content": prompt}] for prompt in prompts]
    episodes = args.prompts_per_step * args.group
    step_ends: list[float] = []

    class StepTimer(TrainerCallback):
        def on_train_begin(self, *_, **__):
            step_ends.append(time.perf_counter())

        def on_step_end(self, *_, **__):
            step_ends.append(time.perf_counter())

    config = GRPOConfig(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=episodes,
                        num_generations=args.group, gradient_accumulation_steps=1, num_iterations=EPOCHS,
                        max_completion_length=args.response_length,
                        learning_rate=LEARNING_RATE, beta=BETA, loss_type="grpo", scale_rewards="group", epsilon=0.2,
                        temperature=1.0, top_p=1.0, use_vllm=False, bf16=False, gradient_checkpointing=False,
                        use_cpu=True, seed=0, report_to=[], save_strategy="no", logging_steps=1,
                        max_steps=EPOCHS * args.blocks, disable_tqdm=True, log_completions=False)
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(args.policy), args=config, processing_class=tokenizer,
        reward_funcs=AutoModelForSequenceClassification.from_pretrained(args.reward_model, num_labels=1),
        reward_processing_classes=AutoTokenizer.from_pretrained(args.reward_model),
        train_dataset=Dataset.from_dict({"prompt": prompts}), callbacks=[StepTimer()],
        peft_config=LoraConfig(task_type="CAUSAL_LM", **LORA) if args.lora else None,
    )
    loaded = memory_mb()
    reset_peak()
    trainer.train()
    ends = step_ends[::EPOCHS]  # a block = one generation and its EPOCHS optimizer steps
    report(args.worker, [b - a for a, b in itertools.pairwise(ends)], loaded, episodes)


# ----- the orchestrator -------------------------------------------------------------------------------------------

RUNS = {"trl": "TRL {version} GRPOTrainer", "ours": "ours (trainers.policy.grpo)"}


def run_worker(worker: str, policy: Path, reward_model: Path, prompts: Path, args: argparse.Namespace) -> dict:
    command = [sys.executable, __file__, "--worker", worker, "--policy", str(policy), "--reward-model",
               str(reward_model), "--prompts", str(prompts), "--blocks", str(args.blocks), "--threads",
               str(args.threads), "--prompts-per-step", str(args.prompts_per_step), "--group", str(args.group),
               "--response-length", str(args.response_length), *(["--profile"] if args.profile else []),
               *(["--lora"] if args.lora else [])]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        raise SystemExit(f"{worker} failed:\n{done.stderr[-3000:]}")
    return json.loads(lines[-1])


def print_tables(runs: dict[str, list[dict]], args: argparse.Namespace, trl_version: str) -> None:
    """The comparison (medians; × TRL: the median ratio of runs made one after the other, so that a change in the
    machine's load cancels out) and, with --profile, our phases in the median run."""
    import numpy as np

    model = "the demo policy" if args.model is None else f"{args.model} with LoRA r={LORA['r']}"
    print(f"\nGRPO on {model}: {args.prompts_per_step} prompts x G {args.group} = "
          f"{args.prompts_per_step * args.group} episodes per generation, response {args.response_length}, {EPOCHS} "
          f"passes, β {BETA}, float32, {args.blocks} blocks (first = warm-up), {args.threads} CPU thread(s), "
          f"{args.repeats} alternating run(s) per trainer\n")
    print("| trainer | episodes/s | × TRL | peak RSS (MiB) | × TRL | added by training (MiB) | × TRL |")
    print("|---|---|---|---|---|---|---|")
    measures = {"speed": lambda r: r["episodes_per_s"], "peak": lambda r: r["peak_rss_mb"],
                "added": lambda r: r["train_peak_mb"] - r["loaded_rss_mb"]}
    formats = {"speed": ".3g", "peak": ".0f", "added": ".0f"}
    for worker, label in RUNS.items():
        cells = []
        for name, measure in measures.items():
            mine = [measure(r) for r in runs[worker]]
            ratios = [a / measure(t) for a, t in zip(mine, runs["trl"], strict=True)]  # run i against TRL's run i
            cells += [f"{np.median(mine):{formats[name]}}", f"{np.median(ratios):.2f}"]
        print(f"| {label.format(version=trl_version)} | {' | '.join(cells)} |")
    print("\nEach run, episodes/s: " + "; ".join(
        f"{worker} " + ", ".join(f"{r['episodes_per_s']:.3g}" for r in rs) for worker, rs in runs.items()))
    if args.profile:
        phases = sorted(runs["ours"], key=measures["speed"])[len(runs["ours"]) // 2]["profile"]
        print("\nWhere our iteration's time goes (the median run; seconds per iteration):\n\n| phase | s | share |\n"
              "|---|---|---|")
        for name, seconds in sorted(phases.items(), key=lambda kv: -kv[1]):
            if name != "iteration":
                print(f"| {name} | {seconds:.3f} | {seconds / phases['iteration']:.0%} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=6, help="blocks of 32 episodes per trainer (the first: warm-up)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads of every run")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each trainer, alternating (the median counts)")
    parser.add_argument("--profile", action="store_true", help="also time the phases of our iteration")
    parser.add_argument("--model", type=Path, default=None,
                        help="instead of the demo policy, this model folder or GGUF file (through init), with LoRA")
    parser.add_argument("--prompts-per-step", type=int, help=f"prompts per generation (default {PROMPTS_PER_STEP}; "
                        f"with --model {REAL_MODEL['prompts_per_step']})")
    parser.add_argument("--group", type=int, help=f"responses per prompt, G (default {GROUP})")
    parser.add_argument("--response-length", type=int, help=f"most response tokens (default {RESPONSE_LENGTH}; "
                        f"with --model {REAL_MODEL['response_length']})")
    parser.add_argument("--lora", action="store_true", help=argparse.SUPPRESS)  # a worker's: set by --model
    parser.add_argument("--worker", choices=sorted(RUNS), help=argparse.SUPPRESS)
    parser.add_argument("--policy", help=argparse.SUPPRESS)
    parser.add_argument("--reward-model", help=argparse.SUPPRESS)
    parser.add_argument("--prompts", help=argparse.SUPPRESS)
    args = parser.parse_args()
    defaults = REAL_MODEL if args.model is not None else dict(prompts_per_step=PROMPTS_PER_STEP, group=GROUP,
                                                              response_length=RESPONSE_LENGTH)
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    args.lora = args.lora or args.model is not None
    if args.worker == "ours":
        return run_ours(args)
    if args.worker == "trl":
        return run_trl(args)

    import trl

    work = OUT / "grpo_throughput"
    work.mkdir(parents=True, exist_ok=True)
    policy, reward_model, prompts = prepare(work, None, 0, args.model)
    runs: dict[str, list[dict]] = {worker: [] for worker in RUNS}
    for _ in range(args.repeats):  # alternate, so a change in the machine's load hits both alike
        for worker in RUNS:
            runs[worker].append(run_worker(worker, policy, reward_model, prompts, args))
    print_tables(runs, args, trl.__version__)
    (work / f"results-{policy.name}.json").write_text(json.dumps(runs, indent=2))


if __name__ == "__main__":
    main()
