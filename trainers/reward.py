"""Reward model: Bradley-Terry with ties, trained from the store's labels on a Hugging Face `Trainer`.

    result = train_reward_model(store, RewardConfig(ensemble=1), job_id=job.id)
    scorer = RewardScorer.from_store(store)          # the newest reward model (all its ensemble members)
    rewards = scorer.score(prompts, responses)       # (N,) normalised: mean 0, std 1 on the policy's samples

The model is the SFT policy (the root of the newest policy's lineage) with a one-output head
(`AutoModelForSequenceClassification`) reading the last real token of `prompt + response + EOS`; its scores are
normalised on the newest policy's samples. Every current label except skips is an example with target p = 1, 0 or 0.5
(ties; "both bad" too unless `both_bad_as_tie` is off), trained with `trainers.losses.preference_loss`. Validation
pairs are chosen by pair id, so one pair's labels never straddle the split. With `ensemble` K > 1, K members train
on bootstrap resamples of the training labels; their disagreement picks the next pairs (`labeling.selection`).

Each member is a plain HF directory under `<store data dir>/reward_models/` with `reward_info.json` (labels used,
metrics, normalisation, ensemble index); it is written under a temporary name, renamed when complete, and only then
registered in the store. Training runs on `transformers.Trainer`, so `accelerate launch` / DeepSpeed work unchanged.
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import shutil
import tempfile
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence

import numpy as np
import torch
from datasets import Dataset
from transformers import AutoConfig, PreTrainedModel, PreTrainedTokenizerBase, Trainer, TrainerCallback, TrainingArguments
from transformers.trainer_callback import PrinterCallback, ProgressCallback
from transformers.utils import logging as hf_logging

from storage import Store, StudioError
from storage.errors import InvalidInput, NotFound
from storage.jobs import cancel_requested
from storage.generations import SAMPLE_SOURCE, list_generations
from storage.labels import count_labels, labeled_pairs
from storage.metrics import last_step, log_metrics
from storage.policies import get_policy, latest_policy, root_policy
from storage.prompts import get_prompt
from storage.reward_models import add_reward_model, latest_reward_models
from storage.types import Policy
from trainers.losses import preference_loss
from trainers.models import disable_dropout, load_reward_model, load_tokenizer

INFO_FILE = "reward_info.json"
METRIC_NAMES = {"loss": "reward/loss", "accuracy": "reward/accuracy", "val_loss": "reward/val_loss",
                "val_accuracy": "reward/val_accuracy", "val_tie_logloss": "reward/tie_logloss",
                "learning_rate": "reward/learning_rate", "grad_norm": "reward/grad_norm"}


class RewardTrainingCancelled(StudioError):
    """The job's cancel flag was set during reward training; nothing was registered."""


