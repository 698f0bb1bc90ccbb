"""Loads tokenizers, policies and reward models from Hugging Face directories, with checks that fail in one line.

Every checkpoint of the studio is a `save_pretrained` directory holding its tokenizer. The tokenizer must have an
EOS token and a pad token distinct from EOS: padding is masked out of losses and the reward head scores the last
non-pad token, so a pad equal to EOS would hide the EOS the policy is rewarded for ending with. Padding side: the
tokenizer is always returned padding on the LEFT (set here, whatever the directory says), because batched
generation and PPO rollouts append tokens to the right of the prompt.

    tokenizer = load_tokenizer(path)
    policy = load_policy(path)                # AutoModelForCausalLM, eval mode
    reward_model = load_reward_model(path)    # AutoModelForSequenceClassification with one output (a new head
                                              # when `path` is a policy: seed torch before calling)

A plain forward pass over LEFT-padded rows must be given `position_ids=(attention_mask.cumsum(-1) - 1).clamp(min=0)`
(as `generate` does internally); without them GPT-2 counts the pads as positions and a padded row's logits and
rewards differ from the same row unpadded.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import SafetensorError
from transformers import (AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer,
                          PreTrainedModel, PreTrainedTokenizerBase)
from transformers.utils import logging as hf_logging

from storage.errors import StudioError

hf_logging.disable_progress_bar()  # a bar per checkpoint load drowns the worker's log lines

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")
_PAD_FIX = ("add one distinct from EOS (tokenizer.add_special_tokens({'pad_token': '<|pad|>'}), "
            "model.resize_token_embeddings(len(tokenizer)), then save_pretrained both)")


class ModelError(StudioError):
    """A model directory is missing, incomplete, or holds a tokenizer the studio cannot train with."""


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def check_model_dir(path: str | Path) -> Path:
    """The path as a Path, after checking it is a directory written by `save_pretrained` (has config.json)."""
    path = Path(path)
    if not path.exists():
        raise ModelError(f"model directory {path} does not exist; give the path of a save_pretrained directory")
    if not path.is_dir() or not (path / "config.json").is_file():
        raise ModelError(f"{path} is not a model directory (no config.json); "
                         "give a directory written by save_pretrained")
    return path


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerBase:
    """The directory's tokenizer, padding on the left, after checking it has an EOS and a separate pad token."""
    path = check_model_dir(path)
    if not any((path / name).is_file() for name in _TOKENIZER_FILES):
        raise ModelError(f"no tokenizer in {path}; "
                         f"save the tokenizer into it with tokenizer.save_pretrained({str(path)!r})")
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError, TypeError) as exc:
        raise ModelError(f"cannot load the tokenizer in {path}: {_first_line(exc)}") from exc
    if tokenizer.eos_token_id is None:
        raise ModelError(f"the tokenizer in {path} has no EOS token; set tokenizer.eos_token and save it again")
    if tokenizer.pad_token_id is None:
        raise ModelError(f"the tokenizer in {path} has no pad token; {_PAD_FIX}")
    if tokenizer.pad_token_id == tokenizer.eos_token_id:
        raise ModelError(f"the tokenizer in {path} uses its EOS token as pad token; {_PAD_FIX}")
    tokenizer.padding_side = "left"
    return tokenizer


def _check_embeddings(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, path: Path) -> None:
    rows = model.get_input_embeddings().num_embeddings
    if len(tokenizer) > rows:
        raise ModelError(f"the tokenizer in {path} has {len(tokenizer)} tokens but the model only {rows} embeddings; "
                         "call model.resize_token_embeddings(len(tokenizer)) and save the model again")


def load_policy(path: str | Path, dtype: torch.dtype | str | None = None) -> PreTrainedModel:
    """A causal LM in eval mode whose config and generation config carry the tokenizer's pad and EOS ids."""
    tokenizer = load_tokenizer(path)
    path = Path(path)
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    except (OSError, ValueError, KeyError, SafetensorError) as exc:  # SafetensorError: damaged weights file
        raise ModelError(f"cannot load a causal language model from {path}: {_first_line(exc)}") from exc
    _check_embeddings(model, tokenizer, path)
    model.config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model.eval()


def load_reward_model(path: str | Path, dtype: torch.dtype | str | None = None) -> PreTrainedModel:
    """A sequence classifier with one output (the reward) in eval mode; scores the last non-pad token.

    From a policy directory the score head is new (randomly initialised by torch's global RNG).
    """
    tokenizer = load_tokenizer(path)
    path = Path(path)
    try:
        model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1, dtype=dtype)
    except (OSError, ValueError, KeyError, RuntimeError, SafetensorError) as exc:
        raise ModelError(f"cannot load a reward model from {path}: {_first_line(exc)}") from exc
    _check_embeddings(model, tokenizer, path)
    model.config.pad_token_id = tokenizer.pad_token_id
    return model.eval()


def disable_dropout(model: torch.nn.Module) -> None:
    """Dropout probability 0 in every dropout layer, so train mode (needed by HF for activation checkpointing and
    by `Trainer`) computes what eval mode does: both sides of a pair, rollout and update, see one network."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
