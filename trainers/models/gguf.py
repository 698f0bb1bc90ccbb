"""GGUF files (llama.cpp, Ollama) converted once into a safetensors model folder the studio starts from.

A GGUF file holds a model's weights (often quantised), its config and its tokenizer (with the chat template) as
metadata. transformers reads it (`from_pretrained(folder, gguf_file=name)`, with the `gguf` package), dequantising
the weights; the model it returns refuses `save_pretrained`, so the weights move into a fresh model built from the
same config (the quantisation config dropped, tied embeddings tied again) and that one is saved. Everything is read
before anything is written: a truncated or corrupt file, or an architecture transformers cannot read from GGUF, is
a one-line ModelError.

    source = gguf_source(path)            # the .gguf a path names (a file, or a folder's only one); None: a folder
    done = convert_gguf(source, dst)      # dst: a new safetensors folder
    print(done.describe(dst))             # converted the GGUF file ... (llama; tensors Q4_1 (210 tensors), ...) ...
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from storage.errors import first_line

from .checks import PICKLE_FILE, PICKLE_INDEX, SAFETENSORS_FILE, SAFETENSORS_INDEX, ModelError

SUFFIX = ".gguf"
_NOT_ARCHITECTURES = ("general", "tokenizer")  # key groups of transformers' GGUF mapping beside the architectures


def gguf_source(path: str | Path) -> Path | None:
    """The GGUF file `path` names: itself when it is a `.gguf` file, or the only `.gguf` of a folder holding no
    safetensors or pickle weights; None for anything else (a model folder, checked as one). A folder holding several
    GGUF files is a ModelError naming them."""
    path = Path(path)
    if path.is_file():
        return path if path.name.lower().endswith(SUFFIX) else None
    if not path.is_dir() or any((path / name).is_file() for name in (SAFETENSORS_FILE, SAFETENSORS_INDEX,
                                                                      PICKLE_FILE, PICKLE_INDEX)):
        return None
    files = sorted(f for f in path.iterdir() if f.is_file() and f.name.lower().endswith(SUFFIX))
    if len(files) > 1:
        named = ", ".join(f.name for f in files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
        raise ModelError(f"{path} holds {len(files)} GGUF files ({named}); give the one to start from, e.g. "
                         f"--model {files[0]}")
    return files[0] if files else None


def readable_architectures() -> list[str]:
    """The architectures transformers reads from GGUF files, as it lists them."""
    from transformers.integrations.gguf import GGUF_CONFIG_ARCHS
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    return sorted((set(GGUF_SUPPORTED_ARCHITECTURES) - set(_NOT_ARCHITECTURES)) | set(GGUF_CONFIG_ARCHS))


@dataclass(frozen=True)
class GgufHeader:
    """What a GGUF file's metadata says: its architecture and how many tensors each storage type holds."""

    path: Path
    architecture: str
    tensor_types: Counter

    def storage(self) -> str:
        """The tensor types, most used first: "Q4_1 (210 tensors), F32 (61), Q8_0 (1)"."""
        counts = self.tensor_types.most_common()
        return ", ".join(f"{name} ({count}{' tensors' if i == 0 else ''})" for i, (name, count) in enumerate(counts))


def read_gguf_header(path: Path) -> GgufHeader:
    """The file's architecture and tensor types, read with the `gguf` package; every tensor's extent is checked
    against the file, so a truncated or corrupt file is a one-line ModelError."""
    from gguf import GGUFReader

    try:
        reader = GGUFReader(path)
        field = reader.fields["general.architecture"]
        architecture = str(field.parts[field.data[0]].tobytes(), "utf-8")
        types = Counter(tensor.tensor_type.name for tensor in reader.tensors)
    except KeyError:
        raise ModelError(f"the GGUF file {path} names no architecture (general.architecture); it was not written "
                         "by llama.cpp's converter: convert the model again") from None
    except (ValueError, IndexError, OSError, UnicodeDecodeError) as exc:
        raise ModelError(f"the GGUF file {path} is truncated or corrupt ({first_line(exc)}); download or copy it "
                         "again") from None
    if not types:
        raise ModelError(f"the GGUF file {path} holds no tensors; give the file of a whole model")
    return GgufHeader(path, architecture, types)


