"""The GPU check: a ~0.5B Qwen2-shaped chat model, built from a config, through the whole loop in bf16 on one GPU.

One prepared script for a lent device (issue 11): it builds the model (random weights, a local BPE tokenizer with a
Qwen chat template and generation-config extras the sampler must ignore), starts a project on it (`init` with
conversational prompts), measures generation tokens/s, then runs a 2-round oracle loop (the `brevity_score`
annotator, HF generation, bf16), stopped during round 1's PPO and resumed once, and prints episodes/s, generation
tokens/s and peak GPU memory as a markdown table. `--size tiny` runs the same steps on a CPU in a minute or two.

    python bench/gpu_check.py                      # on the GPU machine (about 5 minutes on one H200)
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
from storage import Store  # noqa: E402
from storage import jobs as job_rows  # noqa: E402
from storage.metrics import read_metrics  # noqa: E402
from storage.policies import list_policies  # noqa: E402
from storage.prompts import list_prompts  # noqa: E402
from tests.tiny_models import build_tiny_qwen  # noqa: E402
from trainers.generation import HFGenerator  # noqa: E402
from trainers.loop_config import LoopConfig  # noqa: E402
from trainers.models import load_sampler_policy, load_tokenizer  # noqa: E402
from trainers.project import start_project  # noqa: E402
from trainers.worker import run_job  # noqa: E402

QWEN_05B = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                num_key_value_heads=2, max_position_embeddings=32768)  # Qwen2.5-0.5B's shape
SIZES = {"0.5b": (QWEN_05B, 151936), "tiny": (None, None)}
LOOPS = {
    "0.5b": dict(rounds=2, prompts_per_round=64, samples_per_prompt=4, labels_per_round=128, queue_reserve=0,
                 reward_epochs=1, reward_lr=1e-5, reward_batch_size=16, ppo_iterations=4, ppo_batch_size=32,
                 ppo_mini_batches=2, ppo_epochs=2, ppo_lr=1e-6, response_length=64, bf16=True,
                 oracle="labeling.synthetic:brevity_score"),
    "tiny": dict(rounds=2, prompts_per_round=16, samples_per_prompt=2, labels_per_round=12, queue_reserve=0,
                 reward_epochs=1, ppo_iterations=4, ppo_batch_size=8, ppo_mini_batches=2, ppo_epochs=1,
                 response_length=16, oracle="labeling.synthetic:brevity_score"),
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=list(SIZES), default="0.5b" if torch.cuda.is_available() else "tiny")
    parser.add_argument("--work", default=None, help="folder for the model and the store (default: a temp folder)")
    args = parser.parse_args()
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
    episodes = [r["value"] for r in read_metrics(store, job_id, names=["ppo/episodes_per_s"])]
    peak = torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else float("nan")
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"
    print("\n| model | device | parameters | loop states | policy versions | PPO episodes/s (median) | "
          "generation tokens/s | peak GPU memory GiB | loop seconds |")
    print("|---|---|---:|---|---:|---:|---:|---:|---:|")
    print(f"| Qwen2-shaped {args.size} | {device} | {parameters / 1e6:.1f}M | {' -> '.join(states)} | "
          f"{len(list_policies(store))} | {sorted(episodes)[len(episodes) // 2]:.1f} | {tokens_per_s:.0f} | "
          f"{peak:.1f} | {seconds:.0f} |")
    return 0 if states == ["cancelled", "completed"] and len(list_policies(store)) == 3 else 1


if __name__ == "__main__":
    sys.exit(main())
