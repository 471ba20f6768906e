"""The built wheel works on its own: installed into a clean venv without the test toolchain, its command
starts and a job runs in process.

Offline and fast: the wheel is built without build isolation (the test extra carries the backend), and the
clean venv gets the package's runtime dependencies — and only those, found through their installed
metadata — from this environment by symlinks, so nothing is fetched and the test tools stay out of reach.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from importlib.metadata import Distribution, PackageNotFoundError, distribution
from pathlib import Path

import pytest

import millstream
from tests.packaging.conftest import clean_environment

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TOOLCHAIN = ("pytest", "hypothesis", "mypy", "ruff", "moto", "importlinter")


def _requirement_name(requirement: str) -> str | None:
    """The distribution a base (no extra) requirement names; None for a requirement of an extra."""
    if "extra ==" in requirement:
        return None
    match = re.match(r"[A-Za-z0-9._-]+", requirement)
    return match.group(0) if match else None


def _runtime_closure(name: str) -> list[Distribution]:
    """``name``'s dependencies, transitively, as installed here (millstream itself excluded)."""
    seen: dict[str, Distribution] = {}
    pending = [req for req in distribution(name).requires or []]
    while pending:
        dep = _requirement_name(pending.pop())
        if dep is None or dep.lower().replace("_", "-") in seen:
            continue
        try:
            found = distribution(dep)
        except PackageNotFoundError:  # an environment marker excluded it here
            continue
        seen[dep.lower().replace("_", "-")] = found
        pending.extend(found.requires or [])
    return list(seen.values())


def _link_distribution(found: Distribution, target: Path) -> None:
    """Symlink a distribution's top-level packages, modules and metadata directory into ``target``."""
    for file in found.files or []:
        top = file.parts[0]
        if top.endswith(".data") or top == ".." or top == "__pycache__":
            continue
        source = Path(str(found.locate_file(top)))
        link = target / top
        if source.exists() and not link.exists():
            link.symlink_to(source)


@pytest.fixture(scope="module")
def clean_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("venv")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-index", "--no-deps", str(wheel)],
        check=True,
        capture_output=True,
        env=clean_environment(),  # a PYTHONPATH to a checkout would make pip take the wheel as installed already
    )
    deps = base / "deps"
    deps.mkdir()
    for found in _runtime_closure("millstream"):
        _link_distribution(found, deps)
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(purelib) / "runtime_deps.pth").write_text(f"{deps}\n")
    return venv


def _run(venv: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = clean_environment()
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_the_wheel_carries_the_package_and_its_type_marker(wheel: Path) -> None:
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    assert "millstream/py.typed" in names
    assert "millstream/config/views.py" in names
    assert not [name for name in names if name.startswith("tests/")]


def test_the_installed_command_prints_the_version(clean_venv: Path, tmp_path: Path) -> None:
    result = _run(clean_venv, str(clean_venv / "bin" / "millstream"), "--version", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert millstream.__version__ in result.stdout


def test_an_in_process_job_runs_from_the_wheel_without_the_test_toolchain(clean_venv: Path, tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import importlib.util, sys
            import millstream
            from millstream import OutgoingMessageEnvelope, StreamTask, SystemStream
            from millstream.testing import TestRunner

            assert not millstream.__file__.startswith({str(ROOT)!r}), millstream.__file__
            reachable = [name for name in {TOOLCHAIN!r} if importlib.util.find_spec(name) is not None]
            assert not reachable, reachable

            class Upper(StreamTask):
                def process(self, envelope, collector, coordinator):
                    collector.send(OutgoingMessageEnvelope(SystemStream("log", "out"), envelope.message.upper(),
                                                           key=envelope.key))

            result = (
                TestRunner(Upper, {{"systems.log.samza.key.serde": "string", "systems.log.samza.msg.serde": "string"}})
                .add_input("in", [("a", "x"), ("b", "y")])
                .add_output("out")
                .run()
            )
            print(sorted(result.output("out")))
            """
        )
    )
    result = _run(clean_venv, str(clean_venv / "bin" / "python"), str(script), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "[('a', 'X'), ('b', 'Y')]" in result.stdout
