"""How big a model folder's model is, read from its safetensors headers (JSON, no torch), so the UI process can choose
settings that fit it.

    model_parameters("/models/smollm2-135m")   # 134515008, or None when the folder holds no safetensors weights
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

HEADER_MAX = 100_000_000  # bytes: a safetensors header larger than this is not one


def model_parameters(model_dir: str | Path) -> int | None:
    """The number of weights in the folder's safetensors files (one file, or the shards its index names); None when
    there are none or a header cannot be read (loading the model then says what is wrong)."""
    folder = Path(model_dir)
    index = folder / "model.safetensors.index.json"
    try:
        if index.is_file():
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
            files = [folder / name for name in shards]
        else:
            files = [folder / "model.safetensors"]
        return sum(_tensor_elements(path) for path in files) if all(p.is_file() for p in files) else None
    except (OSError, ValueError, KeyError, TypeError, struct.error):
        return None


def _tensor_elements(path: Path) -> int:
    """The elements of every tensor a safetensors file's header lists."""
    with path.open("rb") as file:
        (size,) = struct.unpack("<Q", file.read(8))
        if size > HEADER_MAX:
            raise ValueError(f"{path}: not a safetensors header")
        header = json.loads(file.read(size))
    return sum(math.prod(entry["shape"]) for name, entry in header.items() if name != "__metadata__")
