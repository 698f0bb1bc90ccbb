"""Checks that a model folder is data the studio can load: one-line `ModelError`s naming the path, nothing run.

A model folder is data, never code: a config that needs the folder's own Python (`auto_map`, or a model type this
transformers lacks) is refused, and weights load only from safetensors. A pickle-only checkpoint
(`pytorch_model.bin`) is refused unless the caller converts it (`trainers.models.copies.convert_pickle_weights`).

    folder = inspect_model_dir(path, ModelRole.POLICY)   # exists, config.json, no remote code, a causal LM
    check_weights(folder)                                 # safetensors present and readable (or ModelError)
    tokenizer = read_tokenizer(folder.path)               # loaded, has an EOS; pad not checked here
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import transformers
from huggingface_hub.errors import StrictDataclassError
from safetensors import SafetensorError, safe_open
from transformers import AutoConfig, AutoTokenizer, PreTrainedTokenizerBase
from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
from transformers.models.auto.modeling_auto import (
    MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
    MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES,
)

from storage.errors import InvalidInput, StudioError, first_line

from .chat_format import ChatFormat, generation_eos, model_context

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")
SAFETENSORS_FILE = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
PICKLE_FILE = "pytorch_model.bin"
PICKLE_INDEX = "pytorch_model.bin.index.json"
ALLOW_PICKLE_OPTION = "--allow-pickle"
CAUSAL_LM_CLASSES = frozenset(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values())
_CLASSIFIER_CLASSES = frozenset(MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES.values())


class ModelError(StudioError):
    """A model directory is missing, incomplete, needs code, or holds a tokenizer the studio cannot train with."""


class ModelRole(Enum):
    """What a folder is loaded as: a policy (a causal LM) or the start of a reward model (a causal LM or a
    sequence classifier)."""

    POLICY = "policy"
    REWARD = "reward"


@dataclass(frozen=True)
class ModelFolder:
    """A checked model folder: its path and parsed config.json."""

    path: Path
    config: dict

    @property
    def vocab_rows(self) -> int | None:
        """Rows of the input embedding matrix, from the config (None when the config does not say)."""
        text_config = self.config.get("text_config") or {}
        return self.config.get("vocab_size") or text_config.get("vocab_size")


def check_model_dir(path: str | Path) -> Path:
    """The path as a Path, after checking it is a directory written by `save_pretrained` (has config.json)."""
    path = Path(path)
    if not path.exists():
        raise ModelError(f"model directory {path} does not exist; give the path of a save_pretrained directory")
    if not path.is_dir():
        raise ModelError(f"{path} is a file, not a model directory; give the folder written by save_pretrained")
    if not (path / "config.json").is_file():
        raise ModelError(f"{path} is not a model directory (no config.json); "
                         "give a directory written by save_pretrained")
    return path


def _read_json(path: Path, name: str) -> dict:
    try:
        value = json.loads((path / name).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ModelError(f"{name} in {path} is unreadable ({first_line(exc)}); save the model again") from exc
    if not isinstance(value, dict):
        raise ModelError(f"{name} in {path} is not a JSON object; save the model again")
    return value


def _code_needed_by(config: dict) -> str | None:
    """What config.json names that transformers does not include (only the folder's own code could load it)."""
    model_type = config.get("model_type")
    if model_type not in CONFIG_MAPPING_NAMES:
        return f"model type {model_type!r}"
    missing = [name for name in config.get("architectures") or [] if not hasattr(transformers, name)]
    return f"architecture {missing[0]}" if missing else None


def _check_config_values(path: Path) -> None:
    """ModelError naming the field when config.json holds a value transformers refuses (a number written as text,
    a fraction for a size) or a context length out of range."""
    try:
        AutoConfig.from_pretrained(path, trust_remote_code=False)
        model_context(path)
    except StrictDataclassError as exc:  # its first line names the field, the cause says what is wrong
        raise ModelError(f"config.json in {path}: {first_line(exc.__cause__ or exc)}; fix it or save the model "
                         "again") from None
    except (ValueError, TypeError, KeyError, OSError) as exc:
        raise ModelError(f"config.json in {path} is refused by transformers ({first_line(exc)}); fix it or save the "
                         "model again") from None
    except InvalidInput as exc:
        raise ModelError(str(exc)) from None


def refuse_remote_code(path: Path, needed: str | None, auto_map: bool) -> None:
    """ModelError when loading the folder would need its own Python code (`needed` names what). An `auto_map`
    beside classes that transformers includes is ignored: the built-in class loads it, the folder's code never runs."""
    if needed is not None:
        asks = " (auto_map)" if auto_map else ""
        raise ModelError(f"{path} needs its own Python code{asks} to load: transformers {transformers.__version__} "
                         f"does not include its {needed}; the studio never runs code from a model folder: use a "
                         "model whose architecture transformers includes")


def _check_role(path: Path, config: dict, role: ModelRole) -> None:
    classes = CAUSAL_LM_CLASSES if role is ModelRole.POLICY else CAUSAL_LM_CLASSES | _CLASSIFIER_CLASSES
    architectures = config.get("architectures") or []
    fits = any(name in classes for name in architectures) if architectures else \
        config["model_type"] in (MODEL_FOR_CAUSAL_LM_MAPPING_NAMES if role is ModelRole.POLICY
                                 else MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES)
    if fits:
        return
    held = ", ".join(architectures) or f"model type {config['model_type']!r}"
    if role is ModelRole.POLICY:
        raise ModelError(f"{path} holds {held}, not a causal language model; give a model that generates text "
                         "(an AutoModelForCausalLM folder: Llama, Qwen2, Mistral, Gemma, GPT-2...)")
    raise ModelError(f"{path} holds {held}, which cannot start a reward model; give a causal language model or a "
                     "sequence classifier folder")


def inspect_model_dir(path: str | Path, role: ModelRole | None = None) -> ModelFolder:
    """The checked folder: a directory with a readable config.json, no remote code, and (unless `role` is None) an
    architecture fit for `role`. Reads files only; runs nothing from the folder."""
    path = check_model_dir(path)
    config = _read_json(path, "config.json")
    refuse_remote_code(path, _code_needed_by(config), "auto_map" in config)
    _check_config_values(path)
    if role is not None:
        _check_role(path, config, role)
    return ModelFolder(path, config)


def pickle_only(path: Path) -> bool:
    """Whether the folder's weights exist only as pickle files (`pytorch_model.bin` or its sharded index)."""
    has_safetensors = (path / SAFETENSORS_FILE).is_file() or (path / SAFETENSORS_INDEX).is_file()
    return not has_safetensors and ((path / PICKLE_FILE).is_file() or (path / PICKLE_INDEX).is_file())


def weight_files(path: Path, index_name: str = SAFETENSORS_INDEX, single_name: str = SAFETENSORS_FILE) -> list[Path]:
    """The weight files a loader reads: the shards an index names, else the single file (ModelError if a shard is
    missing; empty when there are neither)."""
    if (path / index_name).is_file():
        shards = sorted(set(_read_json(path, index_name).get("weight_map", {}).values()))
        missing = [name for name in shards if not (path / name).is_file()]
        if missing or not shards:
            named = missing[0] if missing else "no file"
            raise ModelError(f"the weights in {path} are incomplete: {index_name} names {named} that is not there; "
                             "copy or save the model again")
        return [path / name for name in shards]
    return [path / single_name] if (path / single_name).is_file() else []


def find_weights(folder: ModelFolder, allow_pickle: bool = False) -> list[Path]:
    """The folder's safetensors files (empty for pickle weights allowed to be converted); ModelError when there
    are none, or only pickle weights and `allow_pickle` is off."""
    path = folder.path
    if pickle_only(path):
        if allow_pickle:
            return []
        raise ModelError(f"{path} holds only pickle weights ({PICKLE_FILE}), which can run code when loaded; pass "
                         f"{ALLOW_PICKLE_OPTION} to convert them once into a safetensors copy in the data folder")
    files = weight_files(path)
    if not files:
        raise ModelError(f"no weights in {path} (no {SAFETENSORS_FILE}); save the model into it with "
                         "model.save_pretrained")
    return files


def check_weights(folder: ModelFolder, allow_pickle: bool = False) -> None:
    """`find_weights`, then each safetensors header read, which catches a truncated or foreign file."""
    path = folder.path
    for file in find_weights(folder, allow_pickle):
        try:
            with safe_open(str(file), framework="pt") as weights:
                weights.keys()
        except (OSError, SafetensorError) as exc:
            raise ModelError(f"the weights in {path} are unreadable ({file.name}: {first_line(exc)}); "
                             "copy or save the model again") from exc


def read_tokenizer(path: Path) -> PreTrainedTokenizerBase:
    """The folder's tokenizer (never its own code), checked to have an EOS token; its pad token is not checked."""
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise ModelError(f"no tokenizer in {path}; "
                         f"save the tokenizer into it with tokenizer.save_pretrained({str(path)!r})")
    settings = _read_json(path, "tokenizer_config.json") if (path / "tokenizer_config.json").is_file() else {}
    tokenizer_class = settings.get("tokenizer_class")
    if "auto_map" in settings and tokenizer_class and not hasattr(transformers, tokenizer_class):
        refuse_remote_code(path, f"tokenizer class {tokenizer_class}", auto_map=True)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=False)
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise ModelError(f"cannot load the tokenizer in {path}: {first_line(exc)}") from exc
    if tokenizer.eos_token_id is None:
        raise ModelError(f"the tokenizer in {path} has no EOS token; set tokenizer.eos_token and save it again")
    return tokenizer


def check_chat_template(path: Path, tokenizer: PreTrainedTokenizerBase) -> None:
    """ModelError naming the folder when its chat template cannot render a one-line prompt
    (`ChatFormat.check_template`); one that refuses only some prompts is no error: those are left out, counted."""
    try:
        ChatFormat.from_tokenizer(tokenizer).check_template()
    except InvalidInput as exc:
        raise ModelError(f"{path}: {exc}") from None


def check_vocab_fits(folder: ModelFolder, tokenizer: PreTrainedTokenizerBase, rows: int | None = None) -> None:
    """ModelError when the tokenizer has more tokens than the model has embedding rows (`rows`, else the config's)."""
    rows = rows if rows is not None else folder.vocab_rows
    if rows is not None and len(tokenizer) > rows:
        raise ModelError(f"the tokenizer in {folder.path} has {len(tokenizer)} tokens but the model only {rows} "
                         "embeddings; call model.resize_token_embeddings(len(tokenizer)) and save the model again")


def declared_end_ids(folder: ModelFolder, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """Every id that ends a response, sorted: the tokenizer's EOS and the folder's declared end ids
    (`trainers.models.chat_format.generation_eos`)."""
    return sorted({tokenizer.eos_token_id, *generation_eos(folder.path)} - {None})
