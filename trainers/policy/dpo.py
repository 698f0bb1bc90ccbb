"""DPO (Rafailov et al. 2023) on TRL's `DPOTrainer`: the policy trained directly on labelled pairs against a frozen
reference, with no rollout and no reward model; the policy optimisers' sibling in this room.

What the studio adds to TRL's trainer (`StudioDPOTrainer`):
- the token ids are the policy's `ChatFormat`'s (`preference_rows`: the prompt as every other path renders it, each
  response closed by its end-of-turn id, once): TRL's own tokenization, which appends EOS to plain-text pairs, is
  skipped; nothing is cut (a pair longer than the context is refused before the run);
- ties at target p = 0.5 (`train_ties`): a per-example soft target (`dpo_math.soft_preference_loss`) on the tied
  rows of a batch, TRL's loss on the others, weighted by their counts (TRL's `label_smoothing` is one number for
  every pair);
- the reference: the SFT root, a frozen copy when every weight trains; with LoRA the base with adapters disabled, also
  when the start policy carries an adapter of an earlier run (which training continues);
- the job layer's reporter (`DPOReporterCallback`): metrics `dpo/...`, progress every step, a stop within one step
  (the state is saved first), and, `sample_evals` times in a run (the last after the final step), samples of the
  policy measured as PPO measures its rollouts (`rollout.sample_statistics`: KL to the reference, entropy, length,
  EOS rate) under the names the failure warnings read;
- resume: TRL's checkpoints every `save_every` steps in `state_dir` (the newest complete one is resumed);
- no telemetry: TRL's ping is not sent.

    result = train_dpo(config, policy, tokenizer, chat, examples, reference=sft, reporter=reporter,
                       state_dir=folder)          # JobCancelled when the reporter says stop
    save_dpo_policy(result, path)                # a plain HF policy directory (the job layer registers it)
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
import random
import tempfile
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from datasets import Dataset
from transformers import PreTrainedModel, PreTrainedTokenizerBase, TrainerCallback
from transformers.trainer_callback import PrinterCallback, ProgressCallback
from trl import DPOConfig as TRLDPOConfig
from trl import DPOTrainer
from trl.trainer.dpo_trainer import DataCollatorForPreference

from ..models.chat_format import ChatFormat
from ..models.finite import NonFiniteTraining, check_finite_step, non_finite_gradient
from ..reporting import JobCancelled, Reporter, stop_requested
from ..reward.data import PreferenceExample
from .checkpoint import write_policy
from .dpo_config import DPOConfig
from .dpo_math import soft_preference_loss
from .rollout import Sampling, sample_statistics
from .setup import check_tokenizer, with_lora

CONFIG_FILE = "dpo_config.json"
TRAINER_STATE = "trainer_state.json"  # written last into a checkpoint: a folder without it is incomplete
# TRL's logged names -> the studio's (the failure warnings read dpo/kl, dpo/entropy, ... of the samples)
METRIC_NAMES = {"loss": "dpo/loss", "rewards/margins": "dpo/margin", "rewards/accuracies": "dpo/accuracy",
                "rewards/chosen": "dpo/chosen_reward", "rewards/rejected": "dpo/rejected_reward",
                "logps/chosen": "dpo/logp_chosen", "logps/rejected": "dpo/logp_rejected",
                "entropy": "dpo/label_entropy", "tie_loss": "dpo/tie_loss", "grad_norm": "dpo/grad_norm",
                "learning_rate": "dpo/learning_rate"}


def oriented(example: PreferenceExample) -> tuple[str, str, float]:
    """(chosen, rejected, p): the preferred response first (p = 1), or a tie in its stored order (p = 0.5)."""
    if example.target == 0.0:
        return example.second, example.first, 1.0
    return example.first, example.second, example.target


def preference_rows(chat: ChatFormat, examples: list[PreferenceExample]) -> list[dict]:
    """TRL's pre-tokenized columns from the policy's chat format: {prompt_ids, chosen_ids, rejected_ids, target};
    each response is closed by the end-of-turn id (once), as the policy writes it."""
    sides = [oriented(e) for e in examples]
    prompts = chat.prompts_ids([e.prompt for e in examples])
    chosen = chat.responses_ids([c for c, _, _ in sides])
    rejected = chat.responses_ids([r for _, r, _ in sides])
    return [{"prompt_ids": p, "chosen_ids": c, "rejected_ids": r, "target": t}
            for p, c, r, (_, _, t) in zip(prompts, chosen, rejected, sides, strict=True)]


class TargetCollator(DataCollatorForPreference):
    """TRL's preference batches (input_ids (2B, T): the B chosen, then the B rejected) with each pair's target p."""

    def torch_call(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        batch = super().torch_call(examples)
        batch["target"] = torch.tensor([e["target"] for e in examples], dtype=torch.float32)  # (B,)
        return batch


def _rows(inputs: dict, keep: torch.Tensor) -> dict:
    """The pairs `keep` (B,) of a batch: their chosen and their rejected rows."""
    both = torch.cat([keep, keep])
    return {k: v[both] if v.shape[0] == both.shape[0] else v[keep] for k, v in inputs.items()}


class FiniteSteps:
    """A TRL trainer (mixed in before it) that stops at the first non-finite loss, naming its run (`run_name`) and
    step; `StepReporterCallback` stops at the first non-finite gradient, before the optimizer steps."""

    run_name = "DPO"

    def training_step(self, model, inputs, num_items_in_batch=None):
        loss = super().training_step(model, inputs, num_items_in_batch)
        check_finite_step(loss, None, f"{self.run_name} step {self.state.global_step + 1}")
        return loss


class StudioDPOTrainer(FiniteSteps, DPOTrainer):
    """TRL's DPOTrainer on the studio's token ids, with ties at p = 0.5 and no telemetry."""

    def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
        """The rows are the chat format's ids already (`preference_rows`): nothing to extract, append or tokenize."""
        missing = {"prompt_ids", "chosen_ids", "rejected_ids", "target"} - set(dataset.column_names)
        assert not missing, f"DPO rows need the chat format's ids (preference_rows); missing {sorted(missing)}"
        return dataset

    def _send_telemetry(self):
        """Nothing leaves the machine: a studio trains on its team's data."""

    def _compute_loss(self, model, inputs, return_outputs):
        """TRL's loss on the pairs with a preference; with ties in the batch, the soft-target loss on those, each part
        weighted by its share of the pairs."""
        target = inputs.pop("target")
        ties = target < 1
        if not ties.any():
            return super()._compute_loss(model, inputs, return_outputs)
        share = ties.float().mean()
        loss = share * self._tie_loss(model, _rows(inputs, ties), target[ties])
        if not ties.all():
            loss = loss + (1 - share) * super()._compute_loss(model, _rows(inputs, ~ties), False)
        return loss

    def _tie_loss(self, model, inputs: dict, target: torch.Tensor) -> torch.Tensor:
        """The soft-target loss of tied pairs: the policy's sequence log-probs (with gradients) and the reference's,
        as TRL computes them (its fused LM head; LoRA: adapters disabled)."""
        completion = inputs["completion_mask"]
        labels = inputs["input_ids"].masked_fill(completion == 0, -100)
        outputs = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"], labels=labels,
                        fused_lm_head=True, use_cache=False)
        logps = outputs.log_probs[:, -(completion.shape[1] - 1):].sum(dim=1)  # (2B,)
        ref_chosen, ref_rejected = self.compute_ref_log_probs(self.ref_model or self.model, inputs)
        chosen, rejected = logps.chunk(2)
        lengths = completion.sum(dim=1).chunk(2)
        loss = soft_preference_loss(chosen - ref_chosen, rejected - ref_rejected, target, self.beta,
                                    self.loss_types[0], lengths).mean()
        mode = "train" if self.model.training else "eval"
        self._metrics[mode]["tie_loss"].append(self.accelerator.gather_for_metrics(loss.detach()).mean().item())
        return loss