@dataclass
class RewardConfig:
    epochs: float = field(default=12.0, metadata={"help": "Passes over the training labels (demo: 12; real models: 1-2)."})
    learning_rate: float = field(default=2e-3, metadata={"help": "Peak AdamW learning rate, linear decay (demo: 2e-3; real models: ~1e-5)."})
    batch_size: int = field(default=16, metadata={"help": "Labelled pairs per optimiser step and device."})
    weight_decay: float = field(default=0.1, metadata={"help": "AdamW weight decay (regularises the small label sets)."})
    warmup_ratio: float = field(default=0.1, metadata={"help": "Fraction of the steps spent warming the learning rate up."})
    ensemble: int = field(default=1, metadata={"help": "Members K; K > 1 trains each on a bootstrap resample of the labels."})
    val_fraction: float = field(default=0.2, metadata={"help": "Fraction of labelled pairs held out for validation."})
    both_bad_as_tie: bool = field(default=True, metadata={"help": "Train 'both bad' labels as ties (off: leave them out)."})
    margin: float = field(default=0.0, metadata={"help": "The preferred response must lead by this margin (0: none); "
                                                         "imported labels with a margin of their own keep theirs."})
    label_noise: float = field(default=0.0, metadata={"help": "Label-noise rate eps: P = (1-eps)*sigmoid(d) + eps/2."})
    max_length: int = field(default=512, metadata={"help": "Tokens of prompt + response kept (from the end); capped by the model's context."})
    bf16: bool = field(default=False, metadata={"help": "bfloat16 mixed precision (GPUs that support it)."})
    activation_checkpointing: bool = field(default=False, metadata={"help": "Recompute activations to save memory (slower)."})
    group_by_length: bool = field(default=True, metadata={"help": "Batch pairs of similar length (less padding, faster)."})
    logging_steps: int = field(default=10, metadata={"help": "Optimiser steps between metrics, validation and cancel checks."})
    norm_samples: int = field(default=1024, metadata={"help": "Policy samples scored for the reward mean/std normalisation."})
    policy_id: int | None = field(default=None, metadata={"help": "Policy version whose samples normalise the rewards (default: newest)."})
    init_policy_id: int | None = field(default=None, metadata={"help": "Policy version the model starts from (default: that policy's SFT root)."})
    round: int = field(default=0, metadata={"help": "Loop round that trains this reward model (0 outside the loop)."})
    seed: int = field(default=0, metadata={"help": "Seed of the split, the bootstrap, the head's init and the batches."})

    def check(self) -> None:
        """Raises InvalidInput, in one line, for an out-of-range setting."""
        checks = [(self.epochs > 0, f"epochs must be positive, got {self.epochs}"),
                  (self.learning_rate > 0, f"learning rate must be positive, got {self.learning_rate}"),
                  (self.batch_size >= 1, f"batch size must be at least 1, got {self.batch_size}"),
                  (self.ensemble >= 1, f"ensemble size must be at least 1, got {self.ensemble}"),
                  (0 <= self.val_fraction < 1, f"validation fraction must be in [0, 1), got {self.val_fraction}"),
                  (0 <= self.label_noise < 1, f"label noise must be in [0, 1), got {self.label_noise}"),
                  (self.margin >= 0, f"margin must be 0 or positive, got {self.margin}"),
                  (self.max_length >= 2, f"max length must be at least 2 tokens, got {self.max_length}"),
                  (self.logging_steps >= 1, f"logging steps must be at least 1, got {self.logging_steps}")]
        for ok, message in checks:
            if not ok:
                raise InvalidInput(message)


# ---- data -------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PreferenceExample:
    """One training label: target p = P(first preferred) = 1, 0 or 0.5; the winner must lead by `margin`."""

    label_id: int
    pair_id: int
    prompt: str
    first: str
    second: str
    target: float
    margin: float = 0.0


def load_examples(store: Store, both_bad_as_tie: bool = True, margin: float = 0.0) -> list[PreferenceExample]:
    """Every current non-skip label as an example, with its own margin (imported) or `margin`; raises InvalidInput
    when none can train."""
    labeled = labeled_pairs(store)
    examples = [PreferenceExample(lp.label_id, lp.pair_id, lp.prompt, lp.first, lp.second, target,
                                  margin if lp.margin is None else lp.margin)
                for lp in labeled if (target := lp.outcome.target(both_bad_as_tie)) is not None]
    if examples:
        return examples
    stored = count_labels(store, include_skips=False)
    if stored and not labeled:
        raise InvalidInput(f"all {stored} labels belong to pairs whose generations were deleted; "
                           "queue and label new pairs before training a reward model")
    if labeled:
        raise InvalidInput(f"the {len(labeled)} labels are all 'both bad', which this run leaves out; "
                           "train them as ties or label more pairs")
    raise InvalidInput("no labels to train a reward model on (skips do not count); label some pairs first")


def split_by_pair(examples: Sequence[PreferenceExample], val_fraction: float,
                  seed: int) -> tuple[list[PreferenceExample], list[PreferenceExample]]:
    """(train, validation): a seeded shuffle of the pair ids puts ~val_fraction of the pairs in validation."""
    pair_ids = sorted({e.pair_id for e in examples})
    random.Random(seed).shuffle(pair_ids)
    n_val = min(round(len(pair_ids) * val_fraction), len(pair_ids) - 1)
    val_pairs = set(pair_ids[:n_val])
    return [e for e in examples if e.pair_id not in val_pairs], [e for e in examples if e.pair_id in val_pairs]


def encode(tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str], responses: Sequence[str],
           max_length: int) -> list[list[int]]:
    """Token ids of prompt + response + EOS per row, cut from the left to `max_length` (the head reads the end)."""
    prompt_ids = tokenizer(list(prompts))["input_ids"]
    response_ids = tokenizer(list(responses), add_special_tokens=False)["input_ids"]
    return [(p + r + [tokenizer.eos_token_id])[-max_length:] for p, r in zip(prompt_ids, response_ids)]


