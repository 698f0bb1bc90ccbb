"""Builds the embedded demo: a byte-level BPE tokenizer and a tiny GPT-2 SFT policy trained on the review corpus.

The built files ship in assets/demo_policy/, so the studio starts without training; `ensure_demo_policy()` rebuilds
them when they are missing. Rebuild the shipped files with:

    python -m assets.build_demo            # about 20 s on 2 CPU cores
    python -m assets.build_demo --out /tmp/demo --steps 50 --seed 1

The build is deterministic for a seed and a step count (on the same machine and thread count): same tokenizer,
same weights. The tokenizer has a pad token distinct from EOS and pads on the left, as generation and PPO need.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

from assets import DEMO_POLICY_DIR
from assets.corpus import build_corpus

EOS_TOKEN = "<|endoftext|>"
PAD_TOKEN = "<|pad|>"
DEFAULT_STEPS = 80
_REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


@dataclass
class DemoConfig:
    """Sizes and optimiser settings of the demo build (the step count and seed are arguments of `build_demo`)."""

    num_sentences: int = field(default=4000, metadata={"help": "Review sentences in the SFT corpus."})
    vocab_size: int = field(default=768, metadata={"help": "BPE vocabulary size, special tokens included."})
    n_positions: int = field(default=64, metadata={"help": "Context length of the policy, in tokens."})
    n_embd: int = field(default=128, metadata={"help": "Width of the transformer."})
    n_layer: int = field(default=4, metadata={"help": "Number of transformer blocks."})
    n_head: int = field(default=4, metadata={"help": "Attention heads per block."})
    batch_size: int = field(default=64, metadata={"help": "Sentences per optimiser step."})
    learning_rate: float = field(default=3e-3, metadata={"help": "Peak AdamW learning rate (cosine decay to 10%)."})
    warmup_steps: int = field(default=10, metadata={"help": "Linear warm-up steps."})


def train_tokenizer(sentences: list[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer on `sentences`; EOS is id 0, pad is id 1; pads on the left; adds no specials."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, special_tokens=[EOS_TOKEN, PAD_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tokenizer.train_from_iterator(sentences, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token=EOS_TOKEN, bos_token=EOS_TOKEN, pad_token=PAD_TOKEN,
        padding_side="left", clean_up_tokenization_spaces=False,
    )


def _encode(tokenizer: PreTrainedTokenizerFast, sentences: list[str],
            max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded (input_ids, attention_mask) of each sentence followed by EOS."""
    ids = [x[: max_len - 1] + [tokenizer.eos_token_id] for x in tokenizer(sentences)["input_ids"]]
    width = max(len(x) for x in ids)
    input_ids = torch.full((len(ids), width), tokenizer.pad_token_id, dtype=torch.long)  # (N, T)
    attention_mask = torch.zeros((len(ids), width), dtype=torch.long)  # (N, T)
    for row, x in enumerate(ids):
        input_ids[row, : len(x)] = torch.tensor(x)
        attention_mask[row, : len(x)] = 1
    return input_ids, attention_mask


def _learning_rate(step: int, steps: int, config: DemoConfig) -> float:
    if step < config.warmup_steps:
        return config.learning_rate * (step + 1) / config.warmup_steps
    progress = (step - config.warmup_steps) / max(1, steps - config.warmup_steps)
    return config.learning_rate * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def train_policy(tokenizer: PreTrainedTokenizerFast, sentences: list[str], steps: int, seed: int,
                 config: DemoConfig, log: Callable[[str], None]) -> tuple[GPT2LMHeadModel, float]:
    """A tiny GPT-2 trained for `steps` steps on sentence+EOS examples; returns the model and its last loss."""
    torch.manual_seed(seed)
    model_config = GPT2Config(
        vocab_size=len(tokenizer), n_positions=config.n_positions, n_embd=config.n_embd, n_layer=config.n_layer,
        n_head=config.n_head, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    model = GPT2LMHeadModel(model_config)
    input_ids, attention_mask = _encode(tokenizer, sentences, config.n_positions)
    labels = input_ids.masked_fill(attention_mask == 0, -100)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate, betas=(0.9, 0.98), weight_decay=0.01)
    batches = torch.Generator().manual_seed(seed)
    model.train()
    loss = torch.tensor(float("nan"))
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = _learning_rate(step, steps, config)
        rows = torch.randint(len(sentences), (config.batch_size,), generator=batches)
        width = int(attention_mask[rows].sum(1).max())
        loss = model(input_ids=input_ids[rows, :width], attention_mask=attention_mask[rows, :width],
                     labels=labels[rows, :width]).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if (step + 1) % max(1, steps // 10) == 0 or step + 1 == steps:
            log(f"demo policy: step {step + 1}/{steps}, loss {loss.item():.3f}")
    model.eval()
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = tokenizer.eos_token_id
    return model, loss.item()


def build_demo(out_dir: str | Path, seed: int = 0, steps: int = DEFAULT_STEPS, config: DemoConfig | None = None,
               log: Callable[[str], None] = print) -> Path:
    """Builds tokenizer + SFT policy into `out_dir` (replaced whole; written to a temp dir first) and returns it."""
    config = config or DemoConfig()
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    sentences = build_corpus(config.num_sentences, seed=seed)
    tokenizer = train_tokenizer(sentences, config.vocab_size)
    tokenizer.model_max_length = config.n_positions
    log(f"demo tokenizer: {len(tokenizer)} tokens from {len(sentences)} sentences")
    model, loss = train_policy(tokenizer, sentences, steps, seed, config, log)
    with tempfile.TemporaryDirectory(dir=out_dir.parent, prefix=f".{out_dir.name}-") as tmp:
        staging = Path(tmp) / out_dir.name
        tokenizer.save_pretrained(staging)
        model.save_pretrained(staging)
        info = {"seed": seed, "steps": steps, "final_loss": round(loss, 4), "config": asdict(config),
                "parameters": sum(p.numel() for p in model.parameters())}
        (staging / "build_info.json").write_text(json.dumps(info, indent=2) + "\n")
        if out_dir.exists():
            shutil.rmtree(out_dir)
        staging.rename(out_dir)
    log(f"demo policy: {info['parameters']:,} parameters, loss {loss:.3f}, "
        f"built in {time.perf_counter() - started:.1f} s into {out_dir}")
    return out_dir


def ensure_demo_policy(log: Callable[[str], None] = print) -> Path:
    """The shipped demo policy directory; builds it there first (about 20 s on 2 cores) when files are missing."""
    if not all((DEMO_POLICY_DIR / name).is_file() for name in _REQUIRED_FILES):
        log(f"demo policy missing in {DEMO_POLICY_DIR}; building it (about 20 s)")
        build_demo(DEMO_POLICY_DIR, log=log)
    return DEMO_POLICY_DIR


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Build the demo tokenizer and SFT policy.")
    parser.add_argument("--out", type=Path, default=DEMO_POLICY_DIR, help="output directory (replaced)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the corpus, the init and the batches")
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS, help="optimiser steps")
    args = parser.parse_args(argv)
    torch.set_num_threads(min(2, torch.get_num_threads()))
    build_demo(args.out, seed=args.seed, steps=args.steps)


if __name__ == "__main__":
    main()
