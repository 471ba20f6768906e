"""What the harnesses that start servers for the tests (Kafka broker, moto, Azurite, kinesalite) share:
children that die with the test process, a stop that escalates, and npm installs into a shared cache."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


class EmulatorError(RuntimeError):
    """A server could not be installed or started; the message says which, which step and why."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:
    """Runs in the child before exec: SIGTERM it when the process that started it dies, even by SIGKILL."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def child_setup() -> Callable[[], None] | None:
    """``preexec_fn`` for a server child: on Linux it dies with us, so a killed test run leaves none behind."""
    return _die_with_parent if sys.platform.startswith("linux") else None


def stop_process(process: subprocess.Popen[Any] | None, timeout: float = 10.0) -> None:
    """SIGTERM (a clean shutdown), SIGKILL if that takes longer than ``timeout``."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


def cache_dir(variable: str, name: str) -> Path:
    """``$<variable>``, else ``$XDG_CACHE_HOME/millstream/<name>`` (default ``~/.cache``)."""
    configured = os.environ.get(variable)
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "millstream" / name


def maven_libs(pom: Path, cache: Path, marker: str, what: str, *, quiet: bool = True) -> Path:
    """The directory of ``pom``'s dependency JARs under ``cache``, named after the pom's hash (so a new version
    fetches again and checkouts share one copy), copied there by Maven first if it is not cached yet. The copy
    is made in a temporary directory and renamed into place, so concurrent sessions never see a half-filled
    directory; ``marker`` is a glob one of the JARs must match, or the fetch failed."""
    target = cache / f"pom-{hashlib.sha256(pom.read_bytes()).hexdigest()[:12]}" / "libs"
    if (target / ".complete").exists():
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise EmulatorError(f"Maven ('mvn') is not on PATH: it fetches {what}'s JARs from Maven Central")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="libs-", dir=target.parent))
    command = [mvn, "-B", "-f", str(pom), "dependency:copy-dependencies", f"-DoutputDirectory={staging}"]
    if quiet:
        command.insert(1, "-q")
    completed = subprocess.run(command, capture_output=quiet, text=True, check=False)
    if completed.returncode != 0 or not any(staging.glob(marker)):
        shutil.rmtree(staging, ignore_errors=True)
        output = (completed.stdout or "") + (completed.stderr or "")
        raise EmulatorError(
            f"'{' '.join(command)}' (exit {completed.returncode}) did not fetch {what} ({marker}):\n{output[-4000:]}"
        )
    (staging / ".complete").write_text(pom.read_text())
    try:
        staging.rename(target)
    except OSError:  # another session finished first; its copy is as good as ours
        shutil.rmtree(staging, ignore_errors=True)
        if not (target / ".complete").exists():
            raise
    return target


def npm_install(
    target: Path, npm_args: list[str], what: str, *, prepare: Callable[[Path], None] | None = None, quiet: bool = True
) -> Path:
    """Run ``npm <npm_args>`` in a temporary directory beside ``target`` and rename it into place, so that
    concurrent sessions never see half an install; returns ``target`` (another session's, if it won)."""
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        raise EmulatorError(f"Node.js and npm must be on PATH to install {what}")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        if prepare is not None:
            prepare(staging)
        completed = subprocess.run(
            [npm, *npm_args, "--no-audit", "--no-fund"],
            cwd=staging, capture_output=quiet, text=True, timeout=900, check=False,
        )  # fmt: skip
        if completed.returncode != 0:
            raise EmulatorError(f"npm could not install {what}:\n{(completed.stderr or '').strip()[-4000:]}")
        (staging / ".complete").touch()
        try:
            staging.rename(target)
        except OSError:
            if not target.is_dir():  # not another session's install: a real failure
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


class ServerProcess:
    """A server child process used as a context manager: ``with Server(...) as server:``."""

    process: subprocess.Popen[Any] | None = None

    def start(self, timeout: float = 60.0) -> Any:
        raise NotImplementedError

    def stop(self) -> None:
        process, self.process = self.process, None
        stop_process(process)

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
