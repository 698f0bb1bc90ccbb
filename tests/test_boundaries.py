"""The layers keep their boundaries (docs/architecture.md, "Rooms"): a test fails when a folder imports what it must
never import, when an import runs against the rooms' order or closes a circle (module-level and function-level
imports alike, across app, labeling, trainers, storage, bench and assets), when a module grows over the house's 450
lines, and when the serving process loads torch."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SQL = {"sqlite3", "sqlite_utils"}
NEVER = {  # folder -> top-level modules it must never import, anywhere in its files (function-level imports too)
    "storage": {"torch", "gradio", "transformers", "labeling", "trainers", "app", "tests"},
    "labeling": {"torch", "gradio", "trainers", "app", "tests"},
    "trainers": {"gradio", "app", "tests"},
    "app": {"torch", "transformers", "tests"} | SQL,
    "bench": {"tests"},  # tests may import bench's helpers (bench/studio_driver.py, tiny_models.py), not the reverse
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


HOUSE = ("assets", "storage", "labeling", "trainers", "app", "bench")  # the rooms, lowest first: imports run downward
ROOMS = ("models", "reward", "policy", "jobs", "loop", "export", "entry")  # trainers/' rooms, lowest first
APP_ROOMS = ("label", "train", "data", "curves", "versions", "door", "commands")  # app/'s rooms, lowest first
LABELING_ROOMS = ("files", "queue", "stats", "versions", "transfer", "demonstrations", "gold", "judges")  # labeling/'s
# a package -> its rooms, lowest first (a module beside them is below all)
ORDER = {"": HOUSE, "trainers": ROOMS, "app": APP_ROOMS, "labeling": LABELING_ROOMS}
MAX_LINES = 450


def module_files(root: Path, packages=HOUSE) -> dict[str, Path]:
    """Every module of `packages` under `root` by dotted name (a package's `__init__.py` named as the package)."""
    files = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return files


def imports_of(path: Path, root: Path, modules) -> set[str]:
    """The modules among `modules` that the file at `path` imports, module-level and function-level alike: relative
    imports resolved, `from package import m` naming the module m when m is one (else the package), `import a.b`
    naming a.b (or its nearest enclosing module)."""
    parts = path.relative_to(root).with_suffix("").parts
    package = parts[:-1]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package[:len(package) - node.level + 1], *([node.module] if node.module else [])])
            names |= {f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names}
        elif isinstance(node, ast.Import):
            for alias in node.names:
                name = alias.name
                while name and name not in modules:
                    name = name.rpartition(".")[0]
                names.add(name)
    return {name for name in names if name in modules}


