"""An exported folder as one GGUF file for llama.cpp and Ollama, written with the `gguf` package (llama.cpp's own
Python library) rather than a hand-written map:

- tensor names from llama.cpp's Hugging Face → GGUF maps (`gguf.get_tensor_name_map`), with the changes llama.cpp's
  converter makes per architecture (Llama's query/key rows permuted, GPT-2's Conv1D weights transposed, Gemma 3's
  norm weights stored as 1 + w), which transformers' GGUF reader undoes;
- hyper-parameters under the keys transformers reads back (`GGUF_CONFIG_MAPPING`, inverted);
- the vocabulary with `gguf.BpeVocab` (byte-level BPE) or `gguf.LlamaHfVocab` (SentencePiece-style BPE with byte
  fallback), merges, special tokens and the chat template with `gguf.SpecialVocab`; the pre-tokenizer named when its
  split matches one transformers and llama.cpp know by name, else `default` (a tokenizer llama.cpp does not know);
- f16 weights by default (1-D tensors f32, as llama.cpp writes them), or q8_0 (`gguf.quants`; a matrix whose rows
  are not a whole number of 32-value blocks stays f16).

    done = write_gguf(Path("exported/v3"), Path("exported/v3.gguf"), quant="q8_0")
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
import torch
from transformers import AutoConfig, AutoModelForCausalLM
from transformers.integrations.ggml import GGUF_CONFIG_MAPPING
from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_PRE_TOKENIZER_SPLITS

from storage.errors import InvalidInput

# Hugging Face model_type -> (the GGUF architecture, llama.cpp's architecture enum)
ARCHITECTURES = {
    "llama": ("llama", gguf.MODEL_ARCH.LLAMA),
    "mistral": ("llama", gguf.MODEL_ARCH.LLAMA),
    "qwen2": ("qwen2", gguf.MODEL_ARCH.QWEN2),
    "gemma3_text": ("gemma3", gguf.MODEL_ARCH.GEMMA3),
    "gpt2": ("gpt2", gguf.MODEL_ARCH.GPT2),
}
QUANTS = {"f16": gguf.LlamaFileType.MOSTLY_F16, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}
_GPT2_TRANSPOSED = (".c_attn.weight", ".c_proj.weight", ".c_fc.weight")
_GPT2_BUFFERS = (".attn.bias", ".attn.masked_bias")


@dataclass(frozen=True)
class GgufFile:
    """A written GGUF file: its path, size, type and the pre-tokenizer name it carries."""

    path: Path
    bytes: int
    quant: str
    pre_tokenizer: str

    def line(self) -> str:
        known = "" if self.pre_tokenizer != "default" else " (a tokenizer llama.cpp does not know by name: it splits " \
                                                            "text with its default rule)"
        return f"wrote {self.path}: {self.bytes / 1e6:,.1f} MB, {self.quant}, pre-tokenizer {self.pre_tokenizer}{known}"


def gguf_architecture(config) -> tuple[str, gguf.MODEL_ARCH]:
    """The GGUF architecture of a Hugging Face config, or a one-line refusal naming those that can be exported."""
    if config.model_type not in ARCHITECTURES:
        raise InvalidInput(f"a {config.model_type} model cannot be written as GGUF here (it can: "
                           f"{', '.join(sorted(ARCHITECTURES))}); export the Hugging Face folder without --gguf")
    return ARCHITECTURES[config.model_type]


def _config_value(config, attribute: str):
    if attribute == "head_dim" and getattr(config, "head_dim", None) is None:
        return config.hidden_size // config.num_attention_heads
    if attribute == "rope_theta":
        return (getattr(config, "rope_parameters", None) or {}).get("rope_theta", getattr(config, "rope_theta", None))
    if attribute == "feed_forward_length":  # GPT-2's n_inner (None: four times the width)
        return config.n_inner or 4 * config.n_embd
    if attribute == "n_ctx":  # transformers reads GPT-2's context into n_ctx; the config keeps it in n_positions
        return config.n_positions
    return getattr(config, attribute, None)


def write_hyperparameters(writer: gguf.GGUFWriter, architecture: str, config) -> None:
    """The model's shape under the keys transformers reads back (and llama.cpp reads)."""
    for key, attribute in GGUF_CONFIG_MAPPING[architecture].items():
        value = None if attribute is None else _config_value(config, attribute)
        if key == "rope.dimension_count" and value is None and hasattr(config, "num_attention_heads"):
            value = _config_value(config, "head_dim")
        if value is None or isinstance(value, (list, dict)):
            continue
        name = f"{architecture}.{key}"
        if isinstance(value, bool) or isinstance(value, int):
            writer.add_uint32(name, int(value))
        elif isinstance(value, float):
            writer.add_float32(name, value)
    if architecture == "gemma3":
        writer.add_uint32(f"{architecture}.attention.value_length", _config_value(config, "head_dim"))


def pre_tokenizer_name(folder: Path) -> str:
    """The name of the tokenizer's split rule where transformers and llama.cpp know it (`qwen2`, `llama-bpe`, ...);
    `gpt-2` for GPT-2's own byte-level rule; `default` otherwise."""
    pre = json.loads((folder / "tokenizer.json").read_text()).get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers", [pre])
    splits = [s.get("pattern", {}).get("Regex") for s in steps if s.get("type") == "Split"]
    for name, regex in GGUF_PRE_TOKENIZER_SPLITS.items():
        if splits and splits[0] == regex:
            return name
    if not splits and any(s.get("type") == "ByteLevel" and s.get("use_regex", True) for s in steps):
        return "gpt-2"
    return "default"


