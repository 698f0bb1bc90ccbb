"""An Ollama `Modelfile` beside an exported GGUF file: FROM the file, the chat template as an Ollama TEMPLATE where
it is one of the formats Ollama's templates spell (ChatML, Llama 3, Gemma), the stop tokens, and the studio's sampling
settings as PARAMETERs.

    write_modelfile(folder, gguf_path, settings)   # folder/Modelfile: `ollama create NAME -f folder/Modelfile`
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer

MODELFILE = "Modelfile"
# A chat template's marker -> (the Ollama template that writes the same turns, the token that ends a turn)
TEMPLATES = {
    "<|im_start|>": ("""{{- if .System }}<|im_start|>system
{{ .System }}<|im_end|>
{{ end }}{{- range .Messages }}<|im_start|>{{ .Role }}
{{ .Content }}<|im_end|>
{{ end }}<|im_start|>assistant
""", "<|im_end|>"),
    "<|start_header_id|>": ("""{{- if .System }}<|start_header_id|>system<|end_header_id|>

{{ .System }}<|eot_id|>{{ end }}{{- range .Messages }}<|start_header_id|>{{ .Role }}<|end_header_id|>

{{ .Content }}<|eot_id|>{{ end }}<|start_header_id|>assistant<|end_header_id|>

""", "<|eot_id|>"),
    "<start_of_turn>": ("""{{- range .Messages }}<start_of_turn>"""
                        """{{ if eq .Role "assistant" }}model{{ else }}{{ .Role }}{{ end }}
{{ .Content }}<end_of_turn>
{{ end }}<start_of_turn>model
""", "<end_of_turn>"),
}


def _end_tokens(folder: Path) -> list[str]:
    """The tokens of the generation config's end-of-sequence ids."""
    ids = json.loads((folder / "generation_config.json").read_text()).get("eos_token_id")
    ids = ids if isinstance(ids, list) else [] if ids is None else [ids]
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    return [token for token in map(tokenizer.id_to_token, ids) if token]


def modelfile_text(folder: Path, gguf_path: Path, settings: dict) -> tuple[str, str]:
    """The Modelfile, and what it does with the chat template (a few words for the export's line)."""
    chat = json.loads((folder / "tokenizer_config.json").read_text()).get("chat_template") or ""
    if not chat and (folder / "chat_template.jinja").is_file():
        chat = (folder / "chat_template.jinja").read_text()
    mapped = next(((template, stop) for marker, (template, stop) in TEMPLATES.items() if marker in chat), None)
    stops = list(dict.fromkeys(([mapped[1]] if mapped else []) + _end_tokens(folder)))
    lines = [f"FROM ./{gguf_path.name}", ""]
    if mapped:
        lines += [f'TEMPLATE """{mapped[0]}"""', ""]
        template = "with its chat template as TEMPLATE"
    elif chat:
        lines += ["# The chat template is not one spelled here: Ollama reads the one in the GGUF file.", ""]
        template = "leaving the chat template to Ollama (it reads the GGUF's)"
    else:
        lines += ["# The model has no chat template: Ollama passes prompts as they are.", ""]
        template = "without a chat template (the model has none)"
    lines += [f'PARAMETER stop "{stop}"' for stop in stops]
    lines += [f"PARAMETER temperature {settings['temperature']}", f"PARAMETER top_p {settings['top_p']}",
              f"PARAMETER top_k {settings['top_k']}", f"PARAMETER num_predict {settings['response_length']}", ""]
    return "\n".join(lines), template


def write_modelfile(folder: Path, gguf_path: Path, settings: dict) -> str:
    """Write `Modelfile` beside `gguf_path`; returns what it did with the chat template."""
    text, template = modelfile_text(folder, gguf_path, settings)
    (gguf_path.parent / MODELFILE).write_text(text)
    return template
