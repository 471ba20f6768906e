"""The wheel the packaging tests install: built once per session from this checkout, offline."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
        check=True,
        capture_output=True,
    )
    assert len(list(out.glob("millstream-*.tar.gz"))) == 1
    (built,) = out.glob("millstream-*.whl")
    return built


def clean_environment() -> dict[str, str]:
    """This process's environment without what points Python at this checkout or at the test venv."""
    return {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