def sample_steps(total: int, evals: int) -> set[int]:
    """The steps after which the policy is sampled: `evals` evenly spaced over `total` steps, the last one included."""
    return {max(1, math.ceil(total * k / evals)) for k in range(1, evals + 1)}


class StepReporterCallback(TrainerCallback):
    """Carries a TRL trainer's logs (renamed by `metric_names`; the newest of each kept in `last`), progress and stop
    checks to a reporter, and logs the last step too. `stopped` is True once the reporter said stop (the Trainer then
    saves a checkpoint and ends the run). DPO's and SFT's reporters build on it."""

    run_name = "DPO"

    def __init__(self, reporter: Reporter, metric_names: dict[str, str]):
        self.reporter, self.metric_names = reporter, metric_names
        self.stopped = False
        self.last: dict[str, float] = {}

    def on_train_begin(self, args, state, control, **kwargs):
        self.reporter.progress(state.global_step, state.max_steps)

    def on_log(self, args, state, control, logs=None, **kwargs):
        values = {self.metric_names[k]: v for k, v in (logs or {}).items() if k in self.metric_names}
        if values:
            self.last.update(values)
            self.reporter.on_step(state.global_step, values)

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        bad = non_finite_gradient(model) if model is not None else None
        if bad is not None:
            raise NonFiniteTraining(f"{self.run_name} step {state.global_step + 1}: the gradient of {bad} is not "
                                    "finite; nothing was registered (lower the learning rate)")

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == state.max_steps:
            control.should_log = True  # the last step too, so a run shorter than `logging_steps` has a point
        self.reporter.progress(state.global_step, state.max_steps)
        if stop_requested(self.reporter) and state.global_step < state.max_steps:  # asked every step: a heartbeat
            self.stopped = control.should_training_stop = True
            control.should_save = args.save_strategy != "no"


