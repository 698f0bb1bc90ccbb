"""Tiny real architectures for tests and bench/gpu_check.py: a Qwen2-style and a Llama-3-style chat model, built
locally from a config (in bench/, the top room, so the GPU check imports nothing from tests/; tests import it here).

Nothing is downloaded. Each model (about 200k parameters) has a byte-level BPE tokenizer trained on the demo corpus
with the `tokenizers` library, a chat template, several end-of-turn ids and a `generation_config.json` whose
extras (`GENERATION_EXTRAS`: repetition penalty, no-repeat n-grams, top-k/top-p/temperature) a sampler must
neutralise. Both are written with `save_pretrained`, weights as safetensors, seeds fixed.

- `tiny_qwen_dir`: Qwen2ForCausalLM, tied embeddings with 64 spare rows. Template
  `<|im_start|>{role}\\n{content}<|im_end|>\\n` per message, `<|im_start|>assistant\\n` as generation prompt.
  EOS `<|im_end|>`; end ids `<|im_end|>` and `<|endoftext|>`; pad `<|endoftext|>` (distinct from EOS); no BOS.
- `tiny_llama_dir`: LlamaForCausalLM, embeddings exactly the vocabulary. Template `<|begin_of_text|>` then
  `<|start_header_id|>{role}<|end_header_id|>\\n\\n{content}<|eot_id|>` per message,
  `<|start_header_id|>assistant<|end_header_id|>\\n\\n` as generation prompt; the tokenizer also prepends BOS
  (as Llama-3's does). EOS `<|eot_id|>`; end ids `<|end_of_text|>` and `<|eot_id|>`; no pad token, and two
  `<|reserved_special_token_N|>` a pad fix reuses.

The session fixtures of `tests/model_fixtures.py` build them once; never write into those folders, copy one before
changing it. `build_tiny_qwen` and `build_tiny_llama` take options for the pad-fix variants (no pad, nothing to
reuse); the `make_*` functions build the folders the refusal tests need.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import (
    AutoModelForCausalLM,
    BertConfig,
    BertForMaskedLM,
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    LlamaForSequenceClassification,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from assets.corpus import build_corpus
from trainers.models.copies import copy_model_files

GENERATION_EXTRAS = dict(do_sample=True, repetition_penalty=1.5, no_repeat_ngram_size=2, top_k=20, top_p=0.8,
                         temperature=0.7)
QWEN_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
QWEN_CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
LLAMA_RESERVED = ("<|reserved_special_token_0|>", "<|reserved_special_token_1|>")
LLAMA_SPECIALS = ("<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>")
LLAMA_CHAT_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim"
    " + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)
GEMMA_SPECIALS = ("<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>")
GEMMA_CHAT_TEMPLATE = (
    "{{ bos_token }}{%- for message in messages %}"
    "{{- '<start_of_turn>' + ('model' if message['role'] == 'assistant' else message['role']) + '\\n'"
    " + message['content'] | trim + '<end_of_turn>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<start_of_turn>model\\n' }}{%- endif %}"
)
_VOCAB_SIZE = 384
_SIZES = dict(hidden_size=64, intermediate_size=384, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=256)


def _bpe(specials: tuple[str, ...], bos: str | None = None) -> Tokenizer:
    """A byte-level BPE on the demo corpus whose first ids are `specials`; prepends `bos` to every encoding if given."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=_VOCAB_SIZE, min_frequency=2, special_tokens=list(specials),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(build_corpus(500, seed=0), trainer=trainer)
    if bos is not None:  # as Llama-3's tokenizer.json does: BOS before every encoding made with special tokens
        bos_id = tokenizer.token_to_id(bos)
        tokenizer.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                                                 special_tokens=[(bos, bos_id)])
    return tokenizer


