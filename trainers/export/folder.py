"""A version taken out of the studio: a self-contained Hugging Face folder (the merged weights in safetensors, the
tokenizer with its chat template, a generation config carrying the studio's sampling settings, and a model card)
that `AutoModelForCausalLM.from_pretrained` and `AutoTokenizer.from_pretrained` load with transformers alone.

Versions are saved merged already, so the weights are copied as they are; the studio's own files (a LoRA `adapter/`,
PPO's value head, the run's settings and state) stay behind. Every tensor is checked finite before anything is
written, and the folder is written beside `out` and renamed into place: a refusal or a failure leaves `out` as it was.

    done = export_version(store, "v3", Path("exported/v3"))
    print(done.line())     # exported v3 (PPO, 10 iterations) to exported/v3: 3.4 MB, model card README.md
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from labeling.versions.winrate import version_names, version_number
from storage import Store
from storage.errors import InvalidInput, NotFound
from storage.policies import list_policies
from storage.types import Policy

from ..models.checks import inspect_model_dir
from ..models.copies import copy_model_files
from ..models.finite import non_finite_tensors
from .card import write_model_card
from .gguf_file import GgufFile, check_quant, write_gguf
from .modelfile import MODELFILE, write_modelfile
from .settings import version_settings

GENERATION_CONFIG = "generation_config.json"
GGUF_FOLDER = "gguf"  # the GGUF file and its Modelfile


@dataclass(frozen=True)
class ExportedFolder:
    """Where a version went and how large it is."""

    name: str
    note: str
    path: Path
    bytes: int

    gguf: GgufFile | None = None
    template: str = ""

    def line(self) -> str:
        lines = [f"exported {self.name} ({self.note}) to {self.path}: {self.bytes / 1e6:,.1f} MB, model card "
                 f"{self.path / 'README.md'}"]
        if self.gguf is not None:
            modelfile = self.gguf.path.parent / MODELFILE
            lines += [self.gguf.line(), f"wrote {modelfile} {self.template}: ollama create {self.name} -f {modelfile}"]
        return "\n".join(lines)


def find_version(store: Store, name: str) -> tuple[Policy, str]:
    """The policy a user's `vK` names, with its name; a NotFound naming the versions there are."""
    policies = list_policies(store)
    names = version_names(policies)
    k = version_number(name)
    for policy in policies:
        if names[policy.id] == f"v{k}":
            return policy, names[policy.id]
    known = f"v0 to v{len(policies) - 1}" if policies else "none yet"
    raise NotFound(f"no version {name!r} in {store.path} (versions: {known}); name one as vK, e.g. v{len(policies) - 1}"
                   if policies else f"no version {name!r} in {store.path}: it holds no policy yet; run a loop first")


def check_out_dir(out: Path, force: bool) -> None:
    """Refuse a file, a non-empty folder without `force`, and a folder whose parent does not exist."""
    if out.exists() and not out.is_dir():
        raise InvalidInput(f"{out} is a file; give a folder to export into")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise InvalidInput(f"{out} is not empty; choose a new folder, or pass --force to replace what it holds")
    if not out.parent.is_dir():
        raise InvalidInput(f"folder {out.parent} does not exist; create it or choose another --out")


def check_finite_weights(folder: Path, name: str) -> None:
    """Refuse a version any of whose tensors holds NaN or an infinity, naming the first such tensor."""
    count, tensors = non_finite_tensors(folder)
    if count:
        raise InvalidInput(f"{name}'s weights are not finite ({count:,} values in {len(tensors)} tensors, first "
                           f"{tensors[0]}); it cannot be exported: export an earlier version")


def generation_config(folder: Path, settings: dict) -> dict:
    """The version's own generation config (its special tokens), with the studio's sampling settings on top."""
    path = folder / GENERATION_CONFIG
    config = json.loads(path.read_text()) if path.is_file() else {}
    config.pop("_from_model_config", None)
    config.update({"do_sample": True, "temperature": settings["temperature"], "top_p": settings["top_p"],
                   "top_k": settings["top_k"], "max_new_tokens": settings["response_length"]})
    return config


def export_version(store: Store, name: str, out: Path, force: bool = False, quant: str | None = None
                   ) -> ExportedFolder:
    """Write version `name` (`vK`) of the store as a self-contained Hugging Face folder `out` with its model card;
    with `quant` (`f16`, `q8_0`), also as a GGUF file with an Ollama Modelfile in the same folder."""
    policy, name = find_version(store, name)
    check_out_dir(out, force)
    check_quant(quant)
    source = inspect_model_dir(policy.path).path
    check_finite_weights(source, name)
    settings = version_settings(store, policy)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        folder = staging / "model"
        copy_model_files(source, folder, skip=(GENERATION_CONFIG,))
        (folder / GENERATION_CONFIG).write_text(json.dumps(generation_config(source, settings), indent=2) + "\n")
        write_model_card(store, policy, name, settings, folder)
        size = sum(f.stat().st_size for f in folder.iterdir() if f.is_file())
        written, template = None, ""
        if quant is not None:
            (folder / GGUF_FOLDER).mkdir()  # apart from the tokenizer files, which transformers would read instead
            written = write_gguf(folder, folder / GGUF_FOLDER / f"{name}-{quant}.gguf", quant,
                                 f"{name} ({policy.note or ''})")
            template = write_modelfile(folder, written.path, settings)
        if out.exists():
            shutil.rmtree(out)
        folder.rename(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if written is not None:
        written = replace(written, path=out / GGUF_FOLDER / written.path.name)
    return ExportedFolder(name, policy.note or "", out, size, written, template)