class DPOReporterCallback(StepReporterCallback):
    """The step reporter with the trainer's logs as `dpo/...`; after the steps of `sample_steps`, `measure(model)`
    samples the policy and its metrics are reported too."""

    def __init__(self, reporter: Reporter, evals: int, measure: Callable[[torch.nn.Module], dict[str, float]]):
        super().__init__(reporter, METRIC_NAMES)
        self.evals, self.measure = evals, measure
        self.last_samples: dict[str, float] = {}

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step in sample_steps(state.max_steps, self.evals):
            self.last_samples = {f"dpo/{name}": value for name, value in self.measure(model).items()}
            self.reporter.on_step(state.global_step, self.last_samples)
        super().on_step_end(args, state, control, **kwargs)


@dataclass
class SampleMeasures:
    """Measures a policy on samples of its own, the same prompts (`prompt_ids`, distinct ones of the labels) and
    seed each time: `rollout.sample_statistics` against `reference` (set once the trainer holds it), the training's
    RNG left as it was."""

    chat: ChatFormat
    pad_id: int
    prompt_ids: list[list[int]]
    config: DPOConfig
    monitor: Callable[[str], float] | None = None
    reference: torch.nn.Module | None = None

    def __call__(self, model: torch.nn.Module) -> dict[str, float]:
        config, was_training = self.config, model.training
        model.eval()
        devices = [model.device] if model.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(config.seed + 7919)
            score = None if self.monitor is None else (lambda texts: [self.monitor(t) for t in texts])
            stats = sample_statistics(model, self.chat, self.pad_id, self.prompt_ids,
                                      Sampling(config.response_length, config.temperature, config.top_p, config.top_k),
                                      self.reference, score=score)
        model.train(was_training)
        return stats


@dataclass
class DPOResult:
    """A finished run: its trainer (the trained policy inside), the steps done and the last metrics."""

    trainer: StudioDPOTrainer
    config: DPOConfig
    steps: int
    metrics: dict


def train_reporting(trainer, callback: StepReporterCallback, state_dir: Path | None, name: str) -> None:
    """Run `trainer` (its `callback` among its callbacks) with the reporter as its only output, from the newest
    complete checkpoint in `state_dir` if any; JobCancelled, naming the `name` run, once the reporter said stop."""
    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    with warnings.catch_warnings():  # TRL 1.16 still asks `is_gradient_checkpointing` (renamed in transformers 5)
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        trainer.train(resume_from_checkpoint=last_complete_checkpoint(state_dir))
    if callback.stopped:
        raise JobCancelled(f"{name} was stopped after {trainer.state.global_step} of {trainer.state.max_steps} steps; "
                           "resume the job to continue from its last checkpoint")


def last_complete_checkpoint(state_dir: Path | None) -> str | None:
    """The newest checkpoint in `state_dir` that was written to the end (a kill mid-save leaves one without its
    trainer state); None when there is none."""
    if state_dir is None or not state_dir.is_dir():
        return None
    done = [p for p in state_dir.glob("checkpoint-*") if (p / TRAINER_STATE).is_file() and p.name[11:].isdigit()]
    return str(max(done, key=lambda p: int(p.name[11:]))) if done else None