def _sentencepiece_bpe(specials: tuple[str, ...]) -> Tokenizer:
    """A SentencePiece-style BPE (Gemma's and Llama-2's): spaces as `▁`, byte fallback to `<0xNN>` tokens, no
    pre-tokenizer; trained on the demo corpus, its first ids `specials`."""
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tokenizer.normalizer = normalizers.Replace(" ", "\u2581")
    tokenizer.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    trainer = trainers.BpeTrainer(vocab_size=600, min_frequency=2, show_progress=False,
                                  special_tokens=[*specials, *(f"<0x{i:02X}>" for i in range(256))])
    tokenizer.train_from_iterator([t.replace(" ", "\u2581") for t in build_corpus(500, seed=0)], trainer=trainer)
    return tokenizer


def _save(model, tokenizer: PreTrainedTokenizerFast, end_tokens: list[str], out_dir: Path) -> Path:
    end_ids = [tokenizer.convert_tokens_to_ids(token) for token in end_tokens]
    model.generation_config = GenerationConfig(eos_token_id=end_ids, pad_token_id=tokenizer.pad_token_id,
                                               bos_token_id=tokenizer.bos_token_id, **GENERATION_EXTRAS)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def build_tiny_qwen(out_dir: str | Path, pad_token: str | None = "<|endoftext|>", sizes: dict | None = None,
                    vocab_rows: int | None = None) -> Path:
    """A Qwen2-architecture chat model in `out_dir`: EOS `<|im_end|>`, end ids `<|im_end|>` and `<|endoftext|>`.
    `sizes` (Qwen2Config fields) and `vocab_rows` (embedding rows) make a bigger one (bench/gpu_check.py)."""
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=_bpe(QWEN_SPECIALS), eos_token="<|im_end|>", pad_token=pad_token, bos_token=None,
        unk_token=None, chat_template=QWEN_CHAT_TEMPLATE, clean_up_tokenization_spaces=False)
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=vocab_rows or len(tokenizer) + 64, tie_word_embeddings=True, rope_theta=10000.0,
                         bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
                         eos_token_id=tokenizer.eos_token_id, **(sizes or _SIZES))
    return _save(Qwen2ForCausalLM(config), tokenizer, ["<|im_end|>", "<|endoftext|>"], Path(out_dir))


def build_tiny_llama(out_dir: str | Path, reserved: bool = True, end_of_text: bool = True) -> Path:
    """A Llama-architecture chat model in `out_dir` with Llama-3's special tokens and no pad token.

    EOS `<|eot_id|>`, end ids `<|end_of_text|>` and `<|eot_id|>`, BOS `<|begin_of_text|>` added by the tokenizer and
    by the chat template (as in Llama-3). `reserved=False` leaves out the reserved special tokens and
    `end_of_text=False` the second end token: with both, a pad fix has nothing to reuse and must add a token
    (the embeddings have no spare row).
    """
    ends = ("<|end_of_text|>", "<|eot_id|>") if end_of_text else ("<|eot_id|>",)
    specials = tuple(t for t in LLAMA_SPECIALS if end_of_text or t != "<|end_of_text|>")
    specials += LLAMA_RESERVED if reserved else ()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=_bpe(specials, bos="<|begin_of_text|>"), bos_token="<|begin_of_text|>",
        eos_token="<|eot_id|>", chat_template=LLAMA_CHAT_TEMPLATE, clean_up_tokenization_spaces=False)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), tie_word_embeddings=False, rope_theta=500000.0,
                         bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=[tokenizer.convert_tokens_to_ids(t) for t in ends], **_SIZES)
    return _save(LlamaForCausalLM(config), tokenizer, list(ends), Path(out_dir))


def build_tiny_gemma3(out_dir: str | Path) -> Path:
    """A Gemma 3 (text) chat model in `out_dir` with a SentencePiece-style tokenizer as Gemma's: Gemma's turn tokens,
    EOS `<end_of_turn>`, BOS from the template."""
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=_sentencepiece_bpe(GEMMA_SPECIALS), bos_token="<bos>", eos_token="<end_of_turn>",
        pad_token="<pad>", unk_token="<unk>", chat_template=GEMMA_CHAT_TEMPLATE, clean_up_tokenization_spaces=False)
    torch.manual_seed(0)
    config = Gemma3TextConfig(vocab_size=len(tokenizer), sliding_window=32, bos_token_id=tokenizer.bos_token_id,
                              eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, **_SIZES)
    return _save(Gemma3ForCausalLM(config), tokenizer, ["<end_of_turn>", "<eos>"], Path(out_dir))