def pad_right(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask), both (N, T), padded on the right."""
    width = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)  # (N, T)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)  # (N, T)
    for i, row in enumerate(rows):
        input_ids[i, :len(row)] = torch.tensor(row, dtype=torch.long)
        attention_mask[i, :len(row)] = 1
    return input_ids, attention_mask


@dataclass
class PreferenceCollator:
    """Batches {first_ids, second_ids, target, margin} into input_ids (2B, T): the B firsts, then the B seconds."""

    pad_id: int

    def __call__(self, rows: list[dict]) -> dict[str, torch.Tensor]:
        input_ids, attention_mask = pad_right([r["first_ids"] for r in rows] + [r["second_ids"] for r in rows], self.pad_id)
        return {"input_ids": input_ids, "attention_mask": attention_mask,
                "target": torch.tensor([r["target"] for r in rows], dtype=torch.float32),
                "margin": torch.tensor([r["margin"] for r in rows], dtype=torch.float32)}


def sequence_scores(model: PreTrainedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The head's score of each row's last real token, (N,), for left, right or mixed padding."""
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # (N, T): real tokens at 0, 1, 2... whatever the pads
    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False)
    return out.logits[:, 0]


# ---- training ---------------------------------------------------------------------------------------------------

def preference_metrics(d: torch.Tensor, target: torch.Tensor, margin: torch.Tensor | None = None,
                       noise: float = 0.0) -> dict[str, float]:
    """Loss, accuracy on strict pairs (d > 0 when the first wins) and log-loss on ties, from d = r_first - r_second."""
    zeros = torch.zeros_like(d)
    strict, ties = target != 0.5, target == 0.5
    metrics = {"loss": preference_loss(d, zeros, target, margin, noise).item()}
    if strict.any():
        metrics["accuracy"] = ((d[strict] > 0) == (target[strict] > 0.5)).float().mean().item()
    if ties.any():
        metrics["tie_logloss"] = preference_loss(d[ties], zeros[ties], target[ties]).item()
    return metrics


class PreferenceTrainer(Trainer):
    """`transformers.Trainer` with the preference loss on soft targets; logs strict-pair accuracy with the loss."""

    def __init__(self, *args, label_noise: float = 0.0, **kwargs):
        super().__init__(*args, **kwargs)
        self.label_noise = label_noise
        self._correct_and_strict = torch.zeros(2, device=self.args.device)  # since the last log

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        scores = sequence_scores(model, inputs["input_ids"], inputs["attention_mask"])  # (2B,)
        first, second = scores.chunk(2)  # (B,), (B,)
        target = inputs["target"]
        loss = preference_loss(first, second, target, inputs["margin"], self.label_noise)
        with torch.no_grad():
            strict = target != 0.5
            correct = ((first > second) == (target > 0.5)) & strict
            self._correct_and_strict += torch.stack([correct.sum(), strict.sum()]).float()
        return (loss, {"first": first, "second": second}) if return_outputs else loss

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs:
            correct, strict = self.accelerator.reduce(self._correct_and_strict, reduction="sum").tolist()
            if strict:
                logs["accuracy"] = correct / strict
            self._correct_and_strict.zero_()
        super().log(logs, start_time)

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "val") -> dict[str, float]:
        """Validation loss, strict-pair accuracy and tie log-loss over the whole validation set."""
        was_training = self.model.training
        self.model.eval()
        diffs, targets, margins = [], [], []
        with torch.no_grad():
            for batch in self.get_eval_dataloader(eval_dataset):
                batch = self._prepare_inputs(batch)
                first, second = sequence_scores(self.model, batch["input_ids"], batch["attention_mask"]).chunk(2)
                d, target, margin = self.accelerator.gather_for_metrics(
                    (first - second, batch["target"], batch["margin"]))
                diffs.append(d.float())
                targets.append(target)
                margins.append(margin)
        self.model.train(was_training)
        metrics = preference_metrics(torch.cat(diffs), torch.cat(targets), torch.cat(margins), self.label_noise)
        metrics = {f"{metric_key_prefix}_{name}": value for name, value in metrics.items()}
        self.log(dict(metrics))  # log() adds the epoch to the dict it is given
        return metrics


