"""`export --format prompts`: the prompts with their references, as a file `import-prompts` and `datasets` read.

Each row is `{prompt, <reference fields>}`: the prompt as text (as turns when the store holds any conversation, so
one file never mixes the two) and its reference's fields by name (`answer`, ...), the columns TRL's GRPOTrainer
passes its reward functions. The training prompts by default, the held-out ones with `heldout=True`; excluded
prompts are written too (an exclusion is the studio's choice, not the data's).

    export_prompts(store, "prompts.jsonl")           # then: python app.py import-prompts --file prompts.jsonl
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from labeling.transfer.export import _write_atomically, check_export_path
from storage import Store
from storage.errors import InvalidInput, first_line
from storage.prompts import list_prompts
from storage.types import Prompt

PROMPTS_FORMAT = "prompts"


@dataclass(frozen=True)
class PromptExport:
    path: Path
    rows: int
    with_reference: int

    def summary(self) -> str:
        return f"wrote {self.rows} prompts to {self.path} ({self.with_reference} with a reference)"


def prompt_row(prompt: Prompt, conversational: bool) -> dict:
    """A prompt's export row: its text (or turns) and its reference fields."""
    content = (prompt.messages or [{"role": "user", "content": prompt.text}]) if conversational else prompt.text
    return {"prompt": content, **(prompt.reference or {})}


def export_prompts(store: Store, path: str | Path, heldout: bool = False) -> PromptExport:
    """Write the training (or held-out) prompts with their references; the file appears whole or not at all."""
    path = check_export_path(path)
    prompts = list_prompts(store, heldout=heldout)
    if not prompts:
        kind = "held-out" if heldout else "training"
        raise InvalidInput(f"nothing to export: the store has no {kind} prompts; import some with import-prompts")
    conversational = any(prompt.messages is not None for prompt in prompts)
    rows = [prompt_row(prompt, conversational) for prompt in prompts]
    schema = _parquet_schema(rows) if path.suffix.lower() == ".parquet" else None
    if schema is not None:
        rows = [{name: row.get(name) for name in schema.names} for row in rows]
    _write_atomically(path, rows, schema)
    return PromptExport(path, len(rows), sum(prompt.reference is not None for prompt in prompts))


def _parquet_schema(rows: list[dict]) -> pa.Schema:
    """The one schema of every row's columns (a column a row lacks is null there), or InvalidInput when a field's
    type differs from prompt to prompt (JSON lines hold each row as imported, so they take any mix)."""
    names = list(dict.fromkeys(name for row in rows for name in row))
    try:
        return pa.Table.from_pylist([{name: row.get(name) for name in names} for row in rows]).schema
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise InvalidInput(f"the references' fields differ in type from prompt to prompt, which Parquet cannot hold "
                           f"({first_line(exc)[:120]}); export to a .jsonl file instead") from None
