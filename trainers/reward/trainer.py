"""Reward-model training: Bradley-Terry with ties on a Hugging Face `Trainer`, one ensemble member at a time.

`PreferenceTrainer` is `transformers.Trainer` with `trainers.reward.loss.preference_loss` on soft targets p = 1, 0 or
0.5 (ties), its strict-pair accuracy logged with the loss and a validation pass (loss, accuracy, tie log-loss) at each
logging step; `accelerate launch` / DeepSpeed work unchanged. `train_member` trains and saves one member, reporting
through a `trainers.reporting.Reporter`: metrics (`reward/loss`, `reward/val_accuracy`, ...) at step k *
steps_per_member + s for member k's step s, progress after every optimiser step, and a stop check at every logging step
(the main process decides for all), which raises JobCancelled. It never touches the store: the job layer
(`trainers.jobs.reward_job`) reads the labels and registers what it saved.

    metrics = train_member(config, k, init_dir, chat, train, val, out_dir, reporter)
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Callable

import torch
from transformers import EarlyStoppingCallback, Trainer, TrainerCallback, TrainingArguments
from transformers.trainer_callback import PrinterCallback, ProgressCallback

from ..models.chat_format import ChatFormat
from ..models.loading import disable_dropout, load_reward_model, load_tokenizer
from ..reporting import JobCancelled, Reporter, stop_requested
from .batches import whole_rows
from .config import RewardConfig
from .data import Example, PreferenceCollator, examples_per_batch, tokenize_examples
from .loss import preference_loss
from .scorer import prompted_scores, quiet_loading, sequence_scores
from .shared_base import ADAPTER_FOLDER, adapter_base, adapter_dir

VALIDATION_NAMES = {"loss": "reward/val_loss", "accuracy": "reward/val_accuracy", "tie_logloss": "reward/tie_logloss"}
METRIC_NAMES = {"loss": "reward/loss", "accuracy": "reward/accuracy", "learning_rate": "reward/learning_rate",
                "grad_norm": "reward/grad_norm",
                **{f"{prefix}_{name}": metric for name, metric in VALIDATION_NAMES.items()
                   for prefix in ("val", "eval")}}


def preference_metrics(d: torch.Tensor, target: torch.Tensor, margin: torch.Tensor | None = None,
                       noise: float = 0.0, weight: torch.Tensor | None = None) -> dict[str, float]:
    """Loss (weighted: a ranking's comparisons weigh 1/C(K,2)), accuracy on strict comparisons (d > 0 when the first
    wins) and log-loss on ties, from d = r_first - r_second."""
    zeros = torch.zeros_like(d)
    strict, ties = target != 0.5, target == 0.5
    metrics = {"loss": preference_loss(d, zeros, target, margin, noise, weight).item()}
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
        scores = self.scores(model, inputs)  # (N,) every response
        first, second = scores[inputs["first"]], scores[inputs["second"]]  # (C,), (C,) every comparison
        target = inputs["target"]
        loss = preference_loss(first, second, target, inputs["margin"], self.label_noise, inputs["weight"])
        with torch.no_grad():
            strict = target != 0.5
            correct = ((first > second) == (target > 0.5)) & strict
            self._correct_and_strict += torch.stack([correct.sum(), strict.sum()]).float()
        return (loss, {"first": first, "second": second}) if return_outputs else loss

    def scores(self, model, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Each response's score (N,): each prompt read once (`prompted_scores`), but in one forward pass of whole
        rows through a wrapper (DDP, DeepSpeed, DataParallel), which expects one pass a step."""
        if model is not self.model:
            return sequence_scores(model, *whole_rows(inputs))
        return prompted_scores(model, inputs)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs:
            correct, strict = self.accelerator.reduce(self._correct_and_strict, reduction="sum").tolist()
            if strict:
                logs["accuracy"] = correct / strict
            self._correct_and_strict.zero_()
        super().log(logs, start_time)

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval") -> dict[str, float]:
        """Validation loss, strict-pair accuracy and tie log-loss over the whole validation set (`eval_loss`... during
        training, where early stopping reads `eval_loss`)."""
        was_training = self.model.training
        self.model.eval()
        diffs, targets, margins, weights = [], [], [], []
        with torch.no_grad():
            for batch in self.get_eval_dataloader(eval_dataset):
                batch = self._prepare_inputs(batch)
                scores = prompted_scores(self.model, batch)  # (N,)
                d, target, margin, weight = self.accelerator.gather_for_metrics(
                    (scores[batch["first"]] - scores[batch["second"]], batch["target"], batch["margin"],
                     batch["weight"]))
                diffs.append(d.float())
                targets.append(target)
                margins.append(margin)
                weights.append(weight)
        self.model.train(was_training)
        metrics = preference_metrics(torch.cat(diffs), torch.cat(targets), torch.cat(margins), self.label_noise,
                                     torch.cat(weights))
        metrics = {f"{metric_key_prefix}_{name}": value for name, value in metrics.items()}
        self.log(dict(metrics))  # log() adds the epoch to the dict it is given
        if metric_key_prefix == "eval":  # during training: early stopping hears it
            self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics


