"""A tiny GGUF file written here with the `gguf` package's writer, as llama.cpp's converter writes one: a Llama
model's config and tokenizer (byte-level BPE: tokens, token types, merges, special ids, chat template) as metadata,
its tensors under GGUF names (query and key rows permuted as llama.cpp does), float32 but for the token embedding
(Q8_0, so the file has something to dequantise), no `output.weight` (tied embeddings). Nothing is downloaded.

    write_tiny_gguf(tiny_llama_dir, tmp_path / "tiny.gguf")
"""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np
from transformers import AutoModelForCausalLM, AutoTokenizer


def _permute(weights: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's row order of a query or key projection (transformers undoes it when it reads the file)."""
    return weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:]).swapaxes(1, 2) \
        .reshape(weights.shape)


def _write_tokenizer(writer: gguf.GGUFWriter, model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    saved = json.loads((model_dir / "tokenizer.json").read_text())
    vocab = {**saved["model"]["vocab"], **{token["content"]: token["id"] for token in saved["added_tokens"]}}
    tokens = [token for token, _ in sorted(vocab.items(), key=lambda item: item[1])]
    special = {token["content"] for token in saved["added_tokens"] if token["special"]}
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL if token in special else gguf.TokenType.NORMAL for token in tokens])
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in saved["model"]["merges"]])
    writer.add_bos_token_id(tokenizer.bos_token_id)
    writer.add_eos_token_id(tokenizer.eos_token_id)
    writer.add_add_bos_token(True)
    writer.add_chat_template(tokenizer.chat_template)


def write_tiny_gguf(model_dir: Path, path: Path, architecture: str = "llama") -> Path:
    """The Llama model of `model_dir` (bench/tiny_models.py's) as a GGUF file at `path`; `architecture` names
    another in the metadata (one transformers cannot read, for the refusal tests)."""
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    config = model.config
    writer = gguf.GGUFWriter(path, architecture)
    writer.add_name("tiny llama")
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_freq_base(config.rope_parameters["rope_theta"])
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_vocab_size(config.vocab_size)
    writer.add_rope_dimension_count(config.hidden_size // config.num_attention_heads)
    _write_tokenizer(writer, model_dir)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, config.num_hidden_layers)
    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight":
            continue  # left out: the file's model ties its output to the token embedding
        array = tensor.float().numpy()
        if name.endswith("q_proj.weight"):
            array = _permute(array, config.num_attention_heads)
        elif name.endswith("k_proj.weight"):
            array = _permute(array, config.num_key_value_heads)
        gguf_name = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if gguf_name == "token_embd.weight":
            writer.add_tensor(gguf_name, gguf.quants.quantize(array, gguf.GGMLQuantizationType.Q8_0),
                              raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            writer.add_tensor(gguf_name, np.ascontiguousarray(array))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
