"""Prepared copies of a user's model folder: pickle weights converted to safetensors, a pad token fixed.

The user's folder is only read. Each change writes a new folder holding only the files a model needs (MODEL_FILES
and the safetensors weights, links to them followed: a Hugging Face cache snapshot links each to its blob; nothing
else, so a model card, code, pickles or `notes.txt -> /some/secret` stay out of the data folder), and
`make_prepared_copy` builds the steps in a hidden folder beside the destination and renames the result into place,
so a failure leaves nothing behind.

    fix = plan_pad_fix(tokenizer, end_ids=[...])      # None: pad set and distinct from EOS
    make_prepared_copy(folder, fix, data_dir / "models" / "qwen")
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, PreTrainedTokenizerBase

from .checks import (
    CAUSAL_LM_CLASSES,
    PICKLE_FILE,
    PICKLE_INDEX,
    SAFETENSORS_FILE,
    SAFETENSORS_INDEX,
    ModelError,
    ModelFolder,
    check_weights,
    first_line,
    inspect_model_dir,
    pickle_only,
    read_tokenizer,
    weight_files,
)

NEW_PAD_TOKEN = "<|pad|>"
# What a prepared copy holds besides the weights: config, generation config, tokenizer (fast and slow), chat template.
MODEL_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
               "special_tokens_map.json", "added_tokens.json", "vocab.json", "merges.txt", "vocab.txt",
               "tokenizer.model", "spiece.model", "sentencepiece.bpe.model", "chat_template.jinja",
               "chat_template.json", SAFETENSORS_FILE, SAFETENSORS_INDEX)
# Written afresh by tokenizer.save_pretrained: stale copies would bring the old pad token back.
_TOKENIZER_METADATA = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                       "chat_template.jinja", "chat_template.json")


def copy_model_files(src: Path, dst: Path, skip: tuple[str, ...] = ()) -> None:
    """Copy the files of `src` a model needs (MODEL_FILES and the safetensors shards its index names; a link to one
    is followed, its contents copied) into the new folder `dst`, leaving out the names in `skip`."""
    dst.mkdir(parents=True)
    for name in dict.fromkeys([*MODEL_FILES, *(file.name for file in weight_files(src))]):
        if (src / name).is_file() and name not in skip:
            shutil.copyfile(src / name, dst / name)


def _unshared(state: dict, source: Path) -> dict[str, torch.Tensor]:
    """The state dict with tensors that share memory cloned apart (safetensors stores no aliases), all contiguous."""
    seen: set[int] = set()
    tensors = {}
    for name, value in state.items():
        if not isinstance(value, torch.Tensor):
            raise ModelError(f"{source} holds {name!r}, which is not a tensor; save the model with save_pretrained")
        storage = value.untyped_storage().data_ptr()
        tensors[name] = value.clone().contiguous() if storage in seen else value.contiguous()
        seen.add(storage)
    return tensors


def convert_pickle_weights(src: Path, dst: Path) -> Path:
    """A copy of `src` in the new folder `dst` whose weights are `src`'s pickle weights (one file or shards) read
    with `torch.load(weights_only=True)` and written as safetensors; returns `dst`."""
    shards = weight_files(src, PICKLE_INDEX, PICKLE_FILE)
    copy_model_files(src, dst)
    renamed = {shard.name: shard.name.replace("pytorch_model", "model").replace(".bin", ".safetensors")
               for shard in shards}
    for shard in shards:
        try:
            state = torch.load(shard, map_location="cpu", weights_only=True)
        except Exception as exc:  # a damaged or hostile pickle fails in many ways; each is one unreadable file
            raise ModelError(f"the weights in {src} are unreadable ({shard.name}: {first_line(exc)}); "
                             "copy or save the model again") from exc
        if not isinstance(state, dict):
            raise ModelError(f"{shard} does not hold a state dict; save the model with save_pretrained")
        save_file(_unshared(state, shard), dst / renamed[shard.name], metadata={"format": "pt"})
    if (src / PICKLE_INDEX).is_file():
        index = json.loads((src / PICKLE_INDEX).read_text())
        index["weight_map"] = {name: renamed[file] for name, file in index["weight_map"].items()}
        (dst / SAFETENSORS_INDEX).write_text(json.dumps(index, indent=2))
    return dst


@dataclass(frozen=True)
class PadFix:
    """How a tokenizer gets a pad token distinct from EOS: an unused special token reused, or a new one added."""

    token: str
    added: bool

    def describe(self, source: Path, copy: Path, token_id: int, rows: tuple[int, int] | None) -> str:
        """The sentence the studio prints; `rows` = (before, after) when the embeddings grew."""
        done = (f"added the pad token {self.token!r} (id {token_id})" if self.added else
                f"reused its unused special token {self.token!r} (id {token_id}) as pad")
        grown = f", grew the embeddings from {rows[0]} to {rows[1]} rows" if rows else ""
        return f"the tokenizer of {source} had no pad token distinct from EOS: {done}{grown}, in a copy at {copy}"


def _reuse_rank(token_id: int, text: str, end_ids: list[int]) -> int | None:
    """0: named for padding; 1: reserved or unused; 2: an end-of-text token; None: not to be reused as pad."""
    name = text.lower()
    if "pad" in name:
        return 0
    if "reserved" in name or "unused" in name:
        return 1
    if token_id in end_ids or "endoftext" in name or "end_of_text" in name:
        return 2
    return None


def _template_text(tokenizer: PreTrainedTokenizerBase) -> str:
    template = tokenizer.chat_template or ""
    return template if isinstance(template, str) else json.dumps(template)


def plan_pad_fix(tokenizer: PreTrainedTokenizerBase, end_ids: list[int]) -> PadFix | None:
    """None when the pad token is set and differs from EOS; else the unused special token to reuse, best first:
    one named for padding, a reserved/unused one, another end-of-text token than EOS (Qwen's `<|endoftext|>` beside
    `<|im_end|>`: the sampler never emits the pad, so responses end with EOS). A special token is unused when it is
    not EOS, BOS, UNK or another named special token, and the chat template does not write it. With no candidate,
    a new pad token is added."""
    if tokenizer.pad_token_id is not None and tokenizer.pad_token_id != tokenizer.eos_token_id:
        return None
    named = set(tokenizer.all_special_ids) - ({tokenizer.pad_token_id} - {tokenizer.eos_token_id})
    template = _template_text(tokenizer)
    ranked = sorted((rank, token_id, added.content) for token_id, added in tokenizer.added_tokens_decoder.items()
                    if added.special and token_id not in named and added.content not in template
                    and (rank := _reuse_rank(token_id, added.content, end_ids)) is not None)
    if ranked:
        return PadFix(ranked[0][2], added=False)
    vocab = tokenizer.get_vocab()
    token = next(name for n in range(len(vocab) + 1)
                 if (name := NEW_PAD_TOKEN if n == 0 else f"<|pad_{n}|>") not in vocab)
    return PadFix(token, added=True)


def _auto_class(folder: ModelFolder):
    causal = any(name in CAUSAL_LM_CLASSES for name in folder.config.get("architectures") or [])
    return AutoModelForCausalLM if causal or not folder.config.get("architectures") else \
        AutoModelForSequenceClassification


def _set_pad_id(path: Path, pad_id: int) -> None:
    """Write `pad_id` into the copy's config.json and generation_config.json (others read the pad from them)."""
    for name in ("config.json", "generation_config.json"):
        if (path / name).is_file():
            config = json.loads((path / name).read_text())
            config["pad_token_id"] = pad_id
            (path / name).write_text(json.dumps(config, indent=2) + "\n")