class StoreCallback(TrainerCallback):
    """Writes metrics to the store, reports progress and stops training when the job's cancel flag is set."""

    def __init__(self, store: Store, job_id: int | None, step_offset: int, member: int, members: int,
                 progress: Callable[[int, int], None] | None):
        self.store, self.job_id, self.step_offset = store, job_id, step_offset
        self.member, self.members, self.progress = member, members, progress
        self.cancelled = False

    def on_log(self, args, state, control, logs=None, **kwargs):
        values = {METRIC_NAMES[k]: v for k, v in (logs or {}).items() if k in METRIC_NAMES}
        if self.job_id is not None and values and state.is_world_process_zero:
            log_metrics(self.store, self.job_id, self.step_offset + state.global_step, values)

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == state.max_steps:
            control.should_log = True  # the last step too, so a training shorter than `logging_steps` has a point
        if self.progress is not None and state.is_world_process_zero:
            self.progress(self.member * state.max_steps + state.global_step, self.members * state.max_steps)
        if self.job_id is not None and state.global_step % args.logging_steps == 0:
            cancel = cancel_requested(self.store, self.job_id) if state.is_world_process_zero else False
            if _same_on_all_ranks(cancel):
                self.cancelled = control.should_training_stop = True


@contextlib.contextmanager
def quiet_loading() -> Iterator[None]:
    """Silence transformers' loading warnings and progress bars for the duration (they are expected here)."""
    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def _same_on_all_ranks(value):
    """The main process's `value`, broadcast to every process of a distributed run (unchanged otherwise)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        from accelerate.utils import broadcast_object_list
        return broadcast_object_list([value])[0]
    return value


@dataclass(frozen=True)
class RewardTrainingResult:
    """What `train_reward_model` registered: one id, path and metrics dict per ensemble member."""

    reward_model_ids: list[int]
    paths: list[str]
    metrics: list[dict]
    labels_used: int
    train_pairs: int
    val_pairs: int


@dataclass(frozen=True)
class RewardInputs:
    """What a reward training starts from, checked: the examples, the policy to normalise on, the initial weights."""

    examples: list[PreferenceExample]
    policy: Policy
    init: Policy


def check_reward_inputs(store: Store, config: RewardConfig) -> RewardInputs:
    """Every check that needs no training, so bad input fails in one line (StudioError) before anything is written."""
    config.check()
    examples = load_examples(store, config.both_bad_as_tie, config.margin)
    policy = get_policy(store, config.policy_id) if config.policy_id is not None else latest_policy(store)
    if policy is None:
        raise NotFound("no policy version is registered; add the SFT policy before training a reward model")
    init = get_policy(store, config.init_policy_id) if config.init_policy_id is not None else root_policy(store, policy)
    load_tokenizer(init.path)  # raises ModelError: no directory, no tokenizer, no pad token
    return RewardInputs(examples, policy, init)


def train_reward_model(store: Store, config: RewardConfig, job_id: int | None = None,
                       progress: Callable[[int, int], None] | None = None) -> RewardTrainingResult:
    """Train `config.ensemble` members from the SFT policy, checkpoint them and register them in the store.

    Rewards are normalised on the newest policy's samples. Metrics go to the store under `job_id` (steps continue after the job's earlier `reward/` steps). `progress`
    receives (optimiser steps done, total steps). Raises RewardTrainingCancelled when the job's cancel flag is set.
    """
    inputs = check_reward_inputs(store, config)
    examples, policy_id, policy_dir = inputs.examples, inputs.policy.id, Path(inputs.init.path)
    tokenizer = load_tokenizer(policy_dir)
    context = getattr(AutoConfig.from_pretrained(policy_dir), "max_position_embeddings", None)
    max_length = min(config.max_length, context or config.max_length)
    train, val = split_by_pair(examples, config.val_fraction, config.seed)
    members = [train] if config.ensemble == 1 else [_bootstrap(train, config.seed + k) for k in range(config.ensemble)]
    steps_per_member = math.ceil(config.epochs * math.ceil(len(train) / config.batch_size))  # at most, on 1 device
    step_offset = 0 if job_id is None else (last_step(store, job_id, "reward/") or 0)
    root = store.data_dir / "reward_models"
    staging = []
    try:
        for k, member_examples in enumerate(members):
            staged = root / _same_on_all_ranks(f".staging-{uuid.uuid4().hex[:12]}")
            staging.append(staged)
            callback = StoreCallback(store, job_id, step_offset + k * steps_per_member, k, len(members), progress)
            metrics = _train_member(config, k, policy_dir, tokenizer, max_length, member_examples, val, staged, callback)
            if callback.cancelled:
                raise RewardTrainingCancelled("reward training was cancelled; no reward model was registered")
            if _is_main_process():
                _finish_member(store, staged, config, k, policy_id, max_length, examples, member_examples, val, metrics)
        if not _is_main_process():  # the main process registers; the others only helped to train
            return RewardTrainingResult([], [], [], len(examples), 0, 0)
        return _register(store, config, job_id, policy_id, staging, len(examples), len({e.pair_id for e in train}),
                         len({e.pair_id for e in val}))
    finally:
        for staged in staging:
            shutil.rmtree(staged, ignore_errors=True)


def _bootstrap(examples: list[PreferenceExample], seed: int) -> list[PreferenceExample]:
    rng = random.Random(seed)
    return [examples[rng.randrange(len(examples))] for _ in examples]


def _is_main_process() -> bool:
    return not (torch.distributed.is_available() and torch.distributed.is_initialized()) or torch.distributed.get_rank() == 0


def _train_member(config: RewardConfig, k: int, policy_dir: Path, tokenizer: PreTrainedTokenizerBase,
                  max_length: int, train: list[PreferenceExample], val: list[PreferenceExample], out_dir: Path,
                  callback: StoreCallback) -> dict:
    """Train one member and save it (plain HF directory) into `out_dir`; returns its final validation metrics."""
    torch.manual_seed(config.seed + k)  # the new head's initialisation
    with quiet_loading():  # "newly initialized: score.weight" is expected here
        model = load_reward_model(policy_dir)
    disable_dropout(model)  # both responses of a pair must see the same network
    with tempfile.TemporaryDirectory(prefix="reward-trainer-") as scratch:
        trainer = PreferenceTrainer(
            model=model, args=training_arguments(config, scratch, config.seed + k, has_val=bool(val)),
            train_dataset=tokenize_examples(tokenizer, train, max_length),
            eval_dataset=tokenize_examples(tokenizer, val, max_length),
            data_collator=PreferenceCollator(tokenizer.pad_token_id), processing_class=tokenizer,
            callbacks=[callback], label_noise=config.label_noise,
        )
        trainer.remove_callback(PrinterCallback)
        trainer.remove_callback(ProgressCallback)
        trainer.train()
        if callback.cancelled:
            return {}
        metrics = trainer.evaluate() if val else {}
        trainer.save_model(str(out_dir))
    (out_dir / "training_args.bin").unlink(missing_ok=True)  # a pickle of our arguments; reward_info.json has them
    train_stats = [h for h in trainer.state.log_history if "loss" in h]
    last = train_stats[-1] if train_stats else {}
    return {**{f"train_{n}": last[n] for n in ("loss", "accuracy") if n in last}, **metrics}


def training_arguments(config: RewardConfig, output_dir: str, seed: int, has_val: bool) -> TrainingArguments:
    """Trainer arguments for one member: no checkpoints, no reports, validation at each logging step."""
    return TrainingArguments(
        output_dir=output_dir, num_train_epochs=config.epochs, learning_rate=config.learning_rate,
        per_device_train_batch_size=config.batch_size, per_device_eval_batch_size=max(config.batch_size, 32),
        weight_decay=config.weight_decay, warmup_steps=config.warmup_ratio, lr_scheduler_type="linear",
        logging_steps=config.logging_steps, eval_strategy="steps" if has_val else "no",
        eval_steps=config.logging_steps if has_val else None, save_strategy="no", report_to="none",
        seed=seed, data_seed=seed, disable_tqdm=True, remove_unused_columns=False, bf16=config.bf16,
        activation_checkpointing=config.activation_checkpointing, dataloader_pin_memory=torch.cuda.is_available(),
        label_names=[], train_sampling_strategy="group_by_length" if config.group_by_length else "random",
    )


def tokenize_examples(tokenizer: PreTrainedTokenizerBase, examples: Sequence[PreferenceExample],
                      max_length: int) -> Dataset | None:
    """The Trainer's dataset: {first_ids, second_ids, target, margin, length} per example (length: the longer side)."""
    if not examples:
        return None
    firsts = encode(tokenizer, [e.prompt for e in examples], [e.first for e in examples], max_length)
    seconds = encode(tokenizer, [e.prompt for e in examples], [e.second for e in examples], max_length)
    return Dataset.from_list([{"first_ids": f, "second_ids": s, "target": e.target, "margin": e.margin,
                               "length": max(len(f), len(s))} for f, s, e in zip(firsts, seconds, examples)])


