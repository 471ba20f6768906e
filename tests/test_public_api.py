"""The examples and the documentation import only millstream's declared public surface (Kafka Streams'
``internals`` rule, enforced): ``millstream`` itself (its ``__all__``) and the modules of
``millstream.PUBLIC_MODULES``. What a reader copies then keeps working when an internal module moves."""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

import millstream
from tests.docs.test_code_blocks import PAGES, ROOT, blocks

EXAMPLES = sorted((ROOT / "examples").rglob("*.py"))


def internal_imports(source: str) -> Iterator[tuple[int, str]]:
    """``(line, what)`` for every import of millstream outside the public surface in ``source``."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
            if node.module == "millstream":
                names = [alias.name for alias in node.names]
                yield from ((node.lineno, f"millstream.{n}") for n in names if n != "*" and n not in millstream.__all__)
                continue
            modules = [node.module]
        else:
            continue
        for module in modules:
            if module.partition(".")[0] == "millstream" and module not in millstream.PUBLIC_MODULES:
                yield node.lineno, module


def test_the_checker_finds_internal_imports_and_passes_public_ones():
    source = (
        "import millstream.spark.run.runner\n"
        "from millstream.coordinator.prepare import load_job_config\n"
        "from millstream import Job, _LAZY\n"
        "from millstream import Count, SystemStream\n"
        "from millstream.testing import TestRunner\n"
        "import orjson\n"
    )
    assert list(internal_imports(source)) == [
        (1, "millstream.spark.run.runner"),
        (2, "millstream.coordinator.prepare"),
        (3, "millstream._LAZY"),
    ]


def test_every_public_module_and_top_level_name_exists():
    for module in millstream.PUBLIC_MODULES:
        importlib.import_module(module)
    for name in millstream.__all__:
        assert getattr(millstream, name) is not None, name


def test_the_api_reference_declares_every_public_module():
    page = (ROOT / "docs" / "reference" / "api.md").read_text(encoding="utf-8")
    assert [module for module in millstream.PUBLIC_MODULES if f"`{module}`" not in page] == []


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: str(p.relative_to(ROOT)))
def test_an_example_imports_only_public_names(path: Path):
    found = [f"{path.relative_to(ROOT)}:{line} imports {what}" for line, what in internal_imports(path.read_text())]
    assert found == [], f"not in millstream.__all__ or millstream.PUBLIC_MODULES: {found}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_documentation_page_imports_only_public_names_in_its_code_blocks(page: Path):
    found = [
        f"{block.page}:{block.line + line} imports {what}"
        for block in blocks(page)
        for line, what in internal_imports(block.code)
    ]
    assert found == [], f"not in millstream.__all__ or millstream.PUBLIC_MODULES: {found}"
