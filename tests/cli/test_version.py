"""``millstream --version`` and ``millstream.__version__`` report the version pyproject.toml declares."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import millstream

REPO = Path(__file__).resolve().parents[2]


def declared_version() -> str:
    with (REPO / "pyproject.toml").open("rb") as file:
        return str(tomllib.load(file)["project"]["version"])


def test_package_version_is_the_one_pyproject_declares() -> None:
    assert millstream.__version__ == declared_version()


def test_version_option_prints_the_version_and_exits_zero() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "millstream.cli.main", "--version"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"millstream {declared_version()}"
