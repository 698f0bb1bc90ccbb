"""The layers keep their boundaries (docs/architecture.md, "Rooms"): a test fails when a folder imports what it must
never import, and the serving process never loads torch."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SQL = {"sqlite3", "sqlite_utils"}
NEVER = {  # folder -> top-level modules it must never import, anywhere in its files (function-level imports too)
    "storage": {"torch", "gradio", "transformers", "labeling", "trainers", "app"},
    "labeling": {"torch", "gradio", "trainers", "app"},
    "trainers": {"gradio", "app"},
    "app": {"torch", "transformers"} | SQL,
}


def imported_modules(path: Path) -> set[str]:
    """Top-level names of every module a file imports (relative imports are the file's own package)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("folder", sorted(NEVER))
def test_a_folder_never_imports_what_its_layer_must_not(folder):
    broken = {f"{path.relative_to(ROOT)} imports {', '.join(sorted(imported_modules(path) & NEVER[folder]))}"
              for path in sorted((ROOT / folder).rglob("*.py")) if imported_modules(path) & NEVER[folder]}
    assert not broken, "; ".join(sorted(broken))


def test_the_check_sees_imports_inside_functions(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("import os\n\ndef f():\n    import torch.nn\n    from gradio import Blocks\n"
                      "    from . import x\n")
    assert imported_modules(source) == {"os", "torch", "gradio"}


SERVE_AND_USE = """
import sys
from gradio_client import Client
from app.server import serve
from storage import Store
blocks = serve(Store(sys.argv[1]), host="127.0.0.1", port=int(sys.argv[2]), block=False)
client = Client(blocks.local_url, verbose=False)
client.predict("alice", api_name="/next_pair")
for args, name in (((1,), "/job_status"), ((1, ""), "/metrics")):  # no job yet: one-line errors, handlers still run
    try:
        client.predict(*args, api_name=name)
    except Exception as exc:
        assert "job 1 does not exist" in str(exc), exc
print("torch loaded" if "torch" in sys.modules else "no torch")
blocks.close()
"""


def test_the_serving_process_never_loads_torch(demo_store):
    from tests.helpers import free_port

    result = subprocess.run([sys.executable, "-c", SERVE_AND_USE, str(demo_store.path), str(free_port())], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    lines = result.stdout.splitlines()
    assert "no torch" in lines and "torch loaded" not in lines, result.stderr[-2000:]
