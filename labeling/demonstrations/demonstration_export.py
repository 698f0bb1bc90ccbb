"""Demonstrations exported in TRL's SFT format, a file `datasets.load_dataset("json", ...)` (or "parquet") reads:
`{prompt, completion}` rows, one per current demonstration. A store with any conversation prompt among them exports
every row in TRL's conversational prompt-completion form (`prompt`: the turns, a text prompt one user turn;
`completion`: one assistant turn), so one file never mixes strings and message lists. Every demonstration is
exported, those too long for the policy too (SFT leaves them out; a file trains other models).

    result = export_demonstrations(store, "sft.jsonl")
    datasets.load_dataset("json", data_files="sft.jsonl", split="train")
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from labeling.transfer.export import MESSAGES, _write_atomically, check_export_path
from storage import Store
from storage.demonstrations import list_demonstrations
from storage.errors import InvalidInput


@dataclass(frozen=True)
class DemonstrationExport:
    path: Path
    rows: int

    def summary(self) -> str:
        return f"wrote {self.rows} demonstrations to {self.path} (TRL's prompt-completion format)"


def export_demonstrations(store: Store, path: str | Path) -> DemonstrationExport:
    """Write the store's current demonstrations; the file appears whole or not at all."""
    path = check_export_path(path)
    demos = list_demonstrations(store)
    if not demos:
        raise InvalidInput("nothing to export: the store has no demonstrations yet; write some in the Label tab (W) or "
                           "import them (python app.py import-demonstrations)")
    conversational = any(d.prompt_messages is not None for d in demos)
    if conversational:
        rows = [{"prompt": d.prompt_messages or [{"role": "user", "content": d.prompt}],
                 "completion": [{"role": "assistant", "content": d.text}]} for d in demos]
        schema = pa.schema([("prompt", MESSAGES), ("completion", MESSAGES)])
    else:
        rows = [{"prompt": d.prompt, "completion": d.text} for d in demos]
        schema = pa.schema([("prompt", pa.string()), ("completion", pa.string())])
    _write_atomically(path, rows, schema)
    return DemonstrationExport(path, len(rows))
