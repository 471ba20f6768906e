"""Load an example's ``run.py`` as the user runs it: from its own directory, beside its task modules."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tests.integration.kinesis.conftest import kinesalite, kinesis_endpoint  # noqa: F401  (started on demand)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def example(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """``example(name)`` returns the example's ``run`` module, its directory first on ``sys.path`` (the
    examples' task modules are plain modules beside their config, not a package)."""

    def load(name: str) -> ModuleType:
        directory = EXAMPLES / name
        monkeypatch.syspath_prepend(str(directory))
        spec = importlib.util.spec_from_file_location(f"examples_{name}_run", directory / "run.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    yield load
    for name in [name for name, module in sys.modules.items() if str(EXAMPLES) in str(getattr(module, "__file__", ""))]:
        del sys.modules[name]
