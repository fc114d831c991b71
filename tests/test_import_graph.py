"""The layers import only downward: kernels <- bench <- report <- cli, and no import circle anywhere.

An AST walk over kernels/ and mlsyscalc/ (every import statement, also the ones inside
functions) builds the module graph; the rules of ARCHITECTURE.md are checked on it. kernels/
ships as `mlsyscalc.kernels` and model_specs/ as `mlsyscalc.model_specs` (pyproject.toml).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TREES = {"mlsyscalc": ROOT / "mlsyscalc", "mlsyscalc.kernels": ROOT / "kernels",
         "mlsyscalc.model_specs": ROOT / "model_specs"}

# (importer prefix, forbidden prefix): no module under the first may import one under the second.
FORBIDDEN = [
    ("mlsyscalc.kernels", "mlsyscalc.bench"),
    ("mlsyscalc.kernels", "mlsyscalc.cli"),
    ("mlsyscalc.kernels", "mlsyscalc.report"),
    ("mlsyscalc.bench", "mlsyscalc.cli"),
    ("mlsyscalc.bench", "mlsyscalc.report"),
    ("mlsyscalc.report", "mlsyscalc.cli"),
    ("mlsyscalc.calc", "mlsyscalc.bench"),
    ("mlsyscalc.calc", "mlsyscalc.cli"),
    ("mlsyscalc.calc", "mlsyscalc.report"),
    ("mlsyscalc.calc", "mlsyscalc.kernels"),
    ("mlsyscalc.specs", "mlsyscalc.calc"),
    # the file readers sit below everything that reads a file: errors, validate and units only
    *(("mlsyscalc.readers", f"mlsyscalc.{layer}") for layer in ("specs", "calc", "bench", "report", "cli", "kernels")),
]

def _modules() -> dict[str, Path]:
    found = {}
    for package, folder in TREES.items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((package, *parts))] = path
    return found


def _resolve(importer: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(name, is_package, node)
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                           for alias in node.names]
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(frozenset(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def test_the_walk_sees_the_tree():
    graph = _graph()
    assert "mlsyscalc.kernels.matmul" in graph and "mlsyscalc.cli.main" in graph
    # a known downward edge, so an empty graph cannot pass the rules below
    assert "mlsyscalc.kernels.matmul_launch" in graph["mlsyscalc.kernels.matmul"]


@pytest.mark.parametrize("importer,forbidden", FORBIDDEN)
def test_layers_import_only_downward(importer, forbidden):
    bad = sorted(f"{a} -> {b}" for a, targets in _graph().items() if _under(a, importer)
                 for b in targets if _under(b, forbidden))
    assert not bad, f"{importer} must not import {forbidden}: {bad}"


def test_no_import_circle():
    circles = [sorted(c) for c in _circles(_graph())]
    assert not circles, f"import circles: {circles}"


CALC = "mlsyscalc.calc"


def _calc_packages(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph of calc/'s sub-packages: an edge where a module of one imports a module of another."""
    def package(module: str) -> str | None:
        parts = module.split(".")
        return parts[2] if parts[:2] == CALC.split(".") and len(parts) > 3 else None
    packages: dict[str, set[str]] = {}
    for importer, targets in graph.items():
        here = package(importer)
        if here is not None:
            packages.setdefault(here, set()).update(p for p in map(package, targets) if p not in (None, here))
    return packages


def test_calc_sub_packages_form_no_circle():
    packages = _calc_packages(_graph())
    assert {"counts", "parallel", "roofline", "train", "serve"} <= packages.keys()
    assert "counts" in packages["train"]  # a known edge, so an empty graph cannot pass
    assert not _circles(packages), f"calc/ sub-package circles: {_circles(packages)}"


def test_calc_has_no_flat_modules():
    """calc/ holds sub-packages by subject; a module at its top would be a subject without a home."""
    flat = sorted(p.name for p in (ROOT / "mlsyscalc" / "calc").glob("*.py")
                  if p.name not in ("__init__.py", "_face.py"))
    assert not flat, f"modules at the top of calc/: {flat}"


def test_the_circle_finder_finds_circles():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [frozenset("abc")]
    assert _circles({"a": {"b"}, "b": set()}) == []


def _script_graph(folder: Path) -> dict[str, set[str]]:
    """The scripts of one folder import each other by bare name (their folder is on sys.path)."""
    names = {p.stem for p in folder.glob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in names}
    for path in folder.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                graph[path.stem] |= {a.name for a in node.names if a.name in names}
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module in names:
                graph[path.stem].add(node.module)
    return graph


@pytest.mark.parametrize("folder", ["tools", "scripts", "scripts/validate"])
def test_no_import_circle_among_scripts(folder):
    graph = _script_graph(ROOT / folder)
    if folder == "tools":  # a known edge, so an empty graph cannot pass
        assert "mutation" in graph["mutation_report"]
    assert not _circles(graph), f"{folder}/ import circles: {_circles(graph)}"