def import_graph(root: Path, packages=HOUSE) -> dict[str, set[str]]:
    """{module: the modules of the house it imports} (a module importing itself is left out)."""
    files = module_files(root, packages)
    return {module: imports_of(path, root, files) - {module} for module, path in files.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of `graph` ({module: imported modules}): each set of modules that reach one another (a
    strongly connected component of two or more; Tarjan's algorithm), sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(graph.get(module, ())):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while not component or component[-1] != module:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(found)


def room(module: str, package: str = "trainers", rooms=ROOMS) -> str:
    """The room of `package` that holds `module`: `trainers.policy.ppo` -> `policy`; a module beside the rooms
    (`trainers.reporting`), or the package itself, is the room "" below all."""
    parts = module.split(".")[len(package.split(".")) if package else 0:]
    return parts[0] if parts and parts[0] in rooms else ""


def upward_imports(graph: dict[str, set[str]], order=ORDER) -> list[str]:
    """Each import against the rooms' order: where the two modules part, inside a package whose rooms have an order,
    the importer's room must not be below the imported one's."""
    upward = []
    for module, targets in graph.items():
        for target in targets:
            common = []
            for a, b in zip(module.split("."), target.split("."), strict=False):
                if a != b:
                    break
                common.append(a)
            package = ".".join(common)
            if package in order:
                rank = {"": -1, **{name: i for i, name in enumerate(order[package])}}
                if rank[room(target, package, order[package])] > rank[room(module, package, order[package])]:
                    upward.append(f"{module} imports {target}")
    return sorted(upward)


def test_the_house_imports_no_circle():
    """No import circle anywhere in the house, module-level and function-level imports alike (a circle is cut where
    it comes from, never hidden in a function-level import): one line per circle, its files."""
    files = module_files(ROOT)
    found = [", ".join(str(files[m].relative_to(ROOT)) for m in circle) for circle in circles(import_graph(ROOT))]
    assert not found, "import circles:\n" + "\n".join(found)


def test_imports_run_down_the_rooms():
    assert not upward_imports(import_graph(ROOT)), "; ".join(upward_imports(import_graph(ROOT)))


def test_every_folder_with_rooms_declares_their_order():
    """A folder of the house that holds packages lists them in ORDER, lowest first, so imports between them are held
    to one direction."""
    assert set(ROOMS) == {p.name for p in (ROOT / "trainers").iterdir() if (p / "__init__.py").is_file()}
    packages = {".".join(p.relative_to(ROOT).parts) for folder in HOUSE for p in (ROOT / folder).rglob("*")
                if (p / "__init__.py").is_file()}
    undeclared = sorted({package.rpartition(".")[0] for package in packages} - set(ORDER) - {""})
    assert not undeclared, f"declare the order of the rooms of {', '.join(undeclared)} in ORDER"
    assert all(set(ORDER[package]) == {p.rpartition(".")[2] for p in packages if p.rpartition(".")[0] == package}
               for package in ORDER if package)


def test_the_package_files_of_trainers_import_nothing():
    importing = [p for p in (ROOT / "trainers").rglob("__init__.py")  # the serving process loads them, so no torch
                 if any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.walk(ast.parse(p.read_text())))]
    assert importing == []


def test_no_module_is_over_the_house_limit():
    long = sorted(f"{path.relative_to(ROOT)} ({lines} lines)" for path in module_files(ROOT).values()
                  if (lines := len(path.read_text().splitlines())) > MAX_LINES)
    assert not long, f"over {MAX_LINES} lines: " + ", ".join(long)


def test_bench_scripts_import_their_siblings_through_the_bench_package():
    """`python bench/x.py` puts bench/ on sys.path, so `from real_model import ...` would run; it must read
    `from bench.real_model import ...`, the one way every bench module is imported."""
    siblings = {path.stem for path in (ROOT / "bench").glob("*.py")}
    bare = sorted(f"{path.relative_to(ROOT)} imports {', '.join(sorted(imported_modules(path) & siblings))}"
                  for path in (ROOT / "bench").glob("*.py") if imported_modules(path) & siblings)
    assert not bare, "; ".join(bare)


def plant(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_the_circle_check_sees_a_planted_circle_through_a_function_level_import(tmp_path):
    plant(tmp_path, {"pkg/__init__.py": "", "pkg/a.py": "import os\n\ndef f():\n    from . import b\n",
                     "pkg/b.py": "from pkg.a import f\n", "pkg/c.py": "from .a import f\n"})
    graph = import_graph(tmp_path, ["pkg"])
    assert graph == {"pkg": set(), "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.a"}, "pkg.c": {"pkg.a"}}
    assert circles(graph) == [["pkg.a", "pkg.b"]]
    assert circles({"x": {"y"}, "y": {"z"}, "z": {"x"}, "w": {"x"}, "v": set()}) == [["x", "y", "z"]]
    assert circles({"x": {"y"}, "y": set()}) == []


def test_the_room_check_sees_a_planted_upward_import(tmp_path):
    plant(tmp_path, {"storage/__init__.py": "", "storage/labels.py": "def f():\n    from app.tab import build\n",
                     "app/__init__.py": "", "app/tab.py": "from storage import labels\n",
                     "trainers/__init__.py": "", "trainers/reporting.py": "from .loop.rounds import Loop\n",
                     "trainers/loop/__init__.py": "", "trainers/loop/rounds.py": "from ..policy import ppo\n",
                     "trainers/policy/__init__.py": "", "trainers/policy/ppo.py": "from trainers.loop import rounds\n"})
    graph = import_graph(tmp_path, ["storage", "app", "trainers"])
    assert upward_imports(graph) == ["storage.labels imports app.tab",
                                     "trainers.policy.ppo imports trainers.loop.rounds",
                                     "trainers.reporting imports trainers.loop.rounds"]


def test_the_room_check_resolves_relative_and_package_imports(tmp_path):
    plant(tmp_path, {f"trainers/{name}": "" for name in ("loop/__init__.py", "loop/rounds.py", "policy/__init__.py",
                                                          "policy/config.py", "models/__init__.py", "models/loading.py",
                                                          "jobs/__init__.py", "jobs/layer.py", "reporting.py")})
    fake = tmp_path / "trainers" / "loop" / "m.py"
    fake.write_text("from ..policy.config import X\nfrom . import rounds\nfrom trainers.models import loading\n"
                    "import trainers.jobs.layer\nimport os\nfrom ..reporting import Reporter\n")
    assert imports_of(fake, tmp_path, module_files(tmp_path, ["trainers"])) == {
        "trainers.policy.config", "trainers.loop.rounds", "trainers.models.loading", "trainers.jobs.layer",
        "trainers.reporting"}
    assert [room(m) for m in ("trainers.policy.config", "trainers.reporting")] == ["policy", ""]


SERVE_AND_USE = """
import sys
from gradio_client import Client
from app.door.server import serve
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
