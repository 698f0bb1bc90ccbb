"""The GPU check: a ~0.5B Qwen2-shaped chat model, built from a config, through the whole loop in bf16 on one GPU.

One prepared script for a lent device (issue 11): it builds the model (random weights, a local BPE tokenizer with a
Qwen chat template and generation-config extras the sampler must ignore), starts a project on it (`init` with
conversational prompts), measures generation tokens/s, then runs a 2-round oracle loop (the `brevity_score`
annotator, HF generation, bf16), stopped during round 1's PPO and resumed once, and prints episodes/s, generation
tokens/s and peak GPU memory as a markdown table. `--size tiny` runs the same steps on a CPU in a minute or two.

`--accelerate FILE` then runs a 1-round loop job on the same project through the launcher, as `serve
--accelerate-config FILE` runs the Train tab's jobs: its reward and PPO phases under `accelerate launch --config_file
FILE` (issue 16), and adds a row: how it ran, PPO episodes/s and the peak GPU memory the job's processes took
(device-wide, polled, above what was in use before it started). Written for a lent GPU with accelerate/gpu-1.yaml;
never run on one yet (no GPU was lent to the task that wrote it); on a CPU, `--size tiny --accelerate
accelerate/cpu-2proc.yaml` runs the same steps.

    python bench/gpu_check.py                      # on the GPU machine (3 minutes on one H200: docs/benchmarks.md)
    python bench/gpu_check.py --accelerate accelerate/gpu-1.yaml    # the same, then the loop under accelerate
    python bench/gpu_check.py --size tiny          # the same steps on a CPU, as a smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from assets.corpus import build_corpus  # noqa: E402
from bench.tiny_models import build_tiny_qwen  # noqa: E402
from storage import Store  # noqa: E402
from storage import jobs as job_rows  # noqa: E402
from storage.metrics import read_metrics  # noqa: E402
from storage.policies import list_policies  # noqa: E402
from storage.prompts import list_prompts  # noqa: E402
from trainers.entry.worker import run_job  # noqa: E402
from trainers.jobs.launch_config import read_launch_config  # noqa: E402
from trainers.jobs.launcher import start_job  # noqa: E402
from trainers.loop.config import LoopConfig  # noqa: E402
from trainers.loop.project import start_project  # noqa: E402
from trainers.models.generation import HFGenerator  # noqa: E402
from trainers.models.loading import load_sampler_policy, load_tokenizer  # noqa: E402

QWEN_05B = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                num_key_value_heads=2, max_position_embeddings=32768)  # Qwen2.5-0.5B's shape
SIZES = {"0.5b": (QWEN_05B, 151936), "tiny": (None, None)}
LOOPS = {
    "0.5b": dict(rounds=2, prompts_per_round=64, samples_per_prompt=4, labels_per_round=128, queue_reserve=0,
                 reward_epochs=1, reward_lr=1e-5, reward_batch_size=16, policy_iterations=4, policy_batch_size=32,
                 policy_mini_batches=2, policy_epochs=2, policy_lr=1e-6, response_length=64, bf16=True,
                 oracle="labeling.queue.synthetic:brevity_score"),
    "tiny": dict(rounds=2, prompts_per_round=16, samples_per_prompt=2, labels_per_round=12, queue_reserve=0,
                 reward_epochs=1, policy_iterations=4, policy_batch_size=8, policy_mini_batches=2, policy_epochs=1,
                 response_length=16, oracle="labeling.queue.synthetic:brevity_score"),
}


def write_prompts(path: Path, count: int, seed: int) -> Path:
    """Conversational prompts from the demo corpus: a system turn, then a user turn asking about a sentence."""
    sentences = build_corpus(count, seed=seed)
    rows = [[{"role": "system", "content": "Answer in one short sentence."},
             {"role": "user", "content": f"What do you think of this review: {sentence}"}] for sentence in sentences]
    path.write_text("".join(json.dumps({"prompt": row}) + "\n" for row in rows))
    return path


def generation_tokens_per_s(model_dir: Path, prompts: list, bf16: bool, length: int) -> float:
    """Tokens sampled per second by the loop's generator, 4 samples per prompt."""
    generator = HFGenerator(load_sampler_policy(model_dir, bf16), load_tokenizer(model_dir))
    generator.generate(prompts[:4], 1, 4, 1.0, 1.0, seed=0)  # warm-up (kernels, caches)
    sync()
    started = time.perf_counter()
    groups = generator.generate(prompts, 4, length, 1.0, 1.0, seed=1)
    sync()
    return sum(s.num_tokens for group in groups for s in group) / (time.perf_counter() - started)


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def stop_after_first_ppo_iteration(store: Store, job_id: int, done: threading.Event) -> None:
    """Press Stop once round 1's PPO has logged an iteration (as a person would mid-run)."""
    while not done.is_set():
        if read_metrics(store, job_id, names=["ppo/score"]):
            job_rows.request_cancel(store, job_id)
            return
        time.sleep(0.5)


