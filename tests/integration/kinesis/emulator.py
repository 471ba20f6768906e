"""kinesalite, a Kinesis API emulator from npm, for the Kinesis tests and benchmark.

    python -m tests.integration.kinesis.emulator fetch    # npm ci into the cache (make kinesalite)
    python -m tests.integration.kinesis.emulator run      # start one and print its endpoint

The npm packages of ``tools/kinesis/package-lock.json`` are installed with ``npm ci`` into
``$MILLSTREAM_KINESALITE_CACHE`` (default ``~/.cache/millstream/kinesalite``), in a directory named
after the lock file's hash, so a version change installs again and several checkouts share one copy.
The install happens in a temporary directory renamed into place: concurrent sessions never see half
of it. The server is ``tools/kinesis/server.js`` (why a wrapper: see there), bound to 127.0.0.1 on a
free port, in memory, and dies with the process that started it.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType

REPO = Path(__file__).resolve().parents[3]
TOOLS = REPO / "tools" / "kinesis"
LOCK = TOOLS / "package-lock.json"
READY = "kinesalite listening on "
REGION = "us-east-1"
ACCESS_KEY = "millstream-test"
SECRET_KEY = "millstream-test-secret"


class EmulatorError(RuntimeError):
    """kinesalite could not be installed or started; the message says which step and why."""


def cache_root() -> Path:
    configured = os.environ.get("MILLSTREAM_KINESALITE_CACHE")
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "millstream" / "kinesalite"


def install_dir() -> Path:
    digest = hashlib.sha256(LOCK.read_bytes()).hexdigest()[:12]
    return cache_root() / f"lock-{digest}"


def fetch(quiet: bool = True) -> Path:
    """The directory holding ``node_modules`` with kinesalite, installed with npm first if needed."""
    target = install_dir()
    if (target / ".complete").exists():
        return target
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        raise EmulatorError("Node.js and npm must be on PATH: the Kinesis tests run kinesalite from npm")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="install-", dir=target.parent))
    shutil.copy(TOOLS / "package.json", staging / "package.json")
    shutil.copy(LOCK, staging / "package-lock.json")
    command = [npm, "ci", "--omit=optional", "--ignore-scripts", "--no-audit", "--no-fund"]
    completed = subprocess.run(command, cwd=staging, capture_output=quiet, text=True, check=False)
    if completed.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise EmulatorError(f"npm ci of {LOCK} failed: {(completed.stderr or '').strip()[-2000:]}")
    (staging / ".complete").touch()
    try:
        staging.rename(target)
    except OSError:  # another session installed it meanwhile
        shutil.rmtree(staging, ignore_errors=True)
    return target


class Kinesalite:
    """One emulator process: ``start``, use ``endpoint``, ``stop`` (or use it as a context manager)."""

    def __init__(self) -> None:
        self.endpoint = ""
        self.process: subprocess.Popen[str] | None = None
        self._output: list[str] = []

    def start(self, timeout: float = 60.0) -> Kinesalite:
        modules = fetch() / "node_modules"
        env = {**os.environ, "NODE_PATH": str(modules)}
        self.process = subprocess.Popen(
            ["node", str(TOOLS / "server.js"), "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )
        ready = threading.Event()
        threading.Thread(target=self._pump, args=(ready,), daemon=True).start()
        deadline = time.monotonic() + timeout
        while not ready.wait(0.05):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise EmulatorError("kinesalite did not start: " + "".join(self._output)[-2000:])
        return self

    def _pump(self, ready: threading.Event) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            self._output.append(line)
            if line.startswith(READY):
                self.endpoint = "http://" + line[len(READY) :].strip()
                ready.set()

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def __enter__(self) -> Kinesalite:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()


def _die_with_parent() -> None:
    """Linux: the emulator gets SIGTERM when the process that started it dies, even by SIGKILL."""
    import ctypes

    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["fetch", "run"])
    args = parser.parse_args()
    if args.command == "fetch":
        print(fetch(quiet=False))
        return
    with Kinesalite() as emulator:
        print(f"{emulator.endpoint} (region {REGION}); Ctrl-C stops it", flush=True)
        try:
            while emulator.process is not None and emulator.process.poll() is None:
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
