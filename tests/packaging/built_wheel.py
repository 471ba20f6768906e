"""The wheel of this checkout, built once per test session and shared by pytest-xdist's workers.

Two builds of one checkout at once race: ``python -m build`` and ``pip install <checkout>`` both write the
checkout's ``build/`` and ``millstream.egg-info/`` directories. With ``-n 2`` the packaging tests' build and the YARN
tests' packed venv (which installed the checkout itself) once ran on both workers at the same time, and the build
failed. So every test that needs the package built takes this one wheel: the first worker to ask builds it under a
file lock, the others wait for it and install it."""

from __future__ import annotations

import fcntl
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def session_wheel(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """The wheel built for this session (``worker_id``: pytest-xdist's, ``master`` without workers)."""
    if worker_id == "master":  # no workers: this session's own directory
        return _build(tmp_path_factory.mktemp("dist"))
    shared = tmp_path_factory.getbasetemp().parent  # one per session, shared by its workers
    with (shared / "dist.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        out = shared / "dist"
        built = sorted(out.glob("millstream-*.whl"))
        if built:
            return built[0]
        out.mkdir(exist_ok=True)
        return _build(out)


def _build(out: Path) -> Path:
    result = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        pytest.fail(
            f"python -m build of {ROOT} failed ({result.returncode}):\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
        )
    assert len(list(out.glob("millstream-*.tar.gz"))) == 1
    (built,) = out.glob("millstream-*.whl")
    return built