def _finish_member(store: Store, out_dir: Path, config: RewardConfig, k: int, policy_id: int, max_length: int,
                   examples: list[PreferenceExample], member_examples: list[PreferenceExample],
                   val: list[PreferenceExample], metrics: dict) -> None:
    """Score the policy's samples with the saved member (mean/std) and write reward_info.json beside it."""
    prompts, responses, source = _normalisation_texts(store, policy_id, examples, config.norm_samples, config.seed)
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else "cpu"
    scorer = RewardScorer.from_dirs([out_dir], norms=[(0.0, 1.0)], device=device, max_length=max_length)
    raw = scorer.raw_scores(prompts, responses)[0]  # (N,)
    info = {
        "labels_used": len(examples), "label_ids": sorted({e.label_id for e in examples}),
        "member_label_ids": [e.label_id for e in member_examples], "val_pair_ids": sorted({e.pair_id for e in val}),
        "metrics": metrics, "norm_mean": raw.mean().item(), "norm_std": max(raw.std(unbiased=False).item(), 1e-6),
        "norm_samples": len(responses), "norm_source": source, "policy_id": policy_id,
        "ensemble_index": k, "ensemble_size": config.ensemble, "max_length": max_length, "config": asdict(config),
    }
    (out_dir / INFO_FILE).write_text(json.dumps(info, indent=1) + "\n")


