"""The package structure read from the code: which package imports which, cycles, sizes.

``python -m tests.architecture`` prints the figures a reviewer of the layers looks at (package cycles,
imports that run against the layer order of ``pyproject.toml``, the longest functions, the largest
modules); ``tests/test_architecture.py`` fails on any package cycle or over-long function. Imports are
read from the AST, so imports inside functions and under ``TYPE_CHECKING`` count too.
"""

from __future__ import annotations

import ast
import tomllib
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "millstream"


@dataclass(frozen=True)
class Import:
    source: str
    target: str
    path: Path
    line: int


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its ``__init__``)."""
    found = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def package_of(module: str, known: dict[str, Path]) -> str:
    """The package a module belongs to: itself when it is a package, else its parent (a top-level module
    such as ``millstream.model`` counts as a package of its own)."""
    if known[module].name == "__init__.py" or module.count(".") == 1:
        return module
    return module.rpartition(".")[0]


def imports(root: Path = ROOT) -> Iterator[Import]:
    known = modules(root)
    for name, path in known.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            resolved = {_resolve(target, known) for target in _targets(node, name, is_package)}
            for target in sorted({target for target in resolved if target is not None} - {name}):
                yield Import(name, target, path, node.lineno)


def _targets(node: ast.AST, module: str, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - node.level + 1]
        prefix = ".".join([*base, node.module] if node.module else base)
    else:
        prefix = node.module or ""
    return [f"{prefix}.{alias.name}" for alias in node.names] + [prefix]


def _resolve(target: str, known: dict[str, Path]) -> str | None:
    """The longest known module a dotted name starts with (``from a.b import C`` names ``a.b``)."""
    while target:
        if target in known:
            return target
        target = target.rpartition(".")[0]
    return None


def package_graph(root: Path = ROOT) -> dict[str, set[str]]:
    known = modules(root)
    graph: dict[str, set[str]] = defaultdict(set)
    for edge in imports(root):
        source, target = package_of(edge.source, known), package_of(edge.target, known)
        if source != target and target != PACKAGE and source != PACKAGE:
            graph[source].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one package (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph.get(node, ())):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(set(graph) | {t for targets in graph.values() for t in targets}):
        if node not in index:
            visit(node)
    return found


def layers(root: Path = ROOT) -> list[list[str]]:
    """The layers of the import-linter contract in ``pyproject.toml``, bottom first."""
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    contract = next(c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers")
    return [[part.strip() for part in layer.replace(":", "|").split("|")] for layer in reversed(contract["layers"])]


def layer_of(module: str, order: list[list[str]]) -> int | None:
    for level, members in enumerate(order):
        if any(module == m or module.startswith(m + ".") for m in members):
            return level
    return None


def upward_imports(root: Path = ROOT) -> list[Import]:
    """Imports from a lower layer into a higher one: what the layer contract forbids."""
    order = layers(root)
    found = []
    for edge in imports(root):
        source, target = layer_of(edge.source, order), layer_of(edge.target, order)
        if source is not None and target is not None and target > source:
            found.append(edge)
    return found


@dataclass(frozen=True)
class Function:
    name: str
    path: Path
    line: int
    length: int


def functions(root: Path = ROOT) -> list[Function]:
    """Every function and method of the package, longest first."""
    found = []
    for path in modules(root).values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                found.append(Function(node.name, path.relative_to(root), node.lineno, length))
    return sorted(found, key=lambda f: -f.length)


def module_sizes(root: Path = ROOT) -> list[tuple[int, Path]]:
    sizes = [(len(p.read_text(encoding="utf-8").splitlines()), p.relative_to(root)) for p in modules(root).values()]
    return sorted(sizes, reverse=True)


def report(root: Path = ROOT) -> str:
    lines = []
    found = cycles(package_graph(root))
    lines.append(f"package cycles: {len(found)}")
    lines.extend(f"  {{{', '.join(component)}}}" for component in found)
    upward = upward_imports(root)
    lines.append(f"upward imports (against the layers in pyproject.toml): {len(upward)}")
    lines.extend(f"  {e.path.relative_to(root)}:{e.line} {e.source} -> {e.target}" for e in upward)
    lines.append("longest functions:")
    lines.extend(f"  {f.length:4d} {f.path}:{f.line} {f.name}" for f in functions(root)[:5])
    lines.append("largest modules:")
    lines.extend(f"  {size:4d} {path}" for size, path in module_sizes(root)[:5])
    return "\n".join(lines)


if __name__ == "__main__":
    print(report())
