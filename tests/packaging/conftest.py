"""The wheel the packaging tests install: built once per session from this checkout, offline (``built_wheel``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.packaging.built_wheel import session_wheel


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    return session_wheel(tmp_path_factory, worker_id)


def clean_environment() -> dict[str, str]:
    """This process's environment without what points Python at this checkout or at the test venv."""
    return {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
