"""The code's shape, enforced: layers (import-linter), no cross-module private imports, no
import cycles, no source file over the size limit, py.typed shipped."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "shardwright"
MAX_LINES = 650  # "no source file over ~600 lines"


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _imports(name: str, path: Path) -> list[tuple[str, list[str], int]]:
    """(imported module, imported names, line) of every shardwright import in a module."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] == "shardwright":
                out.append((target, [a.name for a in node.names], node.lineno))
        elif isinstance(node, ast.Import):
            out.extend((a.name, [], node.lineno) for a in node.names if a.name.split(".")[0] == "shardwright")
    return out


def test_layers_contract_is_kept():
    """import-linter with the project's own contract (pyproject.toml [tool.importlinter])."""
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("import-linter is not installed")
    result = subprocess.run(
        [exe, "--config", str(SRC.parent / "pyproject.toml")], capture_output=True, text=True, cwd=SRC.parent
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


def test_no_module_imports_another_modules_private_names():
    modules = _modules()
    offences = []
    for name, path in modules.items():
        for target, names, line in _imports(name, path):
            own = target == name
            for imported in names:
                if imported.startswith("_") and not imported.startswith("__") and not own:
                    offences.append(f"{path.relative_to(SRC)}:{line} imports {target}.{imported}")
            if any(part.startswith("_") and not part.startswith("__") for part in target.split(".")):
                offences.append(f"{path.relative_to(SRC)}:{line} imports private module {target}")
    assert offences == []


def test_no_import_cycles_between_modules():
    """Module-level imports only (imports inside functions are deliberate lazy loads)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        top_level = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        deps = set()
        for target, names, line in _imports(name, path):
            if not any(n.lineno == line for n in top_level):
                continue
            for candidate in [f"{target}.{n}" for n in names] + [target]:
                if candidate in modules and candidate != name:
                    deps.add(candidate)
                    break
        graph[name] = deps
    # a package's __init__ importing its own submodules is how packages re-export: not a cycle
    for name in graph:
        graph[name] = {d for d in graph[name] if not (d.startswith(name + "."))}
    state: dict[str, int] = {}
    cycle: list[str] = []

    def visit(node: str, stack: list[str]) -> bool:
        state[node] = 1
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycle.extend(stack[stack.index(dep) :] + [node, dep] if dep in stack else [node, dep])
                return True
            if state.get(dep) is None and visit(dep, stack + [node]):
                return True
        state[node] = 2
        return False

    for module in sorted(graph):
        if state.get(module) is None and visit(module, []):
            break
    assert cycle == [], " -> ".join(cycle)


def test_no_source_file_over_the_size_limit():
    too_long = {
        str(p.relative_to(SRC)): n for p in PACKAGE.rglob("*.py") if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert too_long == {}


def test_py_typed_is_shipped():
    assert (PACKAGE / "py.typed").exists()
    assert 'shardwright = ["py.typed"]' in (SRC.parent / "pyproject.toml").read_text()


def test_public_imports_are_unchanged():
    import shardwright

    for name in (
        "optimize",
        "OptimizeResult",
        "StreamingDataset",
        "ShardwrightError",
        "FnError",
        "CorruptStateError",
        "DatasetExistsError",
        "IncompleteDatasetError",
        "StorageError",
    ):
        assert getattr(shardwright, name) is not None
