"""`python app.py export-model vK --out DIR`: write a version as a self-contained Hugging Face folder (merged weights in
safetensors, the tokenizer and chat template, a generation config with the studio's sampling settings) with a model
card (`DIR/README.md`) telling its lineage, the judgements behind it and its win rate (`trainers.export`).

    python app.py export-model v3 --out exported/v3 --db studio.db
    python app.py export-model v3 --out exported/v3 --force       # replace what exported/v3 holds
    python app.py export-model v3 --out exported/v3 --gguf --quant q8_0   # and v3-q8_0.gguf with a Modelfile
"""

from __future__ import annotations

import argparse
from pathlib import Path

from storage import Store
from storage.errors import InvalidInput

QUANT_NAMES = ("f16", "q8_0")  # gguf_file.QUANTS' keys, named here so `--help` loads no torch (a test holds them equal)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("version", help="the version to export, as the Leaderboard names it: vK (e.g. v3)")
    parser.add_argument("--out", required=True, metavar="DIR", help="folder to write (new, or empty unless --force)")
    parser.add_argument("--force", action="store_true", help="replace what --out holds")
    parser.add_argument("--gguf", action="store_true",
                        help="also write a GGUF file (llama.cpp, Ollama) and an Ollama Modelfile into --out")
    parser.add_argument("--quant", choices=QUANT_NAMES, default=None,
                        help="the GGUF's weights: f16 (default with --gguf) or q8_0; implies --gguf")
    parser.add_argument("--db", default="studio.db", help="store file the version is in")


def run(args: argparse.Namespace) -> int:
    if not Path(args.db).is_file():
        raise InvalidInput(f"store {args.db} does not exist; pass the --db of a studio")
    from trainers.export.folder import export_version  # torch: only when a version is exported, not for `--help`

    quant = args.quant or ("f16" if args.gguf else None)
    print(export_version(Store(args.db), args.version, Path(args.out), args.force, quant).line())
    return 0