def apply_pad_fix(folder: ModelFolder, fix: PadFix, dst: Path) -> tuple[int, tuple[int, int] | None]:
    """A copy of `folder` in the new folder `dst` whose tokenizer pads with `fix.token`; when the token is new and
    the embeddings have no spare row, the model is loaded, resized and saved there. Returns the pad id and the
    (before, after) embedding rows when they grew."""
    tokenizer = read_tokenizer(folder.path)
    if fix.added:
        tokenizer.add_special_tokens({"pad_token": fix.token})
    else:
        tokenizer.pad_token = fix.token
    rows = folder.vocab_rows
    grow = rows is None or len(tokenizer) > rows
    weights = (SAFETENSORS_INDEX, *(file.name for file in weight_files(folder.path))) if grow else ()
    copy_model_files(folder.path, dst, skip=_TOKENIZER_METADATA + weights)  # save_pretrained writes these anew
    if grow:
        model = _auto_class(folder).from_pretrained(folder.path, use_safetensors=True, trust_remote_code=False,
                                                    dtype="auto")
        rows = model.get_input_embeddings().num_embeddings
        if len(tokenizer) > rows:
            model.resize_token_embeddings(len(tokenizer), mean_resizing=True)
        model.config.pad_token_id = model.generation_config.pad_token_id = tokenizer.pad_token_id
        model.save_pretrained(dst)
    tokenizer.save_pretrained(dst)
    _set_pad_id(dst, tokenizer.pad_token_id)
    after = model.get_input_embeddings().num_embeddings if grow else rows
    return tokenizer.pad_token_id, (rows, after) if after != rows else None


def make_prepared_copy(folder: ModelFolder, fix: PadFix | None, dst: Path, source: Path | None = None) -> list[str]:
    """Build `dst` (which must not exist) from `folder`: pickle weights converted, then `fix` applied; checked to
    load (safetensors readable, pad distinct from EOS) before it is renamed into place. Returns what was done, as
    sentences naming `dst` and `source` (what the user gave, default `folder`: e.g. the GGUF file it came from)."""
    if not pickle_only(folder.path) and fix is None:
        raise ValueError(f"{folder.path} needs no prepared copy")  # the rename below must never move a user's folder
    notes = []
    with tempfile.TemporaryDirectory(dir=dst.parent, prefix=f".{dst.name}-") as tmp:
        current = folder
        if pickle_only(folder.path):
            converted = convert_pickle_weights(folder.path, Path(tmp) / "converted")
            current = inspect_model_dir(converted)
            notes.append(f"converted the pickle weights of {folder.path} to safetensors (read with "
                         f"weights_only=True), in a copy at {dst}")
        if fix is not None:
            pad_id, rows = apply_pad_fix(current, fix, Path(tmp) / "padded")
            current = inspect_model_dir(Path(tmp) / "padded")
            notes.append(fix.describe(source or folder.path, dst, pad_id, rows))
        check_weights(current)
        tokenizer = read_tokenizer(current.path)
        if tokenizer.pad_token_id is None or tokenizer.pad_token_id == tokenizer.eos_token_id:
            raise ModelError(f"the pad token fix of {folder.path} did not hold in its copy; report this as a bug")
        current.path.rename(dst)
    return notes
