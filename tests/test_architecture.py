"""The package structure stays one-way: no package imports another that imports it back (directly or
through others), no module imports a higher layer, and no function grows past a screen and a half."""

from __future__ import annotations

import ast
from pathlib import Path

from tests import architecture

MAX_FUNCTION_LINES = 80


def test_no_package_cycle_remains() -> None:
    assert architecture.cycles(architecture.package_graph()) == []


def test_no_module_imports_a_higher_layer() -> None:
    assert [f"{e.path}:{e.line} {e.source} -> {e.target}" for e in architecture.upward_imports()] == []


def test_every_module_of_the_package_belongs_to_a_layer() -> None:
    order = architecture.layers()
    unplaced = [
        name
        for name in architecture.modules()
        if architecture.layer_of(name, order) is None and name.count(".") > 0 and not _is_bare_package(name)
    ]
    assert unplaced == []


def test_no_function_is_longer_than_80_lines() -> None:
    too_long = [f for f in architecture.functions() if f.length > MAX_FUNCTION_LINES]
    assert [f"{f.path}:{f.line} {f.name} ({f.length} lines)" for f in too_long] == []


def test_the_cycle_finder_finds_a_cycle_through_three_packages() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert architecture.cycles(graph) == [["a", "b", "c"]]


def test_imports_inside_functions_and_type_checking_blocks_count(tmp_path: Path) -> None:
    package = tmp_path / "millstream"
    (package / "low").mkdir(parents=True)
    (package / "high").mkdir()
    for path in (package / "__init__.py", package / "low" / "__init__.py", package / "high" / "__init__.py"):
        path.write_text("")
    (package / "high" / "top.py").write_text("from millstream.low import base\n")
    (package / "low" / "base.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import millstream.high.top\n"
        "def late():\n    from millstream.high import top\n"
    )
    graph = architecture.package_graph(tmp_path)
    assert graph["millstream.low"] == {"millstream.high"}
    assert architecture.cycles(graph) == [["millstream.high", "millstream.low"]]


def _is_bare_package(name: str) -> bool:
    """A package whose ``__init__`` only documents or re-exports its own modules (``millstream.systems``)."""
    path = architecture.modules()[name]
    return path.name == "__init__.py"


def test_a_config_view_is_parsed_only_by_the_settings_that_keep_it() -> None:
    """Outside ``millstream/config/``, no code parses a schema itself (``X.of``, ``X.read``, ``X.parse``): it reads
    the job's settings (``config.task``, ``config.view(X)``), which parse each view once (issue 34)."""
    sources = {path: ast.parse(path.read_text()) for path in Path("millstream").rglob("*.py")}
    views = {"ConfigView"}
    grew = True
    while grew:  # every class deriving from a view, wherever it is defined
        found = {
            node.name
            for tree in sources.values()
            for node in ast.walk(tree)
            if isinstance(node, ast.ClassDef) and any(isinstance(b, ast.Name) and b.id in views for b in node.bases)
        }
        grew = not found <= views
        views |= found
    parses = [
        f"{path}:{node.lineno} {node.func.value.id}.{node.func.attr}"
        for path, tree in sources.items()
        if Path("millstream/config") not in path.parents
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("of", "read", "parse")
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id in views
    ]
    assert len(views) > 15  # the finder found the schemas, the systems' own included
    assert parses == []