def write_vocabulary(writer: gguf.GGUFWriter, folder: Path, rows: int) -> str:
    """Tokens, types, merges, special ids and chat template; returns the pre-tokenizer name written."""
    try:
        vocab = gguf.BpeVocab(folder)
        pre = pre_tokenizer_name(folder)
    except FileNotFoundError:
        try:
            vocab, pre = gguf.LlamaHfVocab(folder), "default"
        except (FileNotFoundError, TypeError) as exc:
            raise InvalidInput(f"{folder}'s tokenizer is neither byte-level BPE nor SentencePiece-style BPE "
                               f"({exc}); export the Hugging Face folder without --gguf") from None
    added = {t["id"]: t.get("special", False) for t in json.loads((folder / "tokenizer.json").read_text())
             .get("added_tokens") or []}
    tokens, scores, types = [], [], []
    for index, (text, score, kind) in enumerate(vocab.all_tokens()):
        tokens.append(text)
        scores.append(score)
        # the tokenizer's added tokens as llama.cpp's converter marks them (in the vocabulary or not): special ones
        # control, the others user-defined, so that each is matched whole
        types.append(kind if index not in added else
                     gguf.TokenType.CONTROL if added[index] else gguf.TokenType.USER_DEFINED)
    for index in range(len(tokens), rows):  # embedding rows past the vocabulary (padded for speed)
        tokens.append(f"[PAD{index}]".encode())
        scores.append(-1000.0)
        types.append(gguf.TokenType.UNUSED)
    writer.add_tokenizer_model(vocab.tokenizer_model)
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    if vocab.tokenizer_model == "llama":
        writer.add_token_scores(scores)
    gguf.SpecialVocab(folder, load_merges=vocab.tokenizer_model == "gpt2", n_vocab=len(tokens)).add_to_gguf(
        writer, quiet=True)
    return pre


def _permute(weights: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's row order of a Llama query or key projection."""
    return weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:]).swapaxes(1, 2) \
        .reshape(weights.shape)


def gguf_tensors(model, architecture: str):
    """(GGUF name, float32 array) for each tensor the file holds, changed as llama.cpp's converter changes them."""
    config = model.config
    names = gguf.get_tensor_name_map(ARCHITECTURES[config.model_type][1], config.num_hidden_layers)
    tied = getattr(config, "tie_word_embeddings", False)
    for name, tensor in model.state_dict().items():
        if name.endswith(_GPT2_BUFFERS) or (tied and name == "lm_head.weight"):
            continue
        array = tensor.to(torch.float32).numpy()
        if architecture == "llama" and name.endswith("q_proj.weight"):
            array = _permute(array, config.num_attention_heads)
        elif architecture == "llama" and name.endswith("k_proj.weight"):
            array = _permute(array, config.num_key_value_heads)
        elif architecture == "gpt2" and name.endswith(_GPT2_TRANSPOSED):
            array = array.T
        elif architecture == "gemma3" and name.endswith("norm.weight"):
            array = array + 1  # Gemma scales by 1 + w; llama.cpp stores 1 + w
        gguf_name = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if gguf_name is None:
            raise InvalidInput(f"llama.cpp's map for {architecture} has no name for tensor {name}; export the Hugging "
                               "Face folder without --gguf")
        yield gguf_name, np.ascontiguousarray(array)


def _stored(array: np.ndarray, quant: str) -> tuple[np.ndarray, gguf.GGMLQuantizationType | None]:
    if array.ndim == 1:
        return array, None  # norms and biases stay float32
    if quant == "q8_0" and array.shape[-1] % gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType.Q8_0][0] == 0:
        return gguf.quants.quantize(array, gguf.GGMLQuantizationType.Q8_0), gguf.GGMLQuantizationType.Q8_0
    return array.astype(np.float16), None


def check_quant(quant: str | None) -> None:
    if quant is not None and quant not in QUANTS:
        raise InvalidInput(f"--quant {quant} is not one of {', '.join(QUANTS)}; f16 keeps the weights, q8_0 halves "
                           "them")


def write_gguf(folder: Path, path: Path, quant: str = "f16", name: str = "") -> GgufFile:
    """The model of the Hugging Face `folder` as the GGUF file `path` (written beside it, then renamed in)."""
    check_quant(quant)
    architecture, _ = gguf_architecture(AutoConfig.from_pretrained(folder))
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    partial = path.with_name(f".{path.name}.partial")
    writer = gguf.GGUFWriter(partial, architecture)
    try:
        writer.add_name(name or folder.name)
        writer.add_file_type(QUANTS[quant])
        write_hyperparameters(writer, architecture, model.config)
        pre = write_vocabulary(writer, folder, model.get_input_embeddings().weight.shape[0])
        for gguf_name, array in gguf_tensors(model, architecture):
            data, raw_dtype = _stored(array, quant)
            writer.add_tensor(gguf_name, data, raw_dtype=raw_dtype)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        partial.rename(path)
    finally:
        partial.unlink(missing_ok=True)
    return GgufFile(path, path.stat().st_size, quant, pre)
