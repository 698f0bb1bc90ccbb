"""Supervised fine-tuning (the RLHF pipeline's first stage) on TRL's `SFTTrainer`: the policy learns to write the
demonstrations; DPO's sibling in this room.

What the studio adds to TRL's trainer (`StudioSFTTrainer`):
- the token ids are the policy's `ChatFormat`'s (`sft_rows`: the prompt as every other path renders it, the answer
  closed by the end-of-turn id, which TRL adds to no pre-tokenized row), with a `completion_mask` and
  `completion_only_loss=True`, so the loss is on the answer's tokens only: prompt tokens carry no gradient;
- nothing is cut (`max_length=None`): a demonstration longer than the context is left out before the run
  (`trainers.jobs.sft_data`);
- a held-out share of the demonstrations (never trained on) measures `sft/heldout_loss` every `eval_every` steps and
  after the last;
- the job layer's reporter (`SFTReporterCallback`): metrics `sft/...`, progress every step, a stop within one step
  (the state is saved first);
- resume: TRL's checkpoints every `save_every` steps in `state_dir` (the newest complete one is resumed);
- no telemetry.

    result = train_sft(config, policy, tokenizer, chat, examples, reporter=reporter, state_dir=folder)
    save_sft_policy(result, path)   # a plain HF policy directory, LoRA merged (the job layer registers it)
"""

from __future__ import annotations

import copy
import random
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from datasets import Dataset
from transformers import PreTrainedModel, PreTrainedTokenizerBase
from trl import SFTConfig as TRLSFTConfig
from trl import SFTTrainer

from ..models.chat_format import ChatFormat
from ..reporting import Reporter
from .checkpoint import write_policy
from .dpo import FiniteSteps, StepReporterCallback, quiet_trl, train_reporting
from .setup import with_lora
from .sft_config import SFTConfig, SFTExample

CONFIG_FILE = "sft_config.json"
# TRL's logged names -> the studio's
METRIC_NAMES = {"loss": "sft/loss", "mean_token_accuracy": "sft/token_accuracy", "entropy": "sft/entropy",
                "grad_norm": "sft/grad_norm", "learning_rate": "sft/learning_rate", "eval_loss": "sft/heldout_loss",
                "eval_mean_token_accuracy": "sft/heldout_token_accuracy"}


def sft_rows(chat: ChatFormat, examples: list[SFTExample]) -> list[dict]:
    """TRL's pre-tokenized columns from the policy's chat format: {input_ids, completion_mask}; the answer is closed by
    the end-of-turn id (once), as the policy writes it, and only its tokens are marked for the loss."""
    prompts = chat.prompts_ids([e.prompt for e in examples])
    answers = chat.responses_ids([e.text for e in examples])
    return [{"input_ids": p + a, "completion_mask": [0] * len(p) + [1] * len(a)}
            for p, a in zip(prompts, answers, strict=True)]


def heldout_split(examples: list[SFTExample], share: float, seed: int) -> tuple[list[SFTExample], list[SFTExample]]:
    """(training, held out): `share` of the examples (rounded down) held out at random by `seed`, none when that
    leaves no example on either side."""
    count = int(len(examples) * share)
    if count < 1 or count >= len(examples):
        return examples, []
    held = set(random.Random(seed).sample(range(len(examples)), count))
    return ([e for i, e in enumerate(examples) if i not in held], [e for i, e in enumerate(examples) if i in held])


class StudioSFTTrainer(FiniteSteps, SFTTrainer):
    """TRL's SFTTrainer on the studio's token ids, stopping at the first non-finite loss, with no telemetry."""

    run_name = "SFT"

    def _send_telemetry(self):
        """Nothing leaves the machine: a studio trains on its team's data."""


class SFTReporterCallback(StepReporterCallback):
    """The step reporter with the trainer's logs as `sft/...`; the held-out loss is measured after the last step too
    (`evaluates`)."""

    run_name = "SFT"

    def __init__(self, reporter: Reporter, evaluates: bool):
        super().__init__(reporter, METRIC_NAMES)
        self.evaluates = evaluates

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == state.max_steps:
            control.should_evaluate = self.evaluates
        super().on_step_end(args, state, control, **kwargs)