def _normalisation_texts(store: Store, policy_id: int, examples: list[PreferenceExample], limit: int,
                         seed: int) -> tuple[list[str], list[str], str]:
    """(prompts, responses, source): the policy's samples, or the labelled responses when it has none."""
    generations = list_generations(store, policy_id=policy_id, source=SAMPLE_SOURCE)
    if generations:
        prompt_texts = {}
        rows = random.Random(seed).sample(generations, min(limit, len(generations)))
        for g in rows:
            if g.prompt_id not in prompt_texts:
                prompt_texts[g.prompt_id] = get_prompt(store, g.prompt_id).text
        return [prompt_texts[g.prompt_id] for g in rows], [g.text for g in rows], f"policy {policy_id} samples"
    pairs = sorted({(e.prompt, text) for e in examples for text in (e.first, e.second)})
    rows = random.Random(seed).sample(pairs, min(limit, len(pairs)))
    return [p for p, _ in rows], [r for _, r in rows], "labelled responses"


def _register(store: Store, config: RewardConfig, job_id: int | None, policy_id: int, staging: list[Path],
              labels_used: int, train_pairs: int, val_pairs: int) -> RewardTrainingResult:
    """Rename the complete members to their final directories and register them all in one transaction."""
    name = f"rm-r{config.round}-{uuid.uuid4().hex[:8]}"
    finals = [staged.parent / f"{name}-m{k}" for k, staged in enumerate(staging)]
    infos = [json.loads((staged / INFO_FILE).read_text()) for staged in staging]
    for staged, final in zip(staging, finals):
        staged.rename(final)
    try:
        with store.write():
            ids = [add_reward_model(store, str(final), labels_used, info["metrics"], info["norm_mean"], info["norm_std"],
                                    policy_id=policy_id, round=config.round, ensemble_index=k,
                                    ensemble_size=len(finals), job_id=job_id)
                   for k, (final, info) in enumerate(zip(finals, infos))]
    except BaseException:
        for final in finals:
            shutil.rmtree(final, ignore_errors=True)
        raise
    return RewardTrainingResult(ids, [str(f) for f in finals], [i["metrics"] for i in infos], labels_used,
                                train_pairs, val_pairs)


# ---- scoring ----------------------------------------------------------------------------------------------------