def run_loop(store: Store, settings: dict) -> tuple[int, list[str], float]:
    """Run the loop job in this process, stopped once and resumed; (job id, end states, seconds)."""
    job_id = job_rows.create_job(store, "loop", LoopConfig.from_dict(settings).to_dict())
    done = threading.Event()
    watcher = threading.Thread(target=stop_after_first_ppo_iteration, args=(store, job_id, done), daemon=True)
    watcher.start()
    started, states = time.perf_counter(), []
    states.append(run_job(store, job_rows.claim_job(store, job_id, pid=os.getpid())).value)
    done.set()
    job_rows.requeue_job(store, job_id)
    states.append(run_job(store, job_rows.claim_job(store, job_id, pid=os.getpid())).value)
    return job_id, states, time.perf_counter() - started


class GPUMemoryPeak(threading.Thread):
    """Polls the device-wide GPU memory in use (every process's), keeping its peak above the level at the start."""

    def __init__(self):
        super().__init__(daemon=True)
        self.done, self.base, self.peak = threading.Event(), self.in_use(), 0

    @staticmethod
    def in_use() -> int:
        if not torch.cuda.is_available():
            return 0
        free, total = torch.cuda.mem_get_info()
        return total - free

    def run(self) -> None:
        while not self.done.wait(0.2):
            self.peak = max(self.peak, self.in_use() - self.base)


def run_launched_loop(store: Store, settings: dict, config: str) -> tuple[int, str, float, float]:
    """A 1-round loop job through the launcher under `config`; (job id, end state, seconds, peak GPU GiB)."""
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    peak = GPUMemoryPeak()
    peak.start()
    started = time.perf_counter()
    job_id = start_job(store, "loop", LoopConfig.from_dict({**settings, "rounds": 1}).to_dict(), config)
    while job_rows.get_job(store, job_id).status.active:
        time.sleep(0.5)
    peak.done.set()
    peak.join()
    job = job_rows.get_job(store, job_id)
    if job.error:
        print(job.error, file=sys.stderr)
    return job_id, job.status.value, time.perf_counter() - started, peak.peak / 2**30


def median_episodes_per_s(store: Store, job_id: int) -> float:
    episodes = sorted(r["value"] for r in read_metrics(store, job_id, names=["ppo/episodes_per_s"]))
    return episodes[len(episodes) // 2] if episodes else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=list(SIZES), default="0.5b" if torch.cuda.is_available() else "tiny")
    parser.add_argument("--work", default=None, help="folder for the model and the store (default: a temp folder)")
    parser.add_argument("--accelerate", default=None, metavar="FILE",
                        help="then run a 1-round loop job with its training phases under accelerate launch "
                             "--config_file FILE")
    args = parser.parse_args()
    launch = read_launch_config(args.accelerate) if args.accelerate else None  # a bad file: one line, before any work
    work = Path(args.work or tempfile.mkdtemp(prefix="gpu-check-"))
    sizes, rows = SIZES[args.size]
    settings = LOOPS[args.size]
    model_dir = build_tiny_qwen(work / "qwen2", sizes=sizes, vocab_rows=rows)
    parameters = sum(p.numel() for p in load_sampler_policy(model_dir).parameters())
    store = Store(work / "project.db")
    start_project(store, model_dir, prompts=write_prompts(work / "train.jsonl", 256, seed=1),
                  heldout=write_prompts(work / "heldout.jsonl", 16, seed=2))
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    prompts = [p.content for p in list_prompts(store, heldout=False)][:64]
    tokens_per_s = generation_tokens_per_s(model_dir, prompts, settings.get("bf16", False), settings["response_length"])
    job_id, states, seconds = run_loop(store, settings)
    peak = torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else float("nan")
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"
    print("\n| model | device | parameters | loop states | policy versions | PPO episodes/s (median) | "
          "generation tokens/s | peak GPU memory GiB | loop seconds |")
    print("|---|---|---:|---|---:|---:|---:|---:|---:|")
    print(f"| Qwen2-shaped {args.size} | {device} | {parameters / 1e6:.1f}M | {' -> '.join(states)} | "
          f"{len(list_policies(store))} | {median_episodes_per_s(store, job_id):.1f} | {tokens_per_s:.0f} | "
          f"{peak:.1f} | {seconds:.0f} |")
    ok = states == ["cancelled", "completed"] and len(list_policies(store)) == 3
    if launch is not None:
        launched_id, state, launched_s, launched_peak = run_launched_loop(store, settings, args.accelerate)
        print(f"| Qwen2-shaped {args.size}, 1 round under accelerate launch: {launch.describe()} | {device} | "
              f"{parameters / 1e6:.1f}M | {state} | {len(list_policies(store))} | "
              f"{median_episodes_per_s(store, launched_id):.1f} | | {launched_peak:.1f} (its processes, polled) | "
              f"{launched_s:.0f} |")
        ok = ok and state == "completed" and len(list_policies(store)) == 4
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
