"""PPO throughput and memory: our trainer vs TRL 1.12.0's `trl.experimental.ppo.PPOTrainer` (the last TRL with PPO).

Same settings for both (the PPO issue's): batch 64, response length 24, 4 PPO epochs, 1 mini-batch, full
fine-tuning, temperature 1, top-p 1, KL coefficient 0.05 (fixed), missing-EOS penalty 1, the same CPU threads,
float32 and no gradient checkpointing (TRL's defaults turn on bf16 and gradient checkpointing; both are turned off).
Same models: the demo SFT policy, and a reward model made from it (one seeded output head). TRL trains a separate
value model initialised from the reward model (its design); ours has the value head on the policy. Both in LoRA
mode (rank 8) are measured too, and both trainers once more with gradient checkpointing (TRL's default).

With `--model` (a model folder or GGUF file, made a project's policy through `python app.py init` as in
bench/real_model.py, e.g. SmolLM2-135M-Instruct) the same comparison runs on a real chat model with LoRA on both
sides (rank 8, α 16, no dropout, peft's default target modules; TRL: `peft_config`, its reference the base with the
adapter disabled, as ours): batch 8, response length 48, 4 epochs by default (`--batch`, `--response-length`,
`--epochs`), the chat instructions of bench/real_model.py as prompts (rendered with the model's chat template; both
trainers get the same prompt ids), the reward model a seeded one-output head on that model. TRL's value model is a
whole copy of the reward model, trained in full (its design); ours is a head on the policy.

Each run is its own process, so peak memory is clean: ours in this venv, TRL in `bench/out/trl-1.12.0-venv`, which
this script creates on first use (`pip install trl==1.12.0` with this venv's torch, transformers, accelerate,
datasets and peft versions, so only the trainer differs). Episodes/s counts the iterations after the first (warm-up).
"peak RSS" is the process's high-water mark; "added by training" is the high-water mark during training (VmHWM reset
through /proc/self/clear_refs once the models are loaded) minus the RSS at that moment: what the trainer adds.

    python bench/ppo_throughput.py                   # 6 iterations per run, 1 thread
    python bench/ppo_throughput.py --iterations 10 --threads 2
    python bench/ppo_throughput.py --width 512 --layers 8 --iterations 3 --runs ours ours-lora   # a bigger model
    python bench/ppo_throughput.py --model /work/models/smollm2-135m-instruct --iterations 4 --threads 2  # real, LoRA
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import OUT  # noqa: E402

TRL_VERSION = "1.12.0"
BATCH, RESPONSE_LENGTH, EPOCHS, MINI_BATCHES, KL_COEF, LEARNING_RATE = 64, 24, 4, 1, 0.05, 1e-5
REAL_MODEL = dict(batch=8, response_length=48, epochs=4)  # --model's defaults: a real model on this CPU
LORA = dict(r=8, lora_alpha=16, lora_dropout=0.0)  # both trainers' adapters; peft picks the target modules


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


def report(name: str, step_times: list[float], loaded: dict, before_reset_peak: float, batch: int) -> None:
    after = memory_mb()
    measured = step_times[1:] or step_times
    print(json.dumps({"name": name, "episodes_per_s": batch * len(measured) / sum(measured),
                      "peak_rss_mb": max(before_reset_peak, after["peak"]), "loaded_rss_mb": loaded["rss"],
                      "train_peak_mb": after["peak"]}), flush=True)


# ----- workers (each in its own process) --------------------------------------------------------------------------

def run_ours(args: argparse.Namespace, lora: bool, checkpointing: bool) -> None:
    import torch

    from trainers.models.loading import load_policy, load_tokenizer
    from trainers.policy.config import PolicyConfig
    from trainers.policy.ppo import PPOTrainer
    from trainers.reward.scorer import RewardScorer

    torch.set_num_threads(args.threads)
    prompts = json.loads(Path(args.prompts).read_text())
    config = PolicyConfig(batch_size=args.batch, num_mini_batches=MINI_BATCHES, epochs=args.epochs,
                          response_length=args.response_length, learning_rate=LEARNING_RATE, init_kl_coef=KL_COEF,
                          temperature=1.0, missing_eos_penalty=1.0, lora=lora, lora_r=LORA["r"],
                          lora_alpha=LORA["lora_alpha"], lora_dropout=LORA["lora_dropout"],
                          gradient_checkpointing=checkpointing, seed=0)
    reward = RewardScorer.from_dirs([args.reward_model], norms=[(0.0, 1.0)])
    trainer = PPOTrainer(config, load_policy(args.policy), load_tokenizer(args.policy), prompts, reward)
    loaded = memory_mb()
    reset_peak()
    report(args.worker, timed_steps(trainer, args.iterations), loaded, loaded["peak"], args.batch)


def run_trl(args: argparse.Namespace, checkpointing: bool, lora: bool) -> None:
    import tempfile

    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer, TrainerCallback
    from trl.experimental.ppo import PPOConfig, PPOTrainer

    torch.set_num_threads(args.threads)
    tokenizer = AutoTokenizer.from_pretrained(args.policy, padding_side="left")
    dataset = Dataset.from_dict({"input_ids": json.loads(prompt_ids_file(Path(args.prompts)).read_text())})
    times: list[float] = []

    class StepTimer(TrainerCallback):
        def on_train_begin(self, *_, **__):
            self.last = time.perf_counter()

        def on_step_end(self, *_, **__):
            now = time.perf_counter()
            times.append(now - self.last)
            self.last = now

    torch.manual_seed(0)
    config = PPOConfig(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=args.batch,
                       gradient_accumulation_steps=1, num_mini_batches=MINI_BATCHES, num_ppo_epochs=args.epochs,
                       response_length=args.response_length, total_episodes=args.batch * args.iterations,
                       learning_rate=LEARNING_RATE, kl_coef=KL_COEF, temperature=1.0, stop_token="eos",
                       missing_eos_penalty=1.0, num_sample_generations=0, local_rollout_forward_batch_size=args.batch,
                       report_to=[], save_strategy="no", logging_steps=1, use_cpu=True, seed=0, disable_tqdm=True,
                       bf16=False, gradient_checkpointing=checkpointing)
    trainer = PPOTrainer(
        args=config, processing_class=tokenizer, model=AutoModelForCausalLM.from_pretrained(args.policy),
        ref_model=None if lora else AutoModelForCausalLM.from_pretrained(args.policy),
        reward_model=AutoModelForSequenceClassification.from_pretrained(args.reward_model, num_labels=1),
        value_model=AutoModelForSequenceClassification.from_pretrained(args.reward_model, num_labels=1),
        train_dataset=dataset, callbacks=[StepTimer()],
        peft_config=LoraConfig(task_type="CAUSAL_LM", **LORA) if lora else None,
    )
    loaded = memory_mb()
    reset_peak()
    trainer.train()
    report(args.worker, times, loaded, loaded["peak"], args.batch)


# ----- the orchestrator -------------------------------------------------------------------------------------------

def trl_python() -> Path:
    """The TRL venv's interpreter, creating the venv on first use."""
    import datasets
    import peft
    import torch
    import transformers

    import accelerate

    venv = OUT / f"trl-{TRL_VERSION}-venv"
    python = venv / "bin" / "python"
    broken = python.exists() and subprocess.run([python, "-c", "import trl.experimental.ppo, peft"],
                                                capture_output=True).returncode
    if not python.exists() or broken:
        print(f"creating {venv} (pip install trl=={TRL_VERSION}; a few minutes)", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", "--clear", venv], check=True)
        packages = [f"trl=={TRL_VERSION}", f"torch=={torch.__version__.split('+')[0]}",
                    f"transformers=={transformers.__version__}", f"accelerate=={accelerate.__version__}",
                    f"datasets=={datasets.__version__}", f"peft=={peft.__version__}"]
        subprocess.run([python, "-m", "pip", "install", "-q", *packages], check=True)
    return python


def prompt_ids_file(prompts: Path) -> Path:
    """Where `prepare` writes the prompts' ids (the policy's chat format): what TRL's PPOTrainer is given."""
    return prompts.with_suffix(".ids.json")


def prepare(work: Path, width: int | None, layers: int, model: Path | None = None) -> tuple[Path, Path, Path]:
    """(policy dir, reward-model dir, prompts file): the demo policy (or, with `width`, a GPT-2 of that width and
    `layers` blocks on the demo tokenizer, freshly initialised; or, with `model`, policy v0 of a project started on
    it), a seeded one-output head on it, the demo prompts (with `model`: bench/real_model.py's chat instructions)."""
    import torch
    from transformers import AutoModelForSequenceClassification, GPT2Config, GPT2LMHeadModel

    from assets.build_demo import ensure_demo_policy
    from assets.corpus import demo_prompts
    from bench.real_project import INSTRUCTIONS, project_policy
    from trainers.models.loading import load_chat_format, load_tokenizer

    policy = ensure_demo_policy() if model is None else project_policy(model)
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
        reward = AutoModelForSequenceClassification.from_pretrained(policy, num_labels=1)
        reward.config.pad_token_id = tokenizer.pad_token_id
        reward.save_pretrained(reward_model)
        tokenizer.save_pretrained(reward_model)
    prompts = work / f"prompts-{policy.name}.json"
    texts = demo_prompts()[0] if model is None else INSTRUCTIONS
    prompts.write_text(json.dumps(texts))
    prompt_ids_file(prompts).write_text(json.dumps(load_chat_format(policy, tokenizer).prompts_ids(texts)))
    return policy, reward_model, prompts


def run_worker(python: Path, worker: str, policy: Path, reward_model: Path, prompts: Path, args) -> dict:
    command = [str(python), __file__, "--worker", worker, "--policy", str(policy), "--reward-model", str(reward_model),
               "--prompts", str(prompts), "--iterations", str(args.iterations), "--threads", str(args.threads),
               "--batch", str(args.batch), "--response-length", str(args.response_length), "--epochs", str(args.epochs)]
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
    "trl-lora": (f"TRL {TRL_VERSION} PPOTrainer, LoRA r=8", "trl-lora"),
    "ours-lora": ("ours, LoRA r=8", "trl-lora"),
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
    parser.add_argument("--model", type=Path, default=None,
                        help="instead of the demo policy, this model folder or GGUF file (through init), with LoRA")
    parser.add_argument("--batch", type=int, help=f"prompts per iteration (default {BATCH}; with --model "
                        f"{REAL_MODEL['batch']})")
    parser.add_argument("--response-length", type=int, help=f"most response tokens (default {RESPONSE_LENGTH}; "
                        f"with --model {REAL_MODEL['response_length']})")
    parser.add_argument("--epochs", type=int, help=f"PPO epochs per iteration (default {EPOCHS})")
    parser.add_argument("--runs", nargs="+", choices=sorted(RUNS), help="runs to make (default: all; with --model, "
                        "ours-lora and trl-lora)")
    parser.add_argument("--worker", choices=sorted(RUNS), help=argparse.SUPPRESS)
    parser.add_argument("--policy", help=argparse.SUPPRESS)
    parser.add_argument("--reward-model", help=argparse.SUPPRESS)
    parser.add_argument("--prompts", help=argparse.SUPPRESS)
    args = parser.parse_args()
    defaults = dict(batch=BATCH, response_length=RESPONSE_LENGTH, epochs=EPOCHS) if args.model is None else REAL_MODEL
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.worker:
        checkpointing, lora = args.worker.endswith("checkpointing"), args.worker.endswith("lora")
        if args.worker.startswith("trl"):
            return run_trl(args, checkpointing, lora)
        return run_ours(args, lora=lora, checkpointing=checkpointing)

    work = OUT / "ppo_throughput"
    work.mkdir(parents=True, exist_ok=True)
    policy, reward_model, prompts = prepare(work, args.width, args.layers, args.model)
    trl = trl_python()
    chosen = args.runs or (["ours-lora"] if args.model else list(RUNS))
    runs = {worker: RUNS[worker] for worker in RUNS if worker in chosen or worker in [RUNS[r][1] for r in chosen]}
    results = {worker: run_worker(trl if worker.startswith("trl") else Path(sys.executable), worker, policy,
                                  reward_model, prompts, args) for worker in runs}
    model = ("the demo policy" if args.width is None else f"a GPT-2 {args.width} wide, {args.layers} blocks") \
        if args.model is None else str(args.model)
    print(f"\nPPO on {model} ({policy.name}), batch {args.batch}, response {args.response_length}, {args.epochs} "
          f"epochs, {MINI_BATCHES} mini-batch, float32, {args.iterations} iterations (first = warm-up), "
          f"{args.threads} CPU thread(s); × TRL: against the TRL run with the same LoRA and gradient checkpointing\n")
    print("| trainer | episodes/s | × TRL | peak RSS (MiB) | × TRL | added by training (MiB) | × TRL |")
    print("|---|---|---|---|---|---|---|")
    for worker, (label, baseline) in runs.items():
        r, t = results[worker], results[baseline]
        added, trl_added = r["train_peak_mb"] - r["loaded_rss_mb"], t["train_peak_mb"] - t["loaded_rss_mb"]
        print(f"| {label} | {r['episodes_per_s']:.3g} | {r['episodes_per_s'] / t['episodes_per_s']:.2f} | "
              f"{r['peak_rss_mb']:.0f} | {r['peak_rss_mb'] / t['peak_rss_mb']:.2f} | {added:.0f} | "
              f"{added / trl_added:.2f} |")
    (work / f"results-{policy.name}.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
