"""What PPO and GRPO write to disk: the resumable state of a run (`policy_state.pt`, once `ppo_state.pt`: trainable
weights, optimizer, β, iteration, every process's RNG) and the trained policy (a plain Hugging Face directory; PPO's
value head beside it, GRPO has none). DPO saves its policy with `write_policy` too (its resumable state is TRL's
checkpoint).

    save_state(trainer, state_dir)            # every `save_every` iterations, at the end and on cancel
    load_state(trainer, state_dir)            # continue exactly where save_state left off
    save_policy(trainer, path)                # AutoModelForCausalLM.from_pretrained(path) loads it
"""

from __future__ import annotations

import copy
import json
import os
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol

import torch
from accelerate.utils import gather_object
from safetensors.torch import load_file, save_file

from .config import PolicySetupError


class Checkpointable(Protocol):
    """What saving and resuming read of a trainer (`trainers.policy.optimizer.PolicyOptimizer` is one)."""

    accelerator: Any
    policy_model: Any  # the trained module: `.policy`, and PPO's `.value_head`
    optimizer: Any
    kl_controller: Any
    iteration: int
    config: Any  # a PolicyConfig dataclass
    tokenizer: Any
    backend: Any  # a RolloutBackend

VALUE_HEAD_FILE = "value_head.safetensors"
STATE_FILE = "policy_state.pt"
OLD_STATE_FILE = "ppo_state.pt"  # what runs before the rename wrote; still read on resume
CONFIG_FILE = "ppo_config.json"


def save_state(trainer: Checkpointable, state_dir: str | Path) -> None:
    """Write the run's state to `state_dir/policy_state.pt` (renamed into place, so never half-written)."""
    accelerator = trainer.accelerator
    rng = gather_object([torch.get_rng_state()]) if accelerator.num_processes > 1 else [torch.get_rng_state()]
    if accelerator.is_main_process:
        state_dir = Path(state_dir)
        state_dir.mkdir(parents=True, exist_ok=True)
        trainable = {n: p.detach().cpu() for n, p in trainer.policy_model.named_parameters() if p.requires_grad}
        state = {"model": trainable, "optimizer": trainer.optimizer.state_dict(), "rng": rng,
                 "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
                 "kl_controller": trainer.kl_controller.state_dict(), "iteration": trainer.iteration,
                 "config": asdict(trainer.config)}
        fd, tmp = tempfile.mkstemp(dir=state_dir, prefix=".state-", suffix=".tmp")
        os.close(fd)
        torch.save(state, tmp)
        os.replace(tmp, state_dir / STATE_FILE)
    accelerator.wait_for_everyone()


def load_state(trainer: Checkpointable, state_dir: str | Path) -> None:
    """Restore what `save_state` wrote, and hand the restored weights to the generation backend (a vLLM engine holds
    its own copy: without the sync the first iteration after a resume would sample from the weights the run started
    with); refuses a state made with other trainable weights (algorithm, LoRA or model)."""
    state = torch.load(state_file(state_dir), map_location="cpu", weights_only=True)
    model = trainer.policy_model
    missing = model.load_state_dict(state["model"], strict=False).missing_keys
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    if trainable & set(missing) or set(state["model"]) - trainable:
        raise PolicySetupError(f"the saved state in {state_dir} was made with other settings (algorithm, LoRA or "
                               "model); resume with the same settings or start a new run")
    trainer.backend.sync_weights(model.policy)
    trainer.optimizer.load_state_dict(state["optimizer"])
    trainer.kl_controller.load_state_dict(state["kl_controller"])
    trainer.iteration = int(state["iteration"])
    rank = trainer.accelerator.process_index
    if rank < len(state["rng"]):
        torch.set_rng_state(state["rng"][rank])
    if state["cuda_rng"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda_rng"])


def has_state(state_dir: str | Path) -> bool:
    return state_file(state_dir).is_file()


def state_file(state_dir: str | Path) -> Path:
    """The run's state file in `state_dir`: `STATE_FILE`, or an older run's `OLD_STATE_FILE` when only that is there."""
    new, old = Path(state_dir) / STATE_FILE, Path(state_dir) / OLD_STATE_FILE
    return old if old.is_file() and not new.is_file() else new


def save_policy(trainer: Checkpointable, path: str | Path) -> None:
    """A plain Hugging Face policy directory (LoRA merged; its adapter also kept in `adapter/`), the tokenizer, the
    value head (PPO only: a GRPO policy has none, so a later PPO run starts a fresh one) and the run's settings."""
    model = trainer.policy_model
    write_policy(model.policy, trainer.tokenizer, path, trainer.config.lora,
                 {"iterations": trainer.iteration, **asdict(trainer.config)}, CONFIG_FILE)
    if hasattr(model, "value_head"):
        save_file({k: v.detach().cpu().contiguous() for k, v in model.value_head.state_dict().items()},
                  Path(path) / VALUE_HEAD_FILE)


def write_policy(policy, tokenizer, path: str | Path, lora: bool, settings: dict, settings_file: str) -> None:
    """Save `policy` as a plain Hugging Face directory that `AutoModelForCausalLM` loads: with `lora`, its adapter in
    `adapter/` (a later LoRA run continues it) and the adapter merged into the weights; the tokenizer beside it, and
    the run's `settings` as JSON in `settings_file`."""
    path = Path(path)
    if lora:
        active = policy.active_adapter  # the policy's own (a reward model's adapters may sit beside it)
        policy.save_pretrained(path / "adapter", selected_adapters=[active])
        policy = copy.deepcopy(policy).merge_and_unload(adapter_names=[active])
    policy.save_pretrained(path)
    tokenizer.save_pretrained(path)
    (path / settings_file).write_text(json.dumps(settings, indent=2))


def load_value_head(policy_dir: str | Path) -> dict | None:
    """The value head saved beside a PPO policy, if any (a warm critic for the next run)."""
    path = Path(policy_dir) / VALUE_HEAD_FILE
    return load_file(path) if path.is_file() else None
