"""A venv with the oldest pyspark the package allows, for the test that runs jobs on it.

    python -m tests.packaging.oldest_pyspark fetch     # make oldest-pyspark

The version is the lower bound of the pyspark requirement in ``pyproject.toml``. The venv holds that pyspark,
the package's other runtime dependencies and its ``dataframes`` extra, all from PyPI, and lives in
``$MILLSTREAM_OLDEST_PYSPARK_CACHE`` (default ``~/.cache/millstream/pyspark-<version>``); a marker file written
last says it is complete, so an interrupted build is started over rather than used. millstream itself is not
in it: the test installs the wheel it builds, so every run checks the code of that run.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.integration.processes import cache_dir

REPO = Path(__file__).resolve().parents[2]
COMPLETE = "complete"


def _project() -> dict[str, object]:
    project: dict[str, object] = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return project


def oldest_pyspark() -> str:
    """The lowest pyspark version ``pyproject.toml`` allows, as ``X.Y.Z``."""
    dependencies = _project()["dependencies"]
    assert isinstance(dependencies, list)
    (requirement,) = [dep for dep in dependencies if re.match(r"pyspark\s*[<>=!~]", dep)]
    match = re.search(r">=\s*([0-9.]+)", requirement)
    if match is None:
        raise ValueError(f"the pyspark requirement {requirement!r} has no lower bound")
    parts = [*match.group(1).split("."), "0", "0"][:3]
    return ".".join(parts)


def requirements(version: str) -> list[str]:
    """The package's runtime and ``dataframes`` requirements, with pyspark pinned to ``version``."""
    project = _project()
    dependencies = project["dependencies"]
    extras = project["optional-dependencies"]
    assert isinstance(dependencies, list) and isinstance(extras, dict)
    base = [dep for dep in dependencies if not re.match(r"pyspark\s*[<>=!~]", dep)]
    return [f"pyspark=={version}", *base, *extras["dataframes"]]


def venv_dir() -> Path:
    version = oldest_pyspark()
    return cache_dir("MILLSTREAM_OLDEST_PYSPARK_CACHE", f"pyspark-{version}")


def ensure_venv(quiet: bool = True) -> Path:
    """The venv's directory, built first if it is not complete yet."""
    venv = venv_dir()
    if (venv / COMPLETE).exists():
        return venv
    shutil.rmtree(venv, ignore_errors=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", *(["-q"] if quiet else [])]
    subprocess.run([*pip, *requirements(oldest_pyspark())], check=True)
    (venv / COMPLETE).write_text(oldest_pyspark())
    return venv


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["fetch"])
    parser.parse_args()
    print(ensure_venv(quiet=False))


if __name__ == "__main__":
    main()