def training_arguments(config: DPOConfig, output_dir: str, save: bool) -> TRLDPOConfig:
    """TRL's settings for the run: no truncation (pairs were checked against the context), no reports, no progress
    bars, dropout off, checkpoints every `save_every` steps when `save` (only the newest kept)."""
    saving = {"save_strategy": "steps", "save_steps": config.save_every, "save_total_limit": 1} if save else \
        {"save_strategy": "no"}
    return TRLDPOConfig(
        output_dir=output_dir, beta=config.dpo_beta, loss_type=[config.loss_type],
        label_smoothing=config.label_smoothing, per_device_train_batch_size=config.batch_size,
        num_train_epochs=config.epochs, learning_rate=config.learning_rate, lr_scheduler_type="linear",
        warmup_steps=config.warmup_ratio, weight_decay=config.weight_decay, max_grad_norm=config.max_grad_norm,
        logging_steps=config.logging_steps, report_to="none", seed=config.seed, data_seed=config.seed,
        disable_tqdm=True, remove_unused_columns=False, bf16=config.bf16,
        activation_checkpointing=config.gradient_checkpointing, max_length=None, disable_dropout=True,
        precompute_ref_log_probs=False, use_cpu=not torch.cuda.is_available(),
        dataloader_pin_memory=torch.cuda.is_available(), **saving)


def train_dpo(config: DPOConfig, policy: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, chat: ChatFormat,
              examples: list[PreferenceExample], reference: PreTrainedModel | None = None,
              reporter: Reporter | None = None, state_dir: str | Path | None = None,
              monitor: Callable[[str], float] | None = None) -> DPOResult:
    """Train `policy` on `examples` (their ties only with `train_ties`; the caller leaves out what must not train)
    against `reference` (full fine-tuning; None: a frozen copy of `policy`) or, with LoRA, the base with adapters
    disabled. Resumes from `state_dir`'s newest complete checkpoint; raises JobCancelled (after saving one) when the
    reporter says stop. `monitor(text)` scores the sampled responses (`dpo/oracle_score`)."""
    config.check()
    check_tokenizer(tokenizer)
    reporter = reporter or Reporter()
    state_dir = Path(state_dir) if state_dir is not None else None
    rows = preference_rows(chat, examples)
    torch.manual_seed(config.seed)  # the adapters' initialisation
    if config.lora:
        if reference is not None:
            raise ValueError("with LoRA the reference is the base with adapters disabled; pass no reference")
        policy = with_lora(policy, config)
    else:
        reference = reference if reference is not None else copy.deepcopy(policy)
    distinct = list(dict.fromkeys(tuple(row["prompt_ids"]) for row in rows))
    measure = SampleMeasures(chat, tokenizer.pad_token_id, [list(ids) for ids in random.Random(config.seed).sample(
        distinct, min(config.sample_prompts, len(distinct)))], config, monitor)
    callback = DPOReporterCallback(reporter, config.sample_evals, measure)
    with tempfile.TemporaryDirectory(prefix="dpo-trainer-") as scratch:
        output_dir = str(state_dir) if state_dir is not None else scratch
        with quiet_trl():
            trainer = StudioDPOTrainer(model=policy, ref_model=None if config.lora else reference,
                                       args=training_arguments(config, output_dir, save=state_dir is not None),
                                       data_collator=TargetCollator(pad_token_id=tokenizer.pad_token_id),
                                       train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
                                       callbacks=[callback])
        if config.lora and "ref" in trainer.model.peft_config:  # TRL copies a carried adapter as the reference;
            trainer.model.delete_adapter("ref")                # the studio's reference is the SFT base
        measure.reference = trainer.ref_model  # None with LoRA: the policy with its adapters disabled
        train_reporting(trainer, callback, state_dir, "DPO")
    logged = [h for h in trainer.state.log_history if "loss" in h]
    metrics = {METRIC_NAMES[k]: v for k, v in (logged[-1] if logged else {}).items() if k in METRIC_NAMES}
    return DPOResult(trainer, config, trainer.state.global_step, {**metrics, **callback.last_samples})


@contextlib.contextmanager
def quiet_trl():
    """TRL's and transformers' informational warnings off while the trainer is built (the studio's settings are
    deliberate: a model instance, no truncation)."""
    loggers = [logging.getLogger(name) for name in ("trl", "transformers")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def save_dpo_policy(result: DPOResult, path: str | Path) -> None:
    """A plain Hugging Face policy directory (LoRA merged; its adapter also in `adapter/`) with the run's settings."""
    trainer = result.trainer
    policy = trainer.accelerator.unwrap_model(trainer.model)
    write_policy(policy, trainer.processing_class, path, result.config.lora,
                 {"steps": result.steps, **asdict(result.config)}, CONFIG_FILE)
