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


# trainers/' rooms, lowest first: imports run downward
ROOMS = ("models", "reward", "policy", "jobs", "loop", "export", "entry")


def trainer_imports(path: Path) -> set[str]:
    """The trainers modules a file imports (relative imports resolved; `from trainers.room import m` names m)."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
            if not base.startswith("trainers"):
                continue
            if (ROOT / base.replace(".", "/")).is_dir():  # a package: its names are modules
                names |= {f"{base}.{alias.name}" for alias in node.names}
            else:
                names.add(base)
        elif isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names if alias.name.startswith("trainers.")}
    return names


def room(module: str) -> str:
    """`trainers.policy.ppo` -> `policy`; the root's modules (`trainers.reporting`) are the room "" below all."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 else ""


def trainer_modules() -> dict[str, set[str]]:
    return {".".join(p.relative_to(ROOT).with_suffix("").parts): trainer_imports(p)
            for p in sorted((ROOT / "trainers").rglob("*.py"))}


def test_imports_between_the_rooms_of_trainers_run_one_way():
    rank = {"": -1, **{name: i for i, name in enumerate(ROOMS)}}
    assert set(ROOMS) == {p.name for p in (ROOT / "trainers").iterdir() if (p / "__init__.py").is_file()}
    upward = sorted(f"{module} imports {target}" for module, targets in trainer_modules().items()
                    for target in targets if rank[room(target)] > rank[room(module)])
    assert not upward, "; ".join(upward)


def test_the_trainers_modules_import_no_circle_and_their_packages_import_nothing():
    graph = trainer_modules()
    done, active = set(), []

    def visit(module: str) -> None:
        active.append(module)
        for target in sorted(graph.get(module, ())):
            assert target not in active, " -> ".join(active[active.index(target):] + [target])
            if target in graph and target not in done:
                visit(target)
        active.pop()
        done.add(module)

    for module in graph:
        if module not in done:
            visit(module)
    importing = [p for p in (ROOT / "trainers").rglob("__init__.py")  # the serving process loads them, so no torch
                 if any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.walk(ast.parse(p.read_text())))]
    assert importing == []


def test_the_room_check_resolves_relative_and_package_imports(tmp_path, monkeypatch):
    fake = tmp_path / "trainers" / "loop" / "m.py"
    for folder in ("loop", "policy", "models", "jobs"):
        (tmp_path / "trainers" / folder).mkdir(parents=True)
    fake.write_text("from ..policy.config import X\nfrom . import rounds\nfrom trainers.models import loading\n"
                    "import trainers.jobs.layer\nimport os\nfrom ..reporting import Reporter\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert trainer_imports(fake) == {"trainers.policy.config", "trainers.loop.rounds", "trainers.models.loading",
                                     "trainers.jobs.layer", "trainers.reporting"}
    assert [room(m) for m in ("trainers.policy.config", "trainers.reporting")] == ["policy", ""]


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
    from bench.studio_driver import free_port

    result = subprocess.run([sys.executable, "-c", SERVE_AND_USE, str(demo_store.path), str(free_port())], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    lines = result.stdout.splitlines()
    assert "no torch" in lines and "torch loaded" not in lines, result.stderr[-2000:]


POLICY_PROCESS = """
import sys
from storage import Store
from trainers.policy.grpo import GRPOTrainer
from trainers.policy.ppo import PPOTrainer
from trainers.reward.scorer import RewardScorer
print(sorted(name for name in ("datasets", "pandas", "pyarrow", "trl") if name in sys.modules))
import pandas
print(pandas.Timestamp(0).year)
"""


def test_a_policy_process_loads_neither_datasets_nor_pandas():
    """PPO/GRPO read no datasets, and sqlite-utils would load pandas only to type Timestamps: ~100 MB of peak RSS a
    training process would carry for nothing (bench/grpo_throughput.py). pandas still imports where it is wanted."""
    result = subprocess.run([sys.executable, "-c", POLICY_PROCESS], cwd=ROOT, capture_output=True, text=True,
                            timeout=300)
    assert result.stdout.splitlines() == ["[]", "1970"], result.stderr[-2000:]
