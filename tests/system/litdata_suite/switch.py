"""Switch litdata's own tests to shardwright, as a litdata user switching would.

Every public litdata name (``litdata.__all__``) that shardwright has is taken from shardwright,
whatever module the test imported it from; every internal stays litdata's. Each test function
is classified by the names it reaches (its body, the module helpers it calls, the fixtures it
takes): "public" when it reaches only public names shardwright has, "missing" when it reaches a
public name shardwright does not have, "internal" when it reaches a litdata internal (an
internal import, a ``litdata.x`` string or attribute, a ``Cache``-built fixture, a mock patched
into an object, an underscore attribute or litdata's ``cache``/``cache_manager`` of a public
object, ...).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

import litdata

import shardwright

PUBLIC = set(litdata.__all__)
OURS = {name for name in PUBLIC if hasattr(shardwright, name)}
# mocks patched into objects stand for litdata's internals (test_drop_last_and_shuffle's MagicMock
# datasets, patch.object(dataset, "_download_batch")): the test reaches what they replace
# (a patch of a builtin, as mock.patch("builtins.print"), is not one)
MOCKS = {"MagicMock", "Mock"}
# attributes of public objects that are litdata's internals (its chunk cache and raw downloader)
INTERNAL_ATTRS = {"cache", "cache_manager"}


@dataclass
class Module:
    source: str
    tests: dict[str, str] = field(default_factory=dict)  # test name -> public / missing / internal


def _imported(tree: ast.Module) -> dict[str, str]:
    """Local name -> kind (public / missing / internal) for every name imported from litdata."""
    kinds: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "litdata":
            for alias in node.names:
                local = alias.asname or alias.name
                if node.module == "litdata.constants":
                    kinds[local] = "neutral"  # feature flags (_ZSTD_AVAILABLE) in skipif marks
                elif alias.name in OURS:
                    kinds[local] = "public"
                elif alias.name in PUBLIC:
                    kinds[local] = "missing"
                else:
                    kinds[local] = "internal"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "litdata":
                    kinds[(alias.asname or alias.name).split(".")[0]] = "module"
    return kinds


def _is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def _reached(node: ast.AST, kinds: dict[str, str], defs: dict[str, ast.AST], seen: set[str]) -> set[str]:
    """Kinds of litdata names reached from one function, through module helpers."""
    found: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id in MOCKS:
            found.add("internal")
        elif isinstance(sub, ast.Attribute) and (
            sub.attr in INTERNAL_ATTRS
            # a stand-in's own self._x is the test's, not litdata's
            or (sub.attr.startswith("_") and not sub.attr.startswith("__") and not _is_self(sub.value))
            or (sub.attr == "object" and isinstance(sub.value, ast.Name) and sub.value.id in ("patch", "mock"))
        ):
            found.add("internal")
        elif isinstance(sub, ast.Name):
            if sub.id in kinds and kinds[sub.id] not in ("module", "neutral"):
                found.add(kinds[sub.id])
            elif sub.id in defs and sub.id not in seen:
                seen.add(sub.id)
                found |= _reached(defs[sub.id], kinds, defs, seen)
        elif isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name):
            if kinds.get(sub.value.id) == "module":
                found.add("public" if sub.attr in OURS else "missing" if sub.attr in PUBLIC else "internal")
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str) and sub.value.startswith("litdata."):
            found.add("internal")  # mock.patch("litdata.streaming....")
    return found


def _fixtures(tree: ast.Module) -> dict[str, ast.AST]:
    out: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and any("fixture" in ast.unparse(d) for d in node.decorator_list):
            out[node.name] = node
    return out


def classify(source: str, conftest: str) -> dict[str, str]:
    tree = ast.parse(source)
    ctree = ast.parse(conftest)
    kinds = _imported(tree)
    ckinds = _imported(ctree)
    defs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    fixtures = _fixtures(ctree)
    cdefs = {n.name: n for n in ctree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    local_fixtures = _fixtures(tree)
    out: dict[str, str] = {}
    for node in tree.body:
        if not (isinstance(node, ast.FunctionDef) and node.name.startswith("test")):
            continue
        found = _reached(node, kinds, defs, {node.name})
        for deco in node.decorator_list:
            found |= _reached(deco, kinds, defs, {node.name})
        for arg in node.args.args:
            if arg.arg in local_fixtures:
                found |= _reached(local_fixtures[arg.arg], kinds, defs, {node.name})
            elif arg.arg in fixtures:
                found |= _reached(fixtures[arg.arg], ckinds, cdefs, {arg.arg})
        out[node.name] = "internal" if "internal" in found else "missing" if "missing" in found else "public"
    return out


def rewrite(source: str, ours: bool = True) -> str:
    """The module with every public name shardwright has imported from shardwright.

    With ``ours=False`` only the constants shim is applied: litdata's baseline run.
    """
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    edits: list[tuple[int, int, str]] = []
    for node in tree.body:
        if not (isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "litdata"):
            continue
        if node.module == "litdata.constants":
            # flags litdata 0.2.76 dropped (_TORCH_AUDIO_AVAILABLE) read as False, not ImportError
            flags = "".join(f"{a.asname or a.name} = getattr(_constants, {a.name!r}, False)\n" for a in node.names)
            edits.append(
                (node.lineno - 1, node.end_lineno or node.lineno, "import litdata.constants as _constants\n" + flags)
            )
            continue
        taken = [a for a in node.names if ours and a.name in OURS]
        if not taken:
            continue
        rest = [a for a in node.names if a not in taken]

        def render(module: str, aliases: list[ast.alias]) -> str:
            names = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in aliases)
            return f"from {module} import {names}\n"

        text = render("shardwright", taken) + (render(node.module or "litdata", rest) if rest else "")
        edits.append((node.lineno - 1, node.end_lineno or node.lineno, text))
    for start, end, text in reversed(edits):
        lines[start:end] = [text]
    return "".join(lines)


def switch_tree(src: Path, dst: Path, ours: bool = True) -> dict[str, str]:
    """Copy litdata's tests under src (a litdata checkout's tests/ folder) into dst switched;
    test id -> class, for every test."""
    conftest = (src / "conftest.py").read_text()
    classes: dict[str, str] = {}
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src)
        text = path.read_text()
        out = dst / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(rewrite(text, ours))
        if path.name.startswith("test_"):
            for name, kind in classify(text, conftest).items():
                classes[f"{rel.as_posix()}::{name}"] = kind
    return classes