class RewardScorer:
    """Scores `prompt + response` texts with a reward model (all members of an ensemble).

    `score` is what PPO uses: each member's score normalised with its (mean, std) on the policy's samples, averaged
    over the members, shape (N,), on the scorer's device. `raw_scores` and `preference_probabilities` are per member.
    """

    def __init__(self, models: list[PreTrainedModel], tokenizer: PreTrainedTokenizerBase,
                 norms: list[tuple[float, float]], max_length: int, batch_size: int = 64):
        assert len(models) == len(norms) >= 1, "one (mean, std) per member"
        self.models, self.tokenizer, self.max_length, self.batch_size = models, tokenizer, max_length, batch_size
        self.device = models[0].device
        self.norm_mean = torch.tensor([m for m, _ in norms], device=self.device)  # (K,)
        self.norm_std = torch.tensor([s for _, s in norms], device=self.device)  # (K,)

    @classmethod
    def from_store(cls, store: Store, device: str | torch.device | None = None, batch_size: int = 64) -> "RewardScorer":
        """The newest registered reward model, every ensemble member; raises NotFound when none is registered."""
        members = latest_reward_models(store)
        if not members:
            raise NotFound("no reward model is registered; train one first (python app.py train-reward)")
        return cls.from_dirs([m.path for m in members], [(m.norm_mean, m.norm_std) for m in members], device, batch_size)

    @classmethod
    def from_dirs(cls, paths: Sequence[str | Path], norms: list[tuple[float, float]] | None = None,
                  device: str | torch.device | None = None, batch_size: int = 64,
                  max_length: int | None = None) -> "RewardScorer":
        """Members from checkpoint directories; norms and max length default to those in reward_info.json."""
        info = [json.loads((Path(p) / INFO_FILE).read_text()) if (Path(p) / INFO_FILE).is_file() else {} for p in paths]
        if norms is None:
            norms = [(i["norm_mean"], i["norm_std"]) for i in info]
        with quiet_loading():
            models = [load_reward_model(p).to(device or "cpu") for p in paths]
        if max_length is None:
            max_length = info[0].get("max_length") or getattr(models[0].config, "max_position_embeddings", None) or 1 << 30
        return cls(models, load_tokenizer(paths[0]), norms, max_length, batch_size)

    @property
    def size(self) -> int:
        return len(self.models)

    @torch.no_grad()
    def raw_scores(self, prompts: Sequence[str], responses: Sequence[str]) -> torch.Tensor:
        """Each member's unnormalised score of each prompt + response + EOS: (K, N)."""
        rows = encode(self.tokenizer, prompts, responses, self.max_length)
        out = torch.empty((self.size, len(rows)), device=self.device)  # (K, N)
        for start in range(0, len(rows), self.batch_size):
            input_ids, attention_mask = pad_right(rows[start:start + self.batch_size], self.tokenizer.pad_token_id)
            for k, model in enumerate(self.models):
                out[k, start:start + len(input_ids)] = sequence_scores(
                    model, input_ids.to(self.device), attention_mask.to(self.device)).float()
        return out

    def score(self, prompts: Sequence[str], responses: Sequence[str]) -> torch.Tensor:
        """Normalised rewards (N,): mean over members of (score - mean) / std."""
        return self.normalise(self.raw_scores(prompts, responses))

    @torch.no_grad()
    def score_ids(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Normalised rewards (N,) of token ids already built as prompt + response + EOS, padded on either side."""
        input_ids, attention_mask = input_ids.to(self.device), attention_mask.to(self.device)
        return self.normalise(torch.stack([sequence_scores(m, input_ids, attention_mask).float() for m in self.models]))

    def normalise(self, raw: torch.Tensor) -> torch.Tensor:
        """(K, N) raw member scores -> (N,) mean of the members' normalised scores."""
        return ((raw - self.norm_mean[:, None]) / self.norm_std[:, None]).mean(0)

    def preference_probabilities(self, prompts: Sequence[str], firsts: Sequence[str],
                                 seconds: Sequence[str]) -> torch.Tensor:
        """Each member's P(first preferred) = sigmoid(r_first - r_second): (K, N)."""
        raw = self.raw_scores(list(prompts) * 2, list(firsts) + list(seconds))  # (K, 2N)
        first, second = raw.chunk(2, dim=1)
        return torch.sigmoid(first - second)


def pair_probabilities(scorer: RewardScorer, candidates: Sequence, prompts: Mapping[int, str]) -> np.ndarray:
    """(K, P) members' P(first preferred) of `labeling.selection.Candidate`s, for `select_by_disagreement`.

    `prompts` maps each candidate's prompt id to the prompt's text.
    """
    if not candidates:
        return np.zeros((scorer.size, 0))
    probs = scorer.preference_probabilities([prompts[c.prompt_id] for c in candidates],
                                            [c.first.text for c in candidates], [c.second.text for c in candidates])
    return probs.cpu().numpy()
