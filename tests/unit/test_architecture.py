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
MAX_LINES = 600  # "files stay under ~600 lines: split by responsibility rather than grow one"


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
    """Every import counts: at module level, inside functions (lazy loads) and under
    TYPE_CHECKING. A lazy import hides a cycle from Python, not from the design (lazy imports
    of optional third-party packages are not ours and are not in the graph)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps = set()
        for target, names, _line in _imports(name, path):
            for candidate in [f"{target}.{n}" for n in names] + [target]:
                if candidate in modules and candidate != name:
                    deps.add(candidate)
                    break
        graph[name] = deps
    # a package's __init__ importing its own submodules is how packages re-export: not a cycle
    for name in graph:
        graph[name] = {d for d in graph[name] if not (d.startswith(name + "."))}
    assert _find_cycle(graph) == []


def _find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of ``graph`` (its modules in order, the first repeated at the end), or []."""
    state: dict[str, int] = {}
    cycle: list[str] = []

    def visit(node: str, stack: list[str]) -> bool:
        state[node] = 1
        for dep in sorted(graph.get(node, ())):
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
    return cycle


def test_the_cycle_check_sees_lazy_and_type_checking_imports(tmp_path):
    source = tmp_path / "mod.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from .b import B\n"
        "def f():\n    from .c import C\n    import shardwright.d\n"
    )
    found = {target for target, _names, _line in _imports("shardwright.a", source)}
    assert found == {"shardwright.b", "shardwright.c", "shardwright.d"}
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) == []


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


def test_test_file_basenames_are_unique():
    """tests/unit and tests/system are not packages: two test files of one name would shadow
    each other when pytest imports them."""
    tests = SRC.parent / "tests"
    seen: dict[str, list[str]] = {}
    for path in tests.rglob("test_*.py"):
        seen.setdefault(path.name, []).append(str(path.relative_to(tests)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}
    assert not list(tests.glob("test_*.py")), "test files live in tests/unit/ or tests/system/"