def check_gguf(path: Path):
    """The header and the config transformers reads from the file, once it is known readable and a causal LM."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    header = read_gguf_header(path)
    try:
        config = AutoConfig.from_pretrained(path.parent, gguf_file=path.name)
    except ValueError as exc:
        import transformers

        raise ModelError(f"the GGUF file {path} holds a {header.architecture!r} model, which transformers "
                         f"{transformers.__version__} cannot read from GGUF ({first_line(exc)}); it reads "
                         f"{', '.join(readable_architectures())}: give one of those, or a Hugging Face model "
                         "folder") from None
    except (OSError, KeyError, TypeError) as exc:
        raise ModelError(f"cannot read the config of the GGUF file {path} ({first_line(exc)}); convert the model "
                         "again") from None
    if config.model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise ModelError(f"the GGUF file {path} holds a {config.model_type!r} model, not a causal language model; "
                         "give a model that generates text")
    return header, config


def config_fixes(config) -> dict:
    """What transformers' GGUF reader leaves out of a config: a GPT-2's context length, which it reads into `n_ctx`
    while the model's position table follows `n_positions` (so any context but 1024 failed to load)."""
    if config.model_type == "gpt2" and getattr(config, "n_ctx", None):
        return {"n_positions": config.n_ctx}
    return {}


@dataclass(frozen=True)
class GgufConversion:
    """A GGUF file converted: its header, and whether its tokenizer brought a chat template."""

    header: GgufHeader
    chat_template: bool
    added_tokens: tuple[str, ...] = ()  # tokens the tokenizer transformers built has beyond the file's vocabulary
    vocab_rows: int = 0  # the file's embedding rows

    def describe(self, folder: Path) -> str:
        """What was done, as the sentence `init` prints, naming the folder the conversion ended up in."""
        template = "chat template" if self.chat_template else "no chat template (it has none)"
        grown = (f"; the embeddings grew from {self.vocab_rows} to {self.vocab_rows + len(self.added_tokens)} rows "
                 f"for {', '.join(map(repr, self.added_tokens[:3]))}, which transformers' tokenizer adds"
                 if self.added_tokens else "")
        return (f"converted the GGUF file {self.header.path} ({self.header.architecture}; tensors "
                f"{self.header.storage()}) once into a safetensors folder at {folder}: weights dequantised into "
                f"float32, tokenizer and {template} from the file{grown}")


def convert_gguf(path: Path, dst: Path) -> GgufConversion:
    """Write the model of the GGUF file `path` into the new folder `dst` as a safetensors folder (weights
    dequantised into float32; tokenizer, chat template and generation config from the file)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    header, config = check_gguf(path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        loaded = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32,
                                                      **config_fixes(config))
    except (ValueError, KeyError, OSError, RuntimeError, NotImplementedError) as exc:
        raise ModelError(f"transformers cannot load the GGUF file {path} ({first_line(exc)}); convert the model "
                         "again, or give a Hugging Face model folder") from None
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # what makes save_pretrained refuse the loaded model
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), assign=True)  # the loaded tensors, not copies
    model.tie_weights()
    model.generation_config = loaded.generation_config
    rows = model.get_input_embeddings().num_embeddings
    added = tokenizer.convert_ids_to_tokens(list(range(rows, len(tokenizer))))
    if added:  # transformers' GPT-2 tokenizer adds its `<|endoftext|>` to a vocabulary without it (Llama-3's)
        model.resize_token_embeddings(len(tokenizer), mean_resizing=True)
    dst.mkdir()
    model.save_pretrained(dst)
    tokenizer.save_pretrained(dst)
    return GgufConversion(header, bool(tokenizer.chat_template), tuple(added), rows)