class ReporterCallback(TrainerCallback):
    """Carries the Trainer's logs, progress and stop checks to a reporter, for ensemble member `member` of
    `members` (its steps come after the earlier members' ones). `stopped` is True once the reporter said stop."""

    def __init__(self, reporter: Reporter, member: int = 0, members: int = 1, validate_last_step: bool | None = None,
                 save_last_step: bool = False):
        self.reporter, self.member, self.members = reporter, member, members
        # True: validate the last step too (`kept_validation` reads it; early stopping compares it with the best);
        # False: never (`train_member`'s `validate` scores the kept weights after training); None: as `eval_steps` say
        self.validate_last_step = validate_last_step
        self.save_last_step = save_last_step  # early stopping: the final weights compete with the best too
        self.stopped = False

    def on_log(self, args, state, control, logs=None, **kwargs):
        values = {METRIC_NAMES[k]: v for k, v in (logs or {}).items() if k in METRIC_NAMES}
        if values:
            self.reporter.on_step(self.member * state.max_steps + state.global_step, values)

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == state.max_steps:
            control.should_log = True  # the last step too, so a training shorter than `logging_steps` has a point
            if self.validate_last_step is not None:
                control.should_evaluate = self.validate_last_step
            control.should_save = control.should_save or self.save_last_step
        self.reporter.progress(self.member * state.max_steps + state.global_step, self.members * state.max_steps)
        if state.global_step % args.logging_steps == 0 and stop_requested(self.reporter):
            self.stopped = control.should_training_stop = True


def train_member(config: RewardConfig, k: int, init_dir: Path, chat: ChatFormat, train: list[Example],
                 val: list[Example], out_dir: Path, reporter: Reporter,
                 on_trained: Callable[[torch.nn.Module], None] | None = None,
                 validate: Callable[[torch.nn.Module], dict[str, float]] | None = None) -> dict:
    """Train member `k` of `config.ensemble` from the model in `init_dir` (texts tokenized by its `chat` format) and
    save it (plain HF directory, tokenizer included) into `out_dir`; returns its final metrics (train_loss,
    train_accuracy, val_*); `on_trained` sees the trained model. `validate`, given, scores the trained model's
    validation examples (`val_*` metrics, `validation_metrics`) where the Trainer would validate its last step
    (without early stopping), so a job that scores them anyway scores them once. Raises JobCancelled when
    stopped."""
    torch.manual_seed(config.seed + k)  # the new head's initialisation (and a new adapter's)
    tokenizer = load_tokenizer(init_dir)
    model = start_model(config, init_dir)
    early_stopping = bool(val) and config.early_stopping_patience > 0
    validated_after = bool(val) and not early_stopping and validate is not None
    callback = ReporterCallback(reporter, k, config.ensemble, validate_last_step=bool(val) and not validated_after,
                                save_last_step=early_stopping)
    callbacks = [callback, EarlyStoppingCallback(config.early_stopping_patience)] if early_stopping else [callback]
    with tempfile.TemporaryDirectory(prefix="reward-trainer-") as scratch:
        trainer = PreferenceTrainer(
            model=model, args=training_arguments(config, scratch, config.seed + k, has_val=bool(val),
                                                 batch_size=examples_per_batch(train, config.batch_size)),
            train_dataset=tokenize_examples(chat, train), eval_dataset=tokenize_examples(chat, val),
            data_collator=PreferenceCollator(tokenizer.pad_token_id), processing_class=tokenizer,
            callbacks=callbacks, label_noise=config.label_noise,
        )
        trainer.remove_callback(PrinterCallback)
        trainer.remove_callback(ProgressCallback)
        trainer.train()
        if callback.stopped:
            raise JobCancelled("reward training was stopped; no reward model was registered (a resumed job trains "
                               "it again)")
        best = trainer.state.best_global_step if early_stopping else None
        metrics = kept_validation(trainer.state.log_history, best) if val and not validated_after else {}
        if best is not None and best != trainer.state.global_step:
            trainer.log(dict(metrics))  # the best weights were loaded: their validation is the reward model's last
        if config.lora:
            model = save_merged(trainer.model, tokenizer, out_dir)
        else:
            trainer.save_model(str(out_dir))
        if on_trained is not None:
            on_trained(model)
        if validated_after:
            metrics = validate(model)
            trainer.log({f"eval_{name.removeprefix('val_')}": value for name, value in metrics.items()})
    (out_dir / "training_args.bin").unlink(missing_ok=True)  # a pickle of our arguments; reward_info.json has them
    train_stats = [h for h in trainer.state.log_history if "loss" in h]
    last = train_stats[-1] if train_stats else {}
    return {**{f"train_{n}": last[n] for n in ("loss", "accuracy") if n in last}, **metrics}