@dataclass
class SFTResult:
    """A finished run: its trainer (the trained policy inside), the steps done, the last metrics and how many
    demonstrations trained and were held out."""

    trainer: StudioSFTTrainer
    config: SFTConfig
    steps: int
    metrics: dict
    trained: int
    heldout: int


def training_arguments(config: SFTConfig, output_dir: str, save: bool, evaluates: bool) -> TRLSFTConfig:
    """TRL's settings for the run: loss on the completion only, no truncation, no packing, no reports or progress
    bars, checkpoints every `save_every` steps when `save` (only the newest kept)."""
    saving = {"save_strategy": "steps", "save_steps": config.save_every, "save_total_limit": 1} if save else \
        {"save_strategy": "no"}
    evaluation = {"eval_strategy": "steps", "eval_steps": config.eval_every,
                  "per_device_eval_batch_size": config.batch_size} if evaluates else {"eval_strategy": "no"}
    return TRLSFTConfig(
        output_dir=output_dir, per_device_train_batch_size=config.batch_size, num_train_epochs=config.epochs,
        learning_rate=config.learning_rate, lr_scheduler_type="linear", warmup_steps=config.warmup_ratio,
        weight_decay=config.weight_decay, max_grad_norm=config.max_grad_norm, logging_steps=config.logging_steps,
        report_to="none", seed=config.seed, data_seed=config.seed, disable_tqdm=True, bf16=config.bf16,
        activation_checkpointing=config.gradient_checkpointing, max_length=None, packing=False,
        completion_only_loss=True, use_cpu=not torch.cuda.is_available(),
        dataloader_pin_memory=torch.cuda.is_available(), **saving, **evaluation)


def train_sft(config: SFTConfig, policy: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, chat: ChatFormat,
              examples: list[SFTExample], reporter: Reporter | None = None,
              state_dir: str | Path | None = None) -> SFTResult:
    """Train `policy` on `examples` (the caller leaves out what does not fit), holding out `heldout_share` of them for
    the held-out loss. Resumes from `state_dir`'s newest complete checkpoint; raises JobCancelled (after saving one)
    when the reporter says stop."""
    config.check()
    if tokenizer.pad_token_id is None:
        raise ValueError("the tokenizer has no pad token; the policy's loader sets one")
    reporter = reporter or Reporter()
    state_dir = Path(state_dir) if state_dir is not None else None
    training, heldout = heldout_split(examples, config.heldout_share, config.seed)
    torch.manual_seed(config.seed)  # the adapters' initialisation
    if config.lora:
        policy = with_lora(policy, config)
    callback = SFTReporterCallback(reporter, evaluates=bool(heldout))
    with tempfile.TemporaryDirectory(prefix="sft-trainer-") as scratch:
        output_dir = str(state_dir) if state_dir is not None else scratch
        with quiet_trl():
            trainer = StudioSFTTrainer(
                model=policy, args=training_arguments(config, output_dir, state_dir is not None, bool(heldout)),
                train_dataset=Dataset.from_list(sft_rows(chat, training)),
                eval_dataset=Dataset.from_list(sft_rows(chat, heldout)) if heldout else None,
                processing_class=tokenizer, callbacks=[callback])
        train_reporting(trainer, callback, state_dir, "SFT")
    return SFTResult(trainer, config, trainer.state.global_step, dict(callback.last), len(training), len(heldout))


def save_sft_policy(result: SFTResult, path: str | Path) -> None:
    """A plain Hugging Face policy directory with the run's settings; LoRA is merged and no adapter is kept, so a
    later LoRA run starts fresh adapters on the SFT weights (its reference then is the SFT version, not the base)."""
    trainer = result.trainer
    policy = trainer.accelerator.unwrap_model(trainer.model)
    if result.config.lora:
        policy = copy.deepcopy(policy).merge_and_unload()
    write_policy(policy, trainer.processing_class, path, False,
                 {"steps": result.steps, "trained": result.trained, "heldout": result.heldout,
                  **asdict(result.config)}, CONFIG_FILE)
