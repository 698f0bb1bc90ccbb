"""Loads tokenizers, policies and reward models from Hugging Face directories, with checks that fail in one line.

Every checkpoint of the studio is a `save_pretrained` directory holding its tokenizer. A folder is data, never
code: no `trust_remote_code`, weights only from safetensors (see `trainers.models.checks`). The tokenizer must have an
EOS token and a pad token distinct from EOS: padding is masked out of losses and the reward head scores the last
non-pad token, so a pad equal to EOS would hide the EOS the policy is rewarded for ending with (`trainers.loop.project`
fixes a user's model that lacks one, in a copy, when a project starts). Padding side: the tokenizer is always
returned padding on the LEFT (set here, whatever the directory says), because batched generation and PPO rollouts
append tokens to the right of the prompt.

    tokenizer = load_tokenizer(path)
    policy = load_policy(path)                # AutoModelForCausalLM, eval mode
    reward_model = load_reward_model(path)    # AutoModelForSequenceClassification with one output (a new head
                                              # when `path` is a policy: seed torch before calling)

Both compute GPT-2's tanh GELU with PyTorch's one kernel (`fuse_activations`); the checkpoint is not changed.

A plain forward pass over LEFT-padded rows must be given `position_ids=(attention_mask.cumsum(-1) - 1).clamp(min=0)`
(as `generate` does internally); without them GPT-2 counts the pads as positions and a padded row's logits and
rewards differ from the same row unpadded.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from safetensors import SafetensorError
from transformers import (
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)
from transformers.activations import FastGELUActivation, GELUTanh, NewGELUActivation
from transformers.utils import logging as hf_logging

from .chat_format import ChatFormat, generation_eos
from .checks import (
    ModelError,
    ModelRole,
    check_model_dir,
    check_vocab_fits,
    find_weights,
    first_line,
    inspect_model_dir,
    read_tokenizer,
)
from .generation import neutralise_generation_config

hf_logging.disable_progress_bar()  # a bar per checkpoint load drowns the worker's log lines

_PAD_FIX = ("add one distinct from EOS (tokenizer.add_special_tokens({'pad_token': '<|pad|>'}), "
            "model.resize_token_embeddings(len(tokenizer)), then save_pretrained both), or start a project on it "
            "with init, which does this in a copy")
_LOAD_ERRORS = (OSError, ValueError, KeyError, RuntimeError, SafetensorError)  # SafetensorError: damaged weights


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerBase:
    """The directory's tokenizer, padding on the left, after checking it has an EOS and a separate pad token."""
    path = check_model_dir(path)
    tokenizer = read_tokenizer(path)  # before the config checks: a broken config.json is a tokenizer that won't load
    inspect_model_dir(path)
    if tokenizer.pad_token_id is None:
        raise ModelError(f"the tokenizer in {path} has no pad token; {_PAD_FIX}")
    if tokenizer.pad_token_id == tokenizer.eos_token_id:
        raise ModelError(f"the tokenizer in {path} uses its EOS token as pad token; {_PAD_FIX}")
    tokenizer.padding_side = "left"
    return tokenizer


def _load(auto_class, path: str | Path, role: ModelRole, what: str, **kwargs) -> tuple[PreTrainedModel,
                                                                                       PreTrainedTokenizerBase]:
    """The model and its left-padding tokenizer, after the folder checks; one-line ModelError on any failure."""
    tokenizer = load_tokenizer(path)
    folder = inspect_model_dir(path, role)
    find_weights(folder)  # damaged files fail in from_pretrained below
    try:
        model = auto_class.from_pretrained(folder.path, use_safetensors=True, trust_remote_code=False, **kwargs)
    except _LOAD_ERRORS as exc:
        raise ModelError(f"cannot load {what} from {folder.path}: {first_line(exc)}") from exc
    check_vocab_fits(folder, tokenizer, model.get_input_embeddings().num_embeddings)
    model.config.pad_token_id = tokenizer.pad_token_id
    fuse_activations(model)
    return model, tokenizer


def fuse_activations(model: torch.nn.Module) -> None:
    """Swap transformers' GPT-2 tanh GELU (`gelu_new`, `gelu_fast`: five elementwise ops, each with its own backward)
    for its one-kernel form (`GELUTanh`, which transformers calls equivalent but for float rounding): the activation's
    forward and backward ~4x faster on the CPU. Only the modules change; the config, and so a saved checkpoint, says
    what it said."""
    for module in list(model.modules()):
        for name, child in module.named_children():
            if type(child) in (NewGELUActivation, FastGELUActivation):
                setattr(module, name, GELUTanh())


def load_policy(path: str | Path, dtype: torch.dtype | str | None = None) -> PreTrainedModel:
    """A causal LM in eval mode whose config carries the tokenizer's pad id, and whose generation config carries
    only the pad id and every end id (the checkpoint's sampling extras are dropped: `neutralise_generation_config`)."""
    model, tokenizer = _load(AutoModelForCausalLM, path, ModelRole.POLICY, "a causal language model", dtype=dtype)
    neutralise_generation_config(model, load_chat_format(path, tokenizer).end_ids, tokenizer.pad_token_id)
    return model.eval()


def load_chat_format(path: str | Path, tokenizer: PreTrainedTokenizerBase | None = None) -> ChatFormat:
    """How the model in `path` turns prompts and responses into ids (its tokenizer, template and end ids)."""
    return ChatFormat.from_tokenizer(tokenizer or load_tokenizer(path), generation_eos(path))


def load_reward_model(path: str | Path, dtype: torch.dtype | str | None = None) -> PreTrainedModel:
    """A sequence classifier with one output (the reward) in eval mode; scores the last non-pad token.

    From a policy directory the score head is new (randomly initialised by torch's global RNG).
    """
    model, _ = _load(AutoModelForSequenceClassification, path, ModelRole.REWARD, "a reward model", num_labels=1,
                     dtype=dtype)
    return model.eval()


def default_device() -> torch.device:
    """This process's GPU (its LOCAL_RANK under accelerate) when there is one, else the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    return torch.device("cpu")


def load_sampler_policy(path: str | Path, bf16: bool = False) -> PreTrainedModel:
    """`load_policy` on `default_device()`, in bfloat16 when asked and on a GPU: the policy as the loop samples it."""
    device = default_device()
    dtype = torch.bfloat16 if bf16 and device.type == "cuda" else None
    return load_policy(path, dtype=dtype).to(device)


def disable_dropout(model: torch.nn.Module) -> None:
    """Dropout probability 0 in every dropout layer, so train mode (needed by HF for activation checkpointing and
    by `Trainer`) computes what eval mode does: both sides of a pair, rollout and update, see one network."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