def kept_validation(log_history: list[dict], best_step: int | None = None) -> dict[str, float]:
    """The validation metrics (`val_loss`, ...) of the weights a training kept, read from its log: those of the
    validation at `best_step` (early stopping loads the best model at the end), else of the last validation (every
    training with validation pairs validates its last step), so the model is not validated twice."""
    validations = [h for h in log_history if "eval_loss" in h]
    kept = next(h for h in validations if h["step"] == best_step) if best_step is not None else validations[-1]
    return {f"val_{name.removeprefix('eval_')}": value for name, value in kept.items() if name.startswith("eval_")}


def start_model(config: RewardConfig, init_dir: Path) -> torch.nn.Module:
    """The model member training starts from: `init_dir`'s weights (a new score head on a policy); with `lora`, a new
    adapter on them, or the adapter a LoRA reward member in `init_dir` carries, on its own base, to train on."""
    with quiet_loading():  # "newly initialized: score.weight" is expected here
        carried = adapter_dir(init_dir) if config.lora else None
        model = load_reward_model(adapter_base(carried) if carried else init_dir)
        disable_dropout(model)  # both responses of a pair must see the same network
        if not config.lora:
            return model
        from peft import LoraConfig, PeftModel, get_peft_model

        if carried:
            return PeftModel.from_pretrained(model, carried, is_trainable=True)
        return get_peft_model(model, LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=0.0,
                                                task_type="SEQ_CLS"))  # the score head trains too (modules_to_save)


def save_merged(model, tokenizer, out_dir: Path) -> torch.nn.Module:
    """Save a LoRA reward member: its adapter (and head) under `adapter/`, then the merged sequence classifier, a
    plain HF directory; returns the merged model."""
    model.save_pretrained(str(out_dir / ADAPTER_FOLDER))
    merged = model.merge_and_unload()
    merged.save_pretrained(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))
    return merged


def training_arguments(config: RewardConfig, output_dir: str, seed: int, has_val: bool,
                       batch_size: int | None = None) -> TrainingArguments:
    """Trainer arguments for one member: `batch_size` examples a step (None: `config.batch_size`; `train_member` gives
    `examples_per_batch`), no reports, validation at each logging step; no checkpoints, except with early stopping:
    then each validated model is saved to `output_dir` (the best and the newest are kept) and the best is loaded at
    the end."""
    early_stopping = has_val and config.early_stopping_patience > 0
    best = {"save_strategy": "steps", "save_steps": config.logging_steps, "save_total_limit": 1,
            "save_only_model": True, "load_best_model_at_end": True, "metric_for_best_model": "loss",
            "greater_is_better": False}
    return TrainingArguments(
        output_dir=output_dir, num_train_epochs=config.epochs, learning_rate=config.learning_rate,
        per_device_train_batch_size=batch_size or config.batch_size,
        per_device_eval_batch_size=max(config.batch_size, 32),
        weight_decay=config.weight_decay, warmup_steps=config.warmup_ratio, lr_scheduler_type="linear",
        logging_steps=config.logging_steps, eval_strategy="steps" if has_val else "no",
        eval_steps=config.logging_steps if has_val else None, report_to="none",
        seed=seed, data_seed=seed, disable_tqdm=True, remove_unused_columns=False, bf16=config.bf16,
        activation_checkpointing=config.activation_checkpointing, dataloader_pin_memory=torch.cuda.is_available(),
        use_cpu=not torch.cuda.is_available(),  # else, launched on CPUs, each process trains alone on every batch
        label_names=[], train_sampling_strategy="group_by_length" if config.group_by_length else "random",
        **(best if early_stopping else {"save_strategy": "no"}),
    )
