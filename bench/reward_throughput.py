"""Reward-model training throughput: our PreferenceTrainer vs TRL's RewardTrainer, same data, model and batch size.

Both train the same GPT-2 (built from a config, demo-sized by default) with a one-output head on the same strict
preference pairs (corpus sentences ranked by the demo's lexicon), at the same batch size, learning rate, precision
and without gradient checkpointing (TRL turns it on by default; it trades speed for memory). Ours runs as in the
studio: metrics written to a store each logging step and the job's cancel flag checked. Each trainer runs
`--repeats` times, alternating; the table shows training pairs per second (Trainer's `train_runtime`, so
tokenisation is excluded for both) and pairs per CPU second of this process, which a CPU shared with other work
disturbs less (on a GPU, read the wall-clock column). Ratios are of the medians.

    python bench/reward_throughput.py                          # CPU, demo-sized model
    python bench/reward_throughput.py --pairs 4096 --n-embd 512 --n-layer 8 --batch-size 64 --bf16   # a GPU
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402
from transformers.trainer_callback import PrinterCallback, ProgressCallback  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402
from trl import RewardConfig as TRLRewardConfig  # noqa: E402
from trl import RewardTrainer  # noqa: E402

from assets.build_demo import train_tokenizer  # noqa: E402
from assets.corpus import build_corpus  # noqa: E402
from assets.lexicon import sentiment_score  # noqa: E402
from storage import Store  # noqa: E402
from storage.jobs import claim_job, create_job  # noqa: E402
from trainers.jobs.layer import StoreReporter  # noqa: E402
from trainers.models.loading import load_chat_format, load_reward_model, load_tokenizer  # noqa: E402
from trainers.reward.config import RewardConfig  # noqa: E402
from trainers.reward.data import PreferenceCollator, PreferenceExample, tokenize_examples  # noqa: E402
from trainers.reward.trainer import PreferenceTrainer, ReporterCallback, training_arguments  # noqa: E402


def strict_pairs(n: int, seed: int) -> list[tuple[str, str, str]]:
    """(prompt, chosen, rejected): two continuations of the same opening with different lexicon scores."""
    by_prompt: dict[str, list[str]] = {}
    for sentence in build_corpus(max(4000, 4 * n), seed=seed):
        words = sentence.split(" ")
        by_prompt.setdefault(" ".join(words[:3]), []).append(" " + " ".join(words[3:]))
    rng, pairs = random.Random(seed), []
    prompts = sorted(by_prompt)
    while len(pairs) < n:
        prompt = rng.choice(prompts)
        a, b = rng.sample(by_prompt[prompt], 2) if len(by_prompt[prompt]) > 1 else (None, None)
        if a is not None and sentiment_score(a) != sentiment_score(b):
            pairs.append((prompt, a, b) if sentiment_score(a) > sentiment_score(b) else (prompt, b, a))
    return pairs


def build_policy(path: Path, args: argparse.Namespace) -> None:
    tokenizer = train_tokenizer(build_corpus(4000, seed=0), 768)
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=128, n_embd=args.n_embd, n_layer=args.n_layer,
                        n_head=args.n_head, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                        bos_token_id=tokenizer.eos_token_id, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    GPT2LMHeadModel(config).save_pretrained(path)
    tokenizer.save_pretrained(path)


def run_ours(policy: Path, pairs, args, work: Path) -> tuple[float, float]:
    tokenizer = load_tokenizer(policy)
    config = RewardConfig(epochs=args.epochs, learning_rate=1e-4, batch_size=args.batch_size, logging_steps=10,
                          bf16=args.bf16, val_fraction=0.0)
    examples = [PreferenceExample(i, i, p, c, r, 1.0) for i, (p, c, r) in enumerate(pairs)]
    store = Store(work / f"bench-{uuid.uuid4().hex}.db")
    job_id = create_job(store, "reward", {})
    claim_job(store, job_id, os.getpid())
    torch.manual_seed(0)
    trainer = PreferenceTrainer(
        model=load_reward_model(policy), args=training_arguments(config, str(work / "ours"), 0, has_val=False),
        train_dataset=tokenize_examples(load_chat_format(policy, tokenizer), examples),
        data_collator=PreferenceCollator(tokenizer.pad_token_id),
        processing_class=tokenizer, callbacks=[ReporterCallback(StoreReporter(store, job_id))],
    )
    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    return timed_train(trainer, len(pairs) * args.epochs)


def run_trl(policy: Path, pairs, args, work: Path) -> tuple[float, float]:
    tokenizer = load_tokenizer(policy)
    tokenizer.padding_side = "right"
    dataset = Dataset.from_list([{"prompt": p, "chosen": c, "rejected": r} for p, c, r in pairs])
    config = TRLRewardConfig(output_dir=str(work / "trl"), num_train_epochs=args.epochs, learning_rate=1e-4,
                             per_device_train_batch_size=args.batch_size, logging_steps=10, save_strategy="no",
                             report_to="none", activation_checkpointing=False, bf16=args.bf16, disable_tqdm=True,
                             seed=0, max_length=128, dataloader_pin_memory=torch.cuda.is_available())
    torch.manual_seed(0)
    trainer = RewardTrainer(model=load_reward_model(policy), args=config, train_dataset=dataset,
                            processing_class=tokenizer)
    trainer.remove_callback(PrinterCallback)
    return timed_train(trainer, len(trainer.train_dataset) * args.epochs)


def timed_train(trainer, pairs_seen: int) -> tuple[float, float]:
    """(pairs per wall-clock second, pairs per CPU second of this process) of `trainer.train()`."""
    cpu = time.process_time()
    wall = trainer.train().metrics["train_runtime"]
    return pairs_seen / wall, pairs_seen / (time.process_time() - cpu)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=512, help="strict preference pairs")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5, help="runs of each trainer, alternating")
    parser.add_argument("--n-embd", type=int, default=128)
    parser.add_argument("--n-layer", type=int, default=4)
    parser.add_argument("--n-head", type=int, default=4)
    parser.add_argument("--bf16", action="store_true", help="bfloat16 mixed precision for both (GPU)")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    pairs = strict_pairs(args.pairs, seed=0)
    with tempfile.TemporaryDirectory(prefix="reward-bench-") as tmp:
        work = Path(tmp)
        build_policy(work / "policy", args)
        runs = {"ours (PreferenceTrainer)": [], "TRL RewardTrainer": []}
        for _ in range(args.repeats):
            runs["ours (PreferenceTrainer)"].append(run_ours(work / "policy", pairs, args, work))
            runs["TRL RewardTrainer"].append(run_trl(work / "policy", pairs, args, work))
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else f"CPU, {args.threads} threads"
    params = sum(p.numel() for p in GPT2LMHeadModel(GPT2Config(n_embd=args.n_embd, n_layer=args.n_layer,
                                                                n_head=args.n_head, vocab_size=768)).parameters())
    print(f"\n{args.pairs} strict pairs x {args.epochs} epoch(s), batch {args.batch_size}, GPT-2 ~{params / 1e6:.1f}M "
          f"params, {'bf16' if args.bf16 else 'fp32'}, {device}")
    print(f"{'trainer':<26}{'pairs/s median':>15}{'best':>7}{'pairs/CPU-s median':>20}   pairs/s of each run")
    for name, values in runs.items():
        wall, cpu = [v[0] for v in values], [v[1] for v in values]
        print(f"{name:<26}{statistics.median(wall):>15.1f}{max(wall):>7.1f}{statistics.median(cpu):>20.1f}   "
              f"{', '.join(f'{v:.0f}' for v in wall)}")
    ours, trl = runs["ours (PreferenceTrainer)"], runs["TRL RewardTrainer"]
    for i, what in ((0, "pairs/s"), (1, "pairs/CPU-s")):
        ratio = statistics.median(v[i] for v in ours) / statistics.median(v[i] for v in trl)
        print(f"ours / TRL, median {what:<12}{ratio:>6.2f}x   (target >= 1.0x)")


if __name__ == "__main__":
    main()