def make_pickle_only(src: Path, dst: Path) -> Path:
    """`src` with its safetensors weights replaced by a `pytorch_model.bin` (tied tensors stay shared in it)."""
    copy_model_files(src, dst, skip=("model.safetensors",))
    torch.save(AutoModelForCausalLM.from_pretrained(src).state_dict(), dst / "pytorch_model.bin")
    return dst


def make_pickle_shards(src: Path, dst: Path) -> Path:
    """`src` with its weights as two pickle shards and `pytorch_model.bin.index.json`, as large checkpoints have."""
    copy_model_files(src, dst, skip=("model.safetensors",))
    state = AutoModelForCausalLM.from_pretrained(src).state_dict()
    names = list(state)
    shards = {"pytorch_model-00001-of-00002.bin": names[: len(names) // 2],
              "pytorch_model-00002-of-00002.bin": names[len(names) // 2:]}
    for file, keys in shards.items():
        torch.save({key: state[key] for key in keys}, dst / file)
    weight_map = {key: file for file, keys in shards.items() for key in keys}
    (dst / "pytorch_model.bin.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return dst


def make_remote_code(src: Path, dst: Path) -> Path:
    """`src` whose config asks for the folder's own Python code (`auto_map`, a model type transformers lacks)."""
    copy_model_files(src, dst)
    config = json.loads((dst / "config.json").read_text())
    config.update(model_type="tiny_custom", architectures=["TinyCustomForCausalLM"],
                  auto_map={"AutoConfig": "modeling_tiny.TinyConfig",
                            "AutoModelForCausalLM": "modeling_tiny.TinyCustomForCausalLM"})
    (dst / "config.json").write_text(json.dumps(config))
    (dst / "modeling_tiny.py").write_text("raise SystemExit('remote code ran')\n")
    return dst


def make_encoder_only(src: Path, dst: Path) -> Path:
    """A tiny BERT masked-LM (encoder-only) with `src`'s tokenizer."""
    torch.manual_seed(0)
    config = BertConfig(vocab_size=_VOCAB_SIZE + 16, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64)
    BertForMaskedLM(config).save_pretrained(dst)
    PreTrainedTokenizerFast.from_pretrained(src).save_pretrained(dst)
    return dst


def make_classifier_only(src: Path, dst: Path) -> Path:
    """`src`'s Llama saved as a sequence classifier (a reward model: a valid reward base, not a policy)."""
    torch.manual_seed(0)
    model = LlamaForSequenceClassification.from_pretrained(src, num_labels=1)
    model.save_pretrained(dst)
    PreTrainedTokenizerFast.from_pretrained(src).save_pretrained(dst)
    return dst


def make_no_tokenizer(src: Path, dst: Path) -> Path:
    """`src` without its tokenizer files."""
    copy_model_files(src, dst, skip=("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"))
    return dst


def make_damaged_weights(src: Path, dst: Path) -> Path:
    """`src` with its safetensors file cut in half (as an interrupted copy leaves it)."""
    copy_model_files(src, dst)
    weights = dst / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    return dst


def folder_digest(path: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file under `path` (empty when `path` does not exist)."""
    if not path.exists():
        return {}
    return {str(f.relative_to(path)): hashlib.sha256(f.read_bytes()).hexdigest()
            for f in sorted(path.rglob("*")) if f.is_file()}


def same_weights(a: Path, b: Path) -> bool:
    """Whether two single-file safetensors folders hold the same tensors."""
    left, right = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    return left.keys() == right.keys() and all(torch.equal(left[k], right[k]) for k in left)
